"""A read that starts at the end starts after the last record, on the embedded broker too.

The embedded broker (Tansu) lists a partition's end as its newest record batch's base offset + 1
(streams/reader_ends.py): after 10 records sent as one batch it lists 1, and the clients' seek to
the end lands there, inside the batch. Each test sends its old records as one batch and fails on
the client's own seek to the end: `faultlens record --from-now` recorded 9 old records, a seek
to the end handed out 9 before the 3 new ones, the command listener obeyed two commands issued
before it was ready. On Kafka (FAULTLENS_TEST_BOOTSTRAP) the same tests hold."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaProducer
from kafka.structs import TopicPartition

from faultlens.events.command import Command
from faultlens.events.command_memory import CommandMemory, memory_file
from faultlens.events.command_screen import CommandScreen
from faultlens.events.signing import SigningKey
from faultlens.streams.command_listener import CommandListener
from faultlens.streams.kafka_client import open_consumer
from faultlens.streams.reader import iter_topics
from faultlens.streams.reader_ends import seek_past_end
from tests.kafka_fixtures import wait_for_records
from tests.progress import thread_ticks, wait_until

pytestmark = pytest.mark.broker

KEY = SigningKey.generate()


def _one_batch(settings, topic: str, values: list[bytes], key: bytes | None = None) -> None:
    """``values`` sent to partition 0 (or ``key``'s) as one record batch: a long linger, then flush."""
    producer = KafkaProducer(**settings.common_kwargs(), linger_ms=60_000, batch_size=1 << 20)
    try:
        for v in values:
            producer.send(topic, v, key=key, partition=None if key else 0)
        producer.flush()
    finally:
        producer.close()


def test_a_read_from_now_reads_nothing_sent_before_it(client_settings, fresh_topic):
    topic = fresh_topic(partitions=1)
    _one_batch(client_settings, topic, [b"old-%d" % i for i in range(10)])
    assert [m.value for m in iter_topics(client_settings, [topic], idle_s=1.0, from_beginning=False)] == []
    # ... and from the start, all ten
    assert len(list(iter_topics(client_settings, [topic], idle_s=1.0))) == 10


def test_a_seek_past_the_end_hands_out_only_what_comes_next(client_settings, fresh_topic):
    topic = fresh_topic(partitions=2)
    _one_batch(client_settings, topic, [b"old-%d" % i for i in range(10)])
    consumer = open_consumer(client_settings, None)
    parts = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    try:
        consumer.assign(parts)
        assert seek_past_end(consumer, parts) == {parts[0]: 10, parts[1]: 0}
        assert consumer.position(parts[0]) == 10
        _one_batch(client_settings, topic, [b"new-%d" % i for i in range(3)])
        got: list[tuple[int, bytes]] = []

        def three() -> bool:
            got.extend((r.offset, r.value) for rs in consumer.poll(timeout_ms=200).values() for r in rs)
            return len(got) >= 3

        wait_until(three, progress=lambda: len(got), stall_s=60, limit_s=240, what="the three new records")
        assert got == [(10, b"new-0"), (11, b"new-1"), (12, b"new-2")]
    finally:
        consumer.close()


def _command(job: str, reason: str) -> Command:
    now = time.time()
    return Command(
        job=job, action="checkpoint", issued_at=now, expires_at=now + 300, reason=reason, diagnosis_id=f"d-{uuid.uuid4().hex[:6]}"
    ).signed(KEY)


def test_a_command_listener_obeys_none_of_a_batch_sent_before_it_was_ready(client_settings, tmp_path):
    job = f"ends-{uuid.uuid4().hex[:8]}"
    _one_batch(client_settings, "commands", [_command(job, f"before-{i}").encode() for i in range(3)], key=job.encode())
    got: list[str] = []
    screen = CommandScreen(KEY.verify_keys(), job, "n001", 0, memory=CommandMemory(memory_file(tmp_path, "agent", job, "n001")))
    listener = CommandListener(client_settings, screen, lambda c: got.append(c.reason))
    listener.start()
    try:
        wait_until(
            listener.ready.is_set,
            progress=lambda: thread_ticks(listener),
            stall_s=60,
            limit_s=240,
            what="the listener to reach the end of the commands topic",
        )
        _one_batch(client_settings, "commands", [_command(job, "after").encode()], key=job.encode())
        wait_until(
            lambda: "after" in got,
            progress=lambda: thread_ticks(listener),
            stall_s=60,
            limit_s=240,
            what="the command sent after it was ready",
        )
        assert got == ["after"]
    finally:
        listener.stop()
        listener.join(timeout=5)


def test_the_embedded_broker_lists_less_than_it_holds_and_its_fetch_says_the_end(client_settings, fresh_topic, broker):
    """Why seek_past_end fetches: the listed end of one 10-record batch. Fails the day the broker
    lists the high watermark (then the probe costs one fetch for nothing)."""
    if not hasattr(broker, "proc"):
        pytest.skip("a real Kafka cluster (FAULTLENS_TEST_BOOTSTRAP) lists the high watermark")
    topic = fresh_topic(partitions=1)
    _one_batch(client_settings, topic, [b"x"] * 10)
    tp = TopicPartition(topic, 0)
    consumer = open_consumer(client_settings, None)
    try:
        consumer.assign([tp])
        assert consumer.end_offsets([tp]) == {tp: 1}
        assert seek_past_end(consumer, [tp]) == {tp: 10}
    finally:
        consumer.close()


def test_a_fleet_record_read_to_its_end_reads_the_last_batch_whole(client_settings, fresh_topic):
    """A poll hands out at most 2000 records: the one that took the fleet read past the listed end
    (the last batch's first record, on the embedded broker) left 500 machines of that batch unread
    until the next refresh, and a member that had just started decided without their past."""
    from faultlens.events.fleet_record import MachineRecord
    from faultlens.remediation.fleet_log import FleetLog

    topic = fresh_topic(partitions=1)
    _two_batches(client_settings, topic, lambda i: MachineRecord(node="n%05d" % i, updated=1.0).encode())
    fleet = FleetLog(client_settings, topic)
    try:
        assert len(fleet.load()) == 2500 and not fleet.errors
    finally:
        fleet.close()


def _two_batches(settings, topic: str, value) -> None:
    """2500 records to partition 0 as two batches, 1500 then 1000: a poll hands out 2000."""
    for first, count in ((0, 1500), (1500, 1000)):
        producer = KafkaProducer(**settings.common_kwargs(), linger_ms=60_000, batch_size=1 << 22)
        try:
            for i in range(first, first + count):
                producer.send(topic, value(i), key=b"n%05d" % i, partition=0)
            producer.flush()
        finally:
            producer.close()


def test_a_wait_for_records_reads_what_was_there_before_it_judges(client_settings, fresh_topic):
    """What was on the topic when the wait began is read before the predicate is asked: the wait
    judged 2000 of 2500 records, the first poll having passed the listed end."""
    topic = fresh_topic(partitions=1)
    _two_batches(client_settings, topic, lambda i: b"r%05d" % i)
    got = wait_for_records(client_settings, topic, lambda raw: raw, None, bool, timeout_s=60)
    assert len(got) == 2500 and got[-1] == b"r02499"


class _Clock:
    def handle(self, records):
        return []

    def tick_held(self, now, busy=(), upstream=None):
        return []


def test_a_loop_back_from_away_waits_for_the_last_batch_handed_out_whole(client_settings, fresh_topic):
    """A loop that was away lets the wall clock move no job's time before what came meanwhile is
    read (tests/diagnosis/test_backlog_loop_away.py). Handed out 100 of one 500-record batch, it
    had read past the embedded broker's listed end (1) with 400 records still in the client."""
    from faultlens.streams.runner.event_time import AWAY_S
    from faultlens.streams.runner.loop import GroupRunner

    topic = fresh_topic(partitions=1)
    _one_batch(client_settings, topic, [b"r%03d" % i for i in range(500)])
    tp = TopicPartition(topic, 0)
    runner = GroupRunner(client_settings, "g-unused", [topic], _Clock(), event_time=True)
    consumer = open_consumer(client_settings, None, max_records=100)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list = []
        wait_until(
            lambda: got.extend(r for rs in consumer.poll(timeout_ms=200).values() for r in rs) or got,
            progress=lambda: len(got),
            stall_s=60,
            limit_s=240,
            what="the first poll's records",
        )
        assert consumer.position(tp) == 100
        order = runner.order
        assert order is not None
        order._loop_seen = time.monotonic() - AWAY_S - 60  # it came round a minute late (set, not waited for)
        order._came_round(time.monotonic())
        assert not order._read_what_came_while_away(consumer)
        while consumer.position(tp) < 500:
            consumer.poll(timeout_ms=200)
        assert order._read_what_came_while_away(consumer)
    finally:
        consumer.close()
        runner.producer.close()


def test_an_unfetched_partition_whose_position_lies_inside_the_last_batch_is_not_caught_up(client_settings, fresh_topic):
    """A partition assigned and not yet fetched from, its position (a commit) 5 inside a 10-record
    batch the embedded broker lists as ending at 1: judged by that listed end, it was called caught
    up (confluent's highwater() asks the broker at once, kafka-python's end offsets were asked after
    UNFETCHED_WAIT_S) and the watermark could pass its 5 records. Only a fetch says where it ends:
    it waits for its first one, then is caught up once read to that fetch's end. An empty partition
    needs no fetch: the broker lists it as ending at 0."""
    from faultlens.streams.runner.event_time import UNFETCHED_WAIT_S
    from faultlens.streams.runner.loop import GroupRunner

    topic = fresh_topic(partitions=2)
    _one_batch(client_settings, topic, [b"r%d" % i for i in range(10)])
    tp, empty = TopicPartition(topic, 0), TopicPartition(topic, 1)
    runner = GroupRunner(client_settings, "g-unused", [topic], _Clock(), event_time=True)
    consumer = open_consumer(client_settings, None)
    try:
        consumer.assign([tp, empty])
        consumer.seek(tp, 5)  # where a group's commit left it; the empty partition starts at 0
        order = runner.order
        assert order is not None
        long_ago = time.monotonic() - UNFETCHED_WAIT_S - 1  # assigned a while ago, never fetched (set, not waited for)
        order._assigned_at.update({tp: long_ago, empty: long_ago})
        assert not order.partition_caught_up(consumer, tp, time.monotonic())
        assert order.partition_caught_up(consumer, empty, time.monotonic())
        got: list = []
        wait_until(
            lambda: got.extend(r for rs in consumer.poll(timeout_ms=200).values() for r in rs) or len(got) >= 5,
            progress=lambda: len(got),
            stall_s=60,
            limit_s=240,
            what="the five records after the commit",
        )
        assert [r.offset for r in got] == [5, 6, 7, 8, 9]
        assert order.partition_caught_up(consumer, tp, time.monotonic())
    finally:
        consumer.close()
        runner.producer.close()
