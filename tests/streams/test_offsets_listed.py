"""A partition's start and end as either client lists them: in one request for every partition
(confluent: ListOffsets with Kafka's -2 / -1, streams/confluent_consumer.py), the same offsets the
broker gives one partition at a time. Asked one by one, an assigned confluent consumer waited behind
its fetch for each (`faultlens record` over 55 topics: 28 s against kafka-python's 6 s)."""

from __future__ import annotations

import dataclasses

import pytest
from kafka.structs import TopicPartition

from faultlens.streams.kafka_client import open_consumer
from faultlens.streams.producer import Producer

pytestmark = pytest.mark.broker


def test_beginning_and_end_offsets_of_many_partitions_at_once(client_settings, fresh_topic):
    topic, empty = fresh_topic(partitions=3), fresh_topic(partitions=2)
    with Producer(client_settings) as p:
        for i in range(30):
            p.send(topic, key=f"k{i % 7}".encode(), value=b"x", partition=i % 3)
        p.flush()
    parts = [TopicPartition(topic, i) for i in range(3)] + [TopicPartition(empty, i) for i in range(2)]
    listed = {}
    for client in ("kafka-python", client_settings.client):  # kafka-python's answer is the reference
        consumer = open_consumer(dataclasses.replace(client_settings, client=client), group=None)
        try:
            listed[client] = consumer.beginning_offsets(parts), consumer.end_offsets(parts)
        finally:
            consumer.close()
    starts, ends = listed[client_settings.client]
    assert (starts, ends) == listed["kafka-python"]
    assert all(ends[tp] > starts[tp] for tp in parts[:3]) and all(ends[tp] == starts[tp] for tp in parts[3:])

def test_no_partition_asked_is_an_empty_answer(client_settings):
    consumer = open_consumer(client_settings, group=None)
    try:
        assert consumer.end_offsets([]) == {} and consumer.beginning_offsets([]) == {}
    finally:
        consumer.close()
