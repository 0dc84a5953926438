"""`--idle-stop` (replays, tests) stops a member only when nothing is left to read: a member
starved of CPU polls nothing for seconds while thousands of records wait (issue 32: a node-stage
member left a backlog with 9,077 records unread, and its partitions' telemetry never reached the
job stage)."""

from __future__ import annotations

import time

import pytest
from kafka.structs import TopicPartition

from streams.kafka_client import open_consumer
from streams.producer import Producer
from streams.runner import GroupRunner

pytestmark = pytest.mark.broker


def test_unread_records_keep_an_idle_member_reading(client_settings, fresh_topic):
    topic = fresh_topic(2)
    with Producer(client_settings) as producer:
        for i in range(20):
            producer.send(topic, f"k{i}".encode(), b"{}", i % 2)
        producer.flush()
    consumer = open_consumer(client_settings, None)
    parts = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    try:
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        assert GroupRunner._unread(consumer)  # nothing read yet: 20 records wait
        read, deadline = 0, time.monotonic() + 30
        while read < 20 and time.monotonic() < deadline:
            read += sum(len(v) for v in consumer.poll(timeout_ms=500).values())
        assert read == 20
        assert not GroupRunner._unread(consumer)  # all read: an idle stop may go
    finally:
        consumer.close()
