"""Kafka-free stand-ins for what an event-time runner reads through (streams/runner/event_time.py):
the group's own consumer and the reader of the `jobs` broadcast, each saying how far it has read,
and the runner's order built over them. Shared by the tests of the broadcast's reach
(tests/streams/test_broadcast_reach.py) and of a broadcast read late (tests/diagnosis/
test_backlog_broadcast_late.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from kafka.errors import KafkaTimeoutError
from kafka.structs import TopicPartition

from faultlens.events.envelope import Envelope, encode
from faultlens.events.typed_read import EnvelopeTime
from faultlens.streams.config import KafkaSettings
from faultlens.streams.runner.event_time import EventTimeOrder
from faultlens.streams.runner.loop import GroupRunner
from faultlens.streams.runner.types import Record

JOBS_TP, DATA_TP = TopicPartition("jobs", 0), TopicPartition("telemetry.gpu", 0)


class GroupConsumer:
    """The group's consumer: its one partition (``DATA_TP``) read to its end."""

    def assignment(self):
        return {DATA_TP}

    def highwater(self, tp):
        return 1

    def position(self, tp):
        return 1

    def pause(self, *tps):
        pass

    def resume(self, *tps):
        pass


class _Message:
    def __init__(self, offset: int, value: bytes, timestamp_ms: int):
        self.offset, self.value, self.key, self.timestamp = offset, value, b"j", timestamp_ms


class JobsReader:
    """The `jobs` reader: read to ``pos``, its last fetch saying the partition ends at ``high``. The
    broker holds ``records`` (or, without them, ``end`` records it never brings: a starved member);
    a poll that does not wait finds its fetch still in flight, one that waits gets every record
    past ``pos``, stamped ``written_ms``. ``end_offsets`` is the broker's answer (KafkaTimeoutError
    with ``fails``), counted in ``asks``."""

    def __init__(
        self,
        pos: int,
        *,
        high: int | None = None,
        records: Sequence[bytes] = (),
        end: int | None = None,
        fails: bool = False,
        written_ms: int = 0,
    ):
        self.records, self.pos, self.fails, self.written_ms = list(records), pos, fails, written_ms
        self.high = pos if high is None else high
        self._end, self.asks = end, 0

    @property
    def end(self) -> int:
        return len(self.records) if self._end is None else self._end

    def assignment(self):
        return {JOBS_TP}

    def highwater(self, tp):
        return self.high

    def position(self, tp):
        return self.pos

    def end_offsets(self, parts):
        self.asks += 1
        if self.fails:
            raise KafkaTimeoutError("no answer")
        return {tp: self.end for tp in parts}

    def poll(self, timeout_ms=0):
        if timeout_ms == 0 or self.pos >= len(self.records):
            return {}
        got = [_Message(o, self.records[o], self.written_ms) for o in range(self.pos, len(self.records))]
        self.pos = self.high = len(self.records)
        return {JOBS_TP: got}


def event_time_order(jobs: JobsReader, *, follow_jobs: bool) -> EventTimeOrder:
    """A runner's event-time order over ``DATA_TP``, reading `jobs` through ``jobs``; with
    ``follow_jobs`` `jobs` is one of its broadcast topics, assigned as a follower."""
    runner = GroupRunner(
        KafkaSettings(bootstrap="127.0.0.1:1"),
        "g",
        [DATA_TP.topic],
        lambda recs: [],
        event_time=True,
        producer=object(),
        broadcast_topics=[JOBS_TP.topic] if follow_jobs else [],
    )
    order = runner.order
    assert order is not None
    order.merge.assign([DATA_TP], time.time())
    if follow_jobs:
        order.merge.assign([JOBS_TP], time.time(), follower=True)
    order.broadcast = jobs
    return order


def data_record(env: Envelope, key: bytes, written_ago_s: float = 0.0) -> Record:
    """``env`` as the group's consumer hands it on from ``DATA_TP``, written ``written_ago_s`` ago."""
    return Record(
        topic=DATA_TP.topic,
        partition=DATA_TP.partition,
        offset=0,
        key=key,
        timestamp_ms=int((time.time() - written_ago_s) * 1000),
        value=EnvelopeTime(ts=env.ts, job=env.job, node=env.node),
        event_ts=env.ts,
        raw=encode(env),
    )
