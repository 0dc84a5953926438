"""Pausing a partition and resuming it loses nothing and stalls nothing, with either client: the
event-time runner pauses the partitions that run ahead and resumes them when the others catch
up (events/event_time.py, WatermarkMerge.to_pause)."""

from __future__ import annotations

import pytest
from kafka.structs import TopicPartition

from faultlens.streams.kafka_client import open_consumer
from faultlens.streams.producer import Producer
from tests.progress import wait_until

pytestmark = pytest.mark.broker

AHEAD, BEHIND = 300, 20


def _fill(settings, topic: str) -> None:
    with Producer(settings) as p:
        for i in range(AHEAD):
            p.send(topic, b"a", f"a{i}".encode(), partition=0)
        for i in range(BEHIND):
            p.send(topic, b"b", f"b{i}".encode(), partition=1)
        p.flush()


def _poll_until(consumer, seen: dict[int, set[int]], done) -> None:
    """Poll until ``done()``, failing when no record came for 30 s (the stall this file is about:
    records that never come back), not after a fixed 10 s a loaded machine outruns (issue 47)."""
    def read() -> bool:
        for tp, messages in consumer.poll(timeout_ms=100).items():
            seen[tp.partition].update(m.offset for m in messages)
        return done()

    wait_until(read, progress=lambda: sum(map(len, seen.values())), stall_s=30, limit_s=240,
               what="the partitions' records", poll_s=0)


def test_a_partition_paused_mid_batch_delivers_the_rest_after_resume(client_settings, fresh_topic):
    # kafka-python 3 parks the fetched records of a partition paused mid-batch and, once its
    # in-line slot held a drained batch, never handed them back after resume: this read stalled
    # with 10 of 300 records (streams/kafka_client.KafkaPythonConsumer).
    topic = fresh_topic(partitions=2)
    _fill(client_settings, topic)
    ahead, behind = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer = open_consumer(client_settings, None, max_records=10)
    try:
        consumer.assign([ahead, behind])
        consumer.seek(ahead, 0)
        consumer.seek(behind, 0)
        seen: dict[int, set[int]] = {0: set(), 1: set()}
        _poll_until(consumer, seen, lambda: len(seen[0]) > 0)
        assert 0 < len(seen[0]) < AHEAD  # part of a fetched batch is still in the client
        consumer.pause(ahead)
        _poll_until(consumer, seen, lambda: len(seen[1]) == BEHIND)
        got_while_paused = len(seen[0])
        for _ in range(5):  # a few polls with nothing left to hand out
            for tp, messages in consumer.poll(timeout_ms=50).items():
                seen[tp.partition].update(m.offset for m in messages)
        assert len(seen[0]) == got_while_paused  # a paused partition hands out nothing
        consumer.resume(ahead)
        _poll_until(consumer, seen, lambda: len(seen[0]) == AHEAD)
    finally:
        consumer.close()
    assert seen == {0: set(range(AHEAD)), 1: set(range(BEHIND))}
