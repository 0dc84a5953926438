"""kafka-python's own close races (streams/kafka_close_race.py): the records they log, made by
kafka-python's real transport, are at DEBUG; the same errors anywhere else stay ERRORs."""

from __future__ import annotations

import logging
import socket

import pytest
from kafka.errors import Cancelled, KafkaConnectionError, KafkaTimeoutError
from kafka.net.selector import NetworkSelector
from kafka.net.transport import KafkaTCPTransport

import faultlens.streams.kafka_client  # noqa: F401 - installs the filter, as every consumer's process does


@pytest.fixture
def kafka_at(request):
    """The ``kafka`` logger at the level given (the CLI keeps it at ERROR), restored after."""
    logger = logging.getLogger("kafka")
    before = logger.level
    logger.setLevel(request.param)
    yield request.param
    logger.setLevel(before)


@pytest.fixture
def net():
    selector = NetworkSelector()
    yield selector
    selector.close()


def _closed_transport(net: NetworkSelector) -> KafkaTCPTransport:
    mine, _ = socket.socketpair()
    transport = KafkaTCPTransport(net, mine)
    transport.close()  # the client's close: the socket set None, the transport closed
    return transport


def _kafka_records(caplog, level=logging.DEBUG) -> list[tuple[str, str, type | None]]:
    return [(r.name, r.levelname, r.exc_info[0] if r.exc_info else None) for r in caplog.records
            if r.name.startswith("kafka") and r.levelno >= level]


@pytest.mark.parametrize("kafka_at", [logging.ERROR], indirect=True)
def test_a_read_on_a_transport_its_client_closed_logs_no_error(kafka_at, net, caplog):
    transport = _closed_transport(net)
    with caplog.at_level(logging.DEBUG):
        data, err = transport._sock_recv()  # what the IO thread runs when it resumes the read then
    assert data == b"" and isinstance(err, KafkaConnectionError)  # kafka-python goes on as before
    assert _kafka_records(caplog, logging.INFO) == []


@pytest.mark.parametrize("kafka_at", [logging.DEBUG], indirect=True)
def test_at_debug_the_race_is_still_there_to_see(kafka_at, net, caplog):
    with caplog.at_level(logging.DEBUG):
        _closed_transport(net)._sock_recv()
    assert ("kafka.net.transport", "DEBUG", AttributeError) in _kafka_records(caplog)


@pytest.mark.parametrize("kafka_at", [logging.ERROR], indirect=True)
def test_a_receive_error_on_a_transport_still_open_stays_an_error(kafka_at, net, caplog):
    sock = socket.socket()
    transport = KafkaTCPTransport(net, sock)
    sock.close()  # gone under an open transport: not its client's close
    with caplog.at_level(logging.DEBUG):
        transport._sock_recv()
    assert _kafka_records(caplog) == [("kafka.net.transport", "ERROR", OSError)]


@pytest.mark.parametrize("kafka_at", [logging.ERROR], indirect=True)
def test_only_a_metadata_refresh_cancelled_by_the_close_is_quieted(kafka_at, caplog):
    cluster = logging.getLogger("kafka.cluster")
    with caplog.at_level(logging.DEBUG):
        cluster.error("Metadata refresh: failed %s", Cancelled())  # kafka/cluster.py's record at close
        cluster.error("Metadata refresh: failed %s", KafkaTimeoutError("no answer"))
    assert [r.getMessage() for r in caplog.records if r.name == "kafka.cluster"] == [
        "Metadata refresh: failed KafkaTimeoutError: no answer"]
