"""When an event-time runner lets the wall clock move a job's time (its handler's ``tick``): while
the input is live, for every job with no record held, however busy the other jobs keep the
stream; never while a partition has a backlog. Kafka-free: a consumer stand-in says how far each
partition was read."""

from __future__ import annotations

import time

from kafka.structs import TopicPartition

from faultlens.events.typed_read import EnvelopeTime
from faultlens.streams.config import KafkaSettings
from faultlens.streams.runner.loop import GroupRunner
from faultlens.streams.runner.types import Record

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
        if busy_aware:  # a clock told which jobs still have records held (HeldAwareClock)
            self.tick_held = self._tick_busy
        else:
            self.tick = self._tick

    def handle(self, records):
        return []

    def _tick(self, now):
        self.calls.append(None)
        return []

    def _tick_busy(self, now, busy=(), upstream=None):
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


class _Unfetched(_Consumer):
    """Partitions never fetched from (no high-water mark yet); the broker knows their end."""

    def __init__(self, position: dict, end: dict | None):
        super().__init__(position, {tp: None for tp in position})
        self._end, self.asked = end, 0

    def end_offsets(self, partitions):
        self.asked += 1
        if self._end is None:
            from kafka.errors import KafkaTimeoutError

            raise KafkaTimeoutError("no answer")
        return {tp: self._end[tp] for tp in partitions}


def test_a_partition_never_fetched_from_is_caught_up_only_if_the_broker_says_it_is_empty():
    """A starved consumer may not fetch a partition for 30 s after its assignment: it used to be
    taken as caught up then, and its unread telemetry fell behind its peers' (issue 32)."""
    runner = _runner(_Clock(busy_aware=True))
    consumer = _Unfetched({P0: 0, P1: 0}, {P0: 0, P1: 120})
    runner.consumer = consumer
    now = time.monotonic()
    runner.order._assigned_at.update({P0: now, P1: now})
    assert runner.order.caught_up(consumer) == {P0: False, P1: False}  # within the wait: nobody is
    runner.order._assigned_at.update({P0: now - 31, P1: now - 31})
    assert runner.order.caught_up(consumer) == {P0: True, P1: False}  # P1 holds 120 records still unread
    assert runner.order.caught_up(consumer) == {P0: True, P1: False} and consumer.asked == 1  # asked once
    # a broker that cannot say: the wait ends as before, with a warning
    mute = _Unfetched({P0: 0, P1: 0}, None)
    runner.consumer = mute
    runner.order._unfetched_end.clear()
    assert runner.order.caught_up(mute) == {P0: True, P1: True}
