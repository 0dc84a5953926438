"""Both Kafka clients put a key on the same partition: a node's agent (kafka-python) and its
trainer hook (confluent-kafka, FAULTLENS_CLIENT) must feed the same node-stage member."""

from __future__ import annotations

import dataclasses

import pytest

from faultlens.streams.kafka_client import confluent_available
from faultlens.streams.producer import Producer
from faultlens.streams.reader import read_topic

pytestmark = pytest.mark.broker


def test_the_same_key_lands_on_the_same_partition_with_either_client(kafka_settings, fresh_topic):
    if not confluent_available():
        pytest.skip("confluent-kafka is not installed (pip install 'faultlens[fast]')")
    topic = fresh_topic(partitions=6)
    keys = [f"n{i:03d}".encode() for i in range(40)]
    for client in ("kafka-python", "confluent"):
        with Producer(dataclasses.replace(kafka_settings, client=client)) as p:
            for k in keys:
                p.send(topic, k, client.encode())
            p.flush()
    where: dict[tuple[bytes, bytes], int] = {}
    for r in read_topic(kafka_settings, topic, idle_s=1.5):
        where[(r.key, r.value)] = r.partition
    assert len(where) == 2 * len(keys)
    assert len({where[(k, b"kafka-python")] for k in keys}) > 1  # the keys do spread
    assert all(where[(k, b"kafka-python")] == where[(k, b"confluent")] for k in keys)
