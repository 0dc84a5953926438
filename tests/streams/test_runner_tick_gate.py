"""When an event-time runner lets the wall clock move a job's time (its handler's ``tick``): while
the input is live, for every job with no record held, however busy the other jobs keep the
stream; never while a partition has a backlog. Kafka-free: a consumer stand-in says how far each
partition was read."""

from __future__ import annotations

import time

from kafka.structs import TopicPartition

from streams.config import KafkaSettings
from streams.runner import GroupRunner
from streams.runner_types import Record
from streams.typed_read import EnvelopeTime

P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)


class _Consumer:
    """Read up to ``position`` of each partition; the broker holds up to ``high``."""

    def __init__(self, position: dict, high: dict):
        self._position, self._high = position, high

    def assignment(self):
        return set(self._position)

    def position(self, tp):
        return self._position[tp]

    def highwater(self, tp):
        return self._high[tp]


class _NoProducer:
    def send_all(self, out):
        return 0

    def flush(self, timeout=None):
        pass


class _Clock:
    def __init__(self, busy_aware: bool):
        self.calls: list = []
        if busy_aware:
            self.tick = self._tick_busy
        else:
            self.tick = self._tick

    def handle(self, records):
        return []

    def _tick(self, now):
        self.calls.append(None)
        return []

    def _tick_busy(self, now, busy=()):
        self.calls.append(frozenset(busy))
        return []


def _runner(handler) -> GroupRunner:
    runner = GroupRunner(KafkaSettings(bootstrap="unused:9092"), "g", ["t"], handler, producer=_NoProducer(),
                         event_time=True)
    runner.merge.assign([P0, P1], wall_now=time.time())
    return runner


def _read(runner: GroupRunner, tp: TopicPartition, offset: int, job: str, ts: float, broker_ts: float) -> None:
    """One record of ``job`` read from ``tp``, held by the merge until the other partition speaks."""
    record = Record(topic=tp.topic, partition=tp.partition, offset=offset, key=b"n", timestamp_ms=int(broker_ts * 1000),
                    value=EnvelopeTime(ts=ts, job=job, node="n001"), event_ts=ts)
    runner.merge.add(tp, offset, ts, record, wall_now=time.time(), broker_ts=broker_ts)


def test_a_busy_stream_leaves_only_the_jobs_with_records_held_to_their_records():
    runner = _runner(_Clock(busy_aware=True))
    now = time.time()
    _read(runner, P0, 0, "busy-job", now - 1.0, now - 0.5)  # held: P1 has said nothing yet
    # P0 has a record unread, P1 is read to its end: a live stream, not a backlog.
    runner.consumer = consumer = _Consumer({P0: 1, P1: 5}, {P0: 2, P1: 5})
    assert runner.merge.held == 1
    assert runner._tick_gate(consumer) == frozenset({"busy-job"})
    # The gate of old, still that of a clock that cannot be told: nothing while anything is held.
    old = _runner(_Clock(busy_aware=False))
    _read(old, P0, 0, "busy-job", now - 1.0, now - 0.5)
    old.consumer = consumer
    assert old._tick_gate(consumer) is None


def test_no_job_is_moved_by_the_wall_clock_while_a_partition_has_a_backlog():
    runner = _runner(_Clock(busy_aware=True))
    now = time.time()
    _read(runner, P0, 0, "a", now - 3600.0, now - 3600.0)  # an hour old, and more unread behind it
    runner.consumer = consumer = _Consumer({P0: 1, P1: 0}, {P0: 50_000, P1: 0})
    assert runner._tick_gate(consumer) is None


def test_with_nothing_held_and_nothing_unread_every_job_may_move():
    for aware in (True, False):
        runner = _runner(_Clock(busy_aware=aware))
        runner.consumer = consumer = _Consumer({P0: 7, P1: 3}, {P0: 7, P1: 3})
        assert runner._tick_gate(consumer) == frozenset()
