"""Seeks on a consumer given its partitions (no group), each moving only its own partition, with
either client: they must hand out the same records.

librdkafka refuses a seek of a partition it does not fetch yet ("Erroneous state"), which is every
partition right after ``assign``. The confluent adapter then started that partition at the offset by
assigning every partition again, the others at their stored offset: each such seek undid the ones
before it and moved back partitions already read. After ``assign([p0, p1]); seek(p0, 5); seek(p1,
0)`` the reads handed out p0 from 0 (streams/confluent_consumer.py, ConfluentConsumer.seek).
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from kafka.structs import TopicPartition

from faultlens.streams.kafka_client import open_consumer
from faultlens.streams.producer import Producer
from faultlens.streams.reader_ends import seek_past_end
from tests.progress import wait_until

pytestmark = pytest.mark.broker

N = 10  # records in each partition, offsets 0..N-1


def _filled(settings, fresh_topic, partitions: int) -> list[TopicPartition]:
    topic = fresh_topic(partitions=partitions)
    with Producer(settings) as p:
        for part in range(partitions):
            for i in range(N):
                p.send(topic, b"k", f"{part}-{i}".encode(), partition=part)
        p.flush()
    return [TopicPartition(topic, part) for part in range(partitions)]


@contextmanager
def _assigned(settings, parts: list[TopicPartition], max_records: int):
    """A consumer without a group, given ``parts``."""
    consumer = open_consumer(settings, None, max_records=max_records)
    try:
        consumer.assign(parts)
        yield consumer
    finally:
        consumer.close()


def _read(consumer, got: dict[TopicPartition, list[int]], done) -> None:
    """Poll into ``got`` (every offset handed out, in order, repeats kept) until ``done()``;
    fails when nothing came for 30 s."""

    def read() -> bool:
        for tp, messages in consumer.poll(timeout_ms=100).items():
            got.setdefault(tp, []).extend(m.offset for m in messages)
        return done()

    wait_until(
        read, progress=lambda: sum(map(len, got.values())), stall_s=30, limit_s=240, what="the partitions' records", poll_s=0
    )


def _to_the_end(got: dict[TopicPartition, list[int]], parts: list[TopicPartition]):
    return lambda: all(got.get(tp, [])[-1:] == [N - 1] for tp in parts)


def test_seeks_right_after_assign_each_move_only_their_partition(client_settings, fresh_topic):
    p0, p1, p2, p3 = parts = _filled(client_settings, fresh_topic, 4)
    with _assigned(client_settings, parts, 4) as consumer:
        consumer.seek(p0, 5)
        consumer.seek_to_beginning(p3)
        consumer.seek(p1, 0)
        consumer.seek(p2, 7)
        assert [consumer.position(tp) for tp in parts] == [5, 0, 7, 0]
        got: dict[TopicPartition, list[int]] = {}
        _read(consumer, got, _to_the_end(got, parts))
        assert got == {p0: list(range(5, N)), p1: list(range(N)), p2: list(range(7, N)), p3: list(range(N))}
        # Read to the end, then seeks back on two of them: the others stay where they are.
        consumer.seek(p1, 8)
        consumer.seek(p0, 2)
        again: dict[TopicPartition, list[int]] = {}
        _read(consumer, again, _to_the_end(again, [p0, p1]))
        assert again == {p0: list(range(2, N)), p1: [8, 9]}
        assert [consumer.position(tp) for tp in parts] == [N] * 4


def test_seeks_after_a_first_poll_keep_what_was_read_elsewhere(client_settings, fresh_topic):
    p0, p1, p2 = parts = _filled(client_settings, fresh_topic, 3)
    with _assigned(client_settings, parts, 3) as consumer:
        consumer.seek(p0, 4)
        before: dict[TopicPartition, list[int]] = {}
        _read(consumer, before, lambda: bool(before))
        # Some partition delivers; the seeks now come while the others may still be starting.
        consumer.seek(p1, 6)
        consumer.seek(p2, 3)
        assert [consumer.position(tp) for tp in (p1, p2)] == [6, 3]
        after: dict[TopicPartition, list[int]] = {}
        _read(consumer, after, _to_the_end(after, [p1, p2]))
        _read(consumer, after, lambda: (before.get(p0, []) + after.get(p0, []))[-1:] == [N - 1])
        assert before.get(p0, []) + after.get(p0, []) == list(range(4, N))
        assert after[p1] == list(range(6, N))
        assert after[p2] == list(range(3, N))


def test_a_paused_partition_seeked_right_after_assign_stays_paused(client_settings, fresh_topic):
    # streams/reader_ends.seek_past_end pauses some partitions and seeks the others.
    p0, p1, p2 = parts = _filled(client_settings, fresh_topic, 3)
    with _assigned(client_settings, parts, 4) as consumer:
        consumer.pause(p1)
        consumer.seek(p1, 4)
        consumer.seek(p0, 6)
        got: dict[TopicPartition, list[int]] = {}
        _read(consumer, got, _to_the_end(got, [p0, p2]))
        assert p1 not in got  # paused: nothing handed out while the others were read to their end
        consumer.resume(p1)
        _read(consumer, got, _to_the_end(got, [p1]))
        assert got == {p0: list(range(6, N)), p1: list(range(4, N)), p2: list(range(N))}


def test_a_seek_past_the_end_of_several_partitions_hands_out_only_what_comes_next(client_settings, fresh_topic):
    # The command listener and `record --from-now` (streams/reader_ends.seek_past_end): a seek of
    # each partition right after assign, the others paused.
    parts = _filled(client_settings, fresh_topic, 3)
    with _assigned(client_settings, parts, 4) as consumer:
        assert seek_past_end(consumer, parts) == {tp: N for tp in parts}
        assert [consumer.position(tp) for tp in parts] == [N] * 3
        with Producer(client_settings) as p:
            for tp in parts:
                p.send(tp.topic, b"k", b"new", partition=tp.partition)
            p.flush()
        got: dict[TopicPartition, list[int]] = {}
        _read(consumer, got, lambda: len(got) == 3 and all(got.values()))
        assert got == {tp: [N] for tp in parts}


def test_a_partition_paused_and_assigned_again_stays_paused(client_settings, fresh_topic):
    # kafka-python keeps the state of a partition a new assign keeps; librdkafka resumed it.
    p0, p1 = parts = _filled(client_settings, fresh_topic, 2)
    with _assigned(client_settings, parts, 4) as consumer:
        consumer.pause(p1)
        consumer.assign(parts)
        got: dict[TopicPartition, list[int]] = {}
        _read(consumer, got, _to_the_end(got, [p0]))
        assert p1 not in got
        consumer.resume(p1)
        _read(consumer, got, _to_the_end(got, [p1]))
        assert got == {p0: list(range(N)), p1: list(range(N))}
