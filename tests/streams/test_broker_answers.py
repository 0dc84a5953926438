"""`answers`, the TCP probe every client of ours makes before a Kafka client (the outbox, the agent's
publisher, the command listeners): it reads the whole bootstrap list, as the Kafka clients do."""

from __future__ import annotations

import socket

from faultlens.streams.broker import KAFKA_PORT, answers, bootstrap_addresses
from faultlens.streams.local_port import free_port


def test_a_list_answers_when_any_of_its_brokers_does():
    with socket.socket() as live:
        live.bind(("127.0.0.1", 0))
        live.listen()
        port = live.getsockname()[1]
        dead = free_port()  # nothing listens there
        # The first broker listed is down (maintenance, a replaced host): the cluster is still there.
        assert answers(f"127.0.0.1:{dead},127.0.0.1:{port}", 0.5)
        assert answers(f"127.0.0.1:{port}", 0.5)
        assert not answers(f"127.0.0.1:{dead}", 0.5)
        assert not answers(f"127.0.0.1:{dead}, 127.0.0.1:{dead}", 0.5)


def test_bootstrap_addresses_read_every_form_a_kafka_client_takes():
    assert bootstrap_addresses("b1:9093, b2:9094,") == [("b1", 9093), ("b2", 9094)]
    assert bootstrap_addresses("kafka.internal") == [("kafka.internal", KAFKA_PORT)]
    assert bootstrap_addresses("[::1]:9095,[fd00::2]") == [("::1", 9095), ("fd00::2", KAFKA_PORT)]
    assert bootstrap_addresses(":9092") == [("127.0.0.1", 9092)]


def test_an_address_that_is_no_address_is_not_answering_and_raises_nothing():
    # Before, int() of the port raised ValueError inside the probing thread (a listener's, the outbox's).
    assert bootstrap_addresses("host:port") == []
    assert not answers("host:port", 0.1)
    assert not answers("", 0.1)
