"""A diagnosis loop that was away (its process stopped, or starved of CPU) lets the wall clock move
no job's time before it has read what the broker got meanwhile.

Live, a job of which nothing arrived for a grace period of wall time has its time moved by the
wall clock (diagnosis/engine/core.py). A loop that comes back after 60 s away finds its partitions
"caught up" by the high-water marks of its last fetch, from before it left: every job looked
stopped, and the wall clock moved their time past records that were on the broker all along
(the gap tests/diagnosis/test_backlog_wall_time.py shows the engine's side of). Kafka-free: a
consumer stand-in says how far each partition was read, what its last fetch saw, and what the
broker holds."""

from __future__ import annotations

import time

from kafka.structs import TopicPartition

from faultlens.streams.config import KafkaSettings
from faultlens.streams.runner.event_time import AWAY_S
from faultlens.streams.runner.loop import GroupRunner

P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)


class _Consumer:
    """Read up to ``position``; its last fetch saw up to ``high``; the broker holds up to ``end``."""

    def __init__(self, position: dict, high: dict, end: dict):
        self.position_of, self.high, self.end = position, high, end
        self.end_asks = 0

    def assignment(self):
        return set(self.position_of)

    def position(self, tp):
        return self.position_of[tp]

    def highwater(self, tp):
        return self.high[tp]

    def end_offsets(self, parts):
        self.end_asks += 1
        return {tp: self.end[tp] for tp in parts}


class _NoProducer:
    def send_all(self, out):
        return 0

    def flush(self, timeout=None):
        pass


class _Clock:
    def handle(self, records):
        return []

    def tick_held(self, now, busy=(), upstream=None):
        return []


def _runner() -> GroupRunner:
    runner = GroupRunner(KafkaSettings(bootstrap="unused:9092"), "g", ["t"], _Clock(), producer=_NoProducer(), event_time=True)
    runner.merge.assign([P0, P1], wall_now=time.time())
    return runner


def _away(runner: GroupRunner, seconds: float) -> None:
    """The loop last came round ``seconds`` ago (set, not waited for)."""
    assert runner.order is not None
    runner.order._loop_seen = time.monotonic() - seconds


def test_after_the_loop_was_away_no_job_moves_until_what_came_meanwhile_is_read():
    runner = _runner()
    # Read to what the last fetch saw; the broker got 400 more records on P0 while the loop was away.
    runner.consumer = consumer = _Consumer({P0: 100, P1: 50}, {P0: 100, P1: 50}, {P0: 500, P1: 50})
    assert runner._tick_gate(consumer) == frozenset()  # never away: the gate as it was
    _away(runner, 60.0)
    assert runner._tick_gate(consumer) is None
    consumer.end[P0] = 900  # a busy stream goes on being written: not waited for
    consumer.position_of[P0] = 499
    assert runner._tick_gate(consumer) is None
    consumer.position_of[P0] = 500
    assert runner._tick_gate(consumer) == frozenset()
    assert consumer.end_asks == 1  # asked once, when it came back


def test_a_loop_that_comes_round_in_time_asks_the_broker_nothing():
    runner = _runner()
    runner.consumer = consumer = _Consumer({P0: 7, P1: 3}, {P0: 7, P1: 3}, {P0: 9, P1: 3})
    _away(runner, AWAY_S / 2)
    assert runner._tick_gate(consumer) == frozenset()
    assert consumer.end_asks == 0


class _NoEnds(_Consumer):
    def end_offsets(self, parts):
        from kafka.errors import KafkaTimeoutError

        self.end_asks += 1
        raise KafkaTimeoutError("no answer")


def test_a_broker_that_cannot_say_its_end_offsets_keeps_the_wall_clock_waiting():
    runner = _runner()
    runner.consumer = consumer = _NoEnds({P0: 7, P1: 3}, {P0: 7, P1: 3}, {})
    _away(runner, 60.0)
    assert runner._tick_gate(consumer) is None
    assert runner._tick_gate(consumer) is None
    assert consumer.end_asks == 2  # asked again at each tick until it answers
