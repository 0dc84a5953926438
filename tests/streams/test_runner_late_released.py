"""Records an event-time runner hands on behind event time it already handed on (a partition passed
over as idle, then it spoke): counted in RunnerStats.late_released and logged once, so a deployer
sees that diagnosis read them out of order. Kafka-free: a consumer stand-in says how far each
partition was read."""

from __future__ import annotations

import logging
import time

from kafka.structs import TopicPartition

from faultlens.events.typed_read import EnvelopeTime
from faultlens.streams.config import KafkaSettings
from faultlens.streams.runner.loop import GroupRunner
from faultlens.streams.runner.types import Record

P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)


class _CaughtUp:
    def assignment(self):
        return {P0, P1}

    def position(self, tp):
        return 10

    def highwater(self, tp):
        return 10


class _NoProducer:
    def send_all(self, out):
        return 0

    def flush(self, timeout=None):
        pass


def _record(tp: TopicPartition, offset: int, ts: float) -> Record:
    return Record(topic=tp.topic, partition=tp.partition, offset=offset, key=b"n", timestamp_ms=int(time.time() * 1000),
                  value=EnvelopeTime(ts=ts, job="j", node="n001"), event_ts=ts)


def test_a_record_of_a_partition_passed_over_as_idle_is_counted_and_logged_once(caplog):
    runner = GroupRunner(KafkaSettings(bootstrap="unused:9092"), "g", ["t"], lambda records: [], event_time=True,
                         producer=_NoProducer())
    runner.merge.assign([P0, P1], wall_now=time.time() - 60)  # both quiet for a minute: idle
    order, consumer = runner.order, _CaughtUp()
    assert [r.event_ts for r in order.ordered(consumer, [_record(P0, 0, 100.0), _record(P0, 1, 110.0)])] == [100.0, 110.0]
    assert runner.stats.late_released == 0  # P1 idle: P0's records went without it, in order
    with caplog.at_level(logging.INFO, logger="faultlens.streams.runner.event_time"):
        assert [r.event_ts for r in order.ordered(consumer, [_record(P1, 0, 50.0)])] == [50.0]
        order.ordered(consumer, [_record(P1, 1, 60.0), _record(P0, 2, 120.0)])
    assert runner.stats.late_released == 2  # 50 and 60, behind the 110 already handed on
    said = [r.message for r in caplog.records if "late_released" in r.message]
    assert len(said) == 1 and "t:1" in said[0] and "60.0s of event time behind" in said[0]
