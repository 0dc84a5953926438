"""A broadcast topic (`jobs`) is read up to its end before data is released: its records must be
in hand before the telemetry after them (streams/runner/event_time.py, EventTimeOrder.poll_broadcast)."""

from __future__ import annotations

from kafka.structs import TopicPartition

from faultlens.events.envelope import Envelope, encode
from faultlens.streams.config import KafkaSettings
from faultlens.streams.runner.loop import GroupRunner

TP = TopicPartition("jobs", 0)


class _Message:
    def __init__(self, offset: int, value: bytes):
        self.offset, self.value, self.key, self.timestamp = offset, value, b"j", 1_767_225_600_000


class _SlowBroadcast:
    """A consumer whose fetches bring one record per poll: three polls to reach the end."""

    def __init__(self, records: list[bytes], stuck: bool = False):
        self.records, self.pos, self.stuck, self.polls = records, 0, stuck, 0

    def assignment(self):
        return {TP}

    def highwater(self, tp):
        return len(self.records)

    def position(self, tp):
        return self.pos

    def poll(self, timeout_ms=0):
        self.polls += 1
        if self.stuck or self.pos >= len(self.records):
            return {}
        self.pos += 1
        return {TP: [_Message(self.pos - 1, self.records[self.pos - 1])]}


def _runner() -> GroupRunner:
    return GroupRunner(KafkaSettings(bootstrap="127.0.0.1:1"), "g", ["telemetry.gpu"], lambda recs: [],
                       event_time=True, producer=object())


def _topologies(n: int) -> list[bytes]:
    return [encode(Envelope(ts=1_767_225_600.0 + i, job="j", node="-", source="job", kind="restart",
                            id=f"r{i}", data={})) for i in range(n)]


def test_every_record_of_a_broadcast_topic_behind_its_end_is_read_before_going_on():
    runner = _runner()
    runner.order.broadcast = _SlowBroadcast(_topologies(3))
    got = runner.order.poll_broadcast()
    assert [r.value.id for r in got] == ["r0", "r1", "r2"]


def test_a_broadcast_topic_that_stays_behind_is_waited_for_once_not_every_loop(monkeypatch):
    monkeypatch.setattr("faultlens.streams.runner.event_time.BROADCAST_CATCH_UP_S", 0.2)
    runner = _runner()
    runner.order.broadcast = stuck = _SlowBroadcast(_topologies(2), stuck=True)
    assert runner.order.poll_broadcast() == []
    waited = stuck.polls
    assert waited > 1
    runner.order.poll_broadcast()
    assert stuck.polls == waited + 1  # the next loop only polls once
