"""kafka-python's position read straight from its state where it holds one
(streams/kafka_client.KafkaPythonConsumer.position): the same offset kafka-python's own position
gives, after reads, pauses and seeks."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer
from kafka.structs import TopicPartition

from faultlens.streams.kafka_client import open_consumer
from faultlens.streams.producer import Producer
from tests.progress import wait_until

pytestmark = pytest.mark.broker


def test_position_is_kafka_pythons_own(kafka_settings, fresh_topic):
    topic = fresh_topic(partitions=2)
    with Producer(kafka_settings) as p:
        for i in range(50):
            p.send(topic, b"k", f"m{i}".encode(), partition=i % 2)
        p.flush()
    parts = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    consumer = open_consumer(kafka_settings, None, max_records=7)
    try:
        consumer.assign(parts)
        consumer.seek(parts[0], 3)
        consumer.seek(parts[1], 0)
        seen = {tp: 0 for tp in parts}

        def read() -> bool:
            for tp, messages in consumer.poll(timeout_ms=100).items():
                seen[tp] = messages[-1].offset + 1
            return all(seen[tp] for tp in parts)

        wait_until(read, progress=lambda: sum(seen.values()), stall_s=30, limit_s=120, what="records of both partitions")
        for tp in parts:
            assert consumer.position(tp) == KafkaConsumer.position(consumer, tp) == seen[tp]
        consumer.pause(parts[0])
        consumer.seek(parts[1], 20)
        assert consumer.position(parts[0]) == KafkaConsumer.position(consumer, parts[0]) == seen[parts[0]]
        assert consumer.position(parts[1]) == KafkaConsumer.position(consumer, parts[1]) == 20
        consumer.seek_to_beginning(parts[1])  # a reset pending: the long way, which resolves it
        assert consumer.position(parts[1]) == 0
    finally:
        consumer.close()
