"""A live member hands on the group's records only once its broadcast reader (`jobs`) has read as
far as the broker held when they came (streams/runner/broadcast_reach.py): a topology written with
its job's first steps was read after them, its last fetch's high watermark saying `jobs` was read
to its end, and the steps were judged with no topology. Kafka-free: consumer stand-ins say how far
each partition was read; tests/diagnosis/test_fleet_waves_stages.py has the broker."""

from __future__ import annotations

import logging
import time

from kafka.errors import KafkaTimeoutError
from kafka.structs import TopicPartition

from faultlens.events.envelope import Envelope, encode
from faultlens.events.typed_read import EnvelopeTime
from faultlens.streams.config import KafkaSettings
from faultlens.streams.runner import broadcast_reach
from faultlens.streams.runner.broadcast_reach import ask_due, covered, short_of
from faultlens.streams.runner.loop import GroupRunner
from faultlens.streams.runner.types import Record

JOBS_TP, DATA_TP = TopicPartition("jobs", 0), TopicPartition("telemetry.gpu", 0)
T0 = 1_767_225_600.0


class _Message:
    def __init__(self, offset: int, value: bytes):
        self.offset, self.value, self.key, self.timestamp = offset, value, b"j", int(T0 * 1000)


class _LateJobs:
    """`jobs` on the broker holds ``records``; the reader has read ``read`` of them, and its last
    fetch said that was the end. A poll that does not wait finds its fetch still in flight; one that
    waits gets every record there is. ``end_offsets`` is the broker's answer (or ``fails``)."""

    def __init__(self, records: list[bytes], read: int, fails: bool = False):
        self.records, self.pos, self.high, self.fails, self.asks = records, read, read, fails, 0

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
        return {tp: len(self.records) for tp in parts}

    def poll(self, timeout_ms=0):
        if timeout_ms == 0 or self.pos >= len(self.records):
            return {}
        got = [_Message(o, self.records[o]) for o in range(self.pos, len(self.records))]
        self.pos = self.high = len(self.records)
        return {JOBS_TP: got}


class _Group:
    """The group's consumer: its one partition read to its end."""

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


def _job_event(i: int, kind: str) -> bytes:
    return encode(Envelope(ts=T0 + i, job="j", node="-", source="job", kind=kind, id=f"{kind}{i}", data={}))


def _step(ts: float, written_ago_s: float = 0.0) -> Record:
    env = Envelope(ts=ts, job="j", node="n001", source="train", kind="step", data={"rank": 0})
    return Record(
        topic=DATA_TP.topic,
        partition=DATA_TP.partition,
        offset=0,
        key=b"n001",
        timestamp_ms=int((time.time() - written_ago_s) * 1000),
        value=EnvelopeTime(ts=ts, job="j", node="n001"),
        event_ts=ts,
        raw=encode(env),
    )


def _order(jobs: _LateJobs):
    runner = GroupRunner(
        KafkaSettings(bootstrap="127.0.0.1:1"),
        "g",
        ["telemetry.gpu"],
        lambda recs: [],
        event_time=True,
        producer=object(),
        broadcast_topics=["jobs"],
    )
    order = runner.order
    assert order is not None
    order.merge.assign([DATA_TP], time.time())
    order.merge.assign([JOBS_TP], time.time(), follower=True)
    order.broadcast = jobs
    return order


# --- the decision, offsets alone --------------------------------------------------------------
def test_a_reader_below_the_listed_end_is_short_of_it_and_one_at_or_past_it_is_not():
    a, b, c = (TopicPartition("jobs", p) for p in range(3))
    assert short_of({a: 4, b: 7, c: 9}, {a: 5, b: 7, c: 8}) == [a]
    assert short_of({a: None}, {a: 1}) == [a]  # nothing read yet
    assert short_of({a: None}, {a: 0}) == []  # an empty partition
    assert short_of({}, {}) == []


def test_the_broker_is_asked_only_for_records_that_came_since_the_last_ask_and_not_too_often():
    every = broadcast_reach.REACH_EVERY_S
    assert ask_due(True, 10.0, float("-inf"), 0.0)
    assert not ask_due(False, 10.0, float("-inf"), 0.0)  # nothing came: a quiet member never asks
    assert not ask_due(True, 10.0, 10.0 - every / 2, 0.0)
    assert ask_due(True, 10.0, 10.0 - every, 0.0)
    assert not ask_due(True, 10.0, float("-inf"), 40.0)  # a failed ask is waited out


def test_an_ask_covers_records_the_broker_took_well_before_it_and_no_others():
    slack = broadcast_reach.COVER_SLACK_S
    assert covered(100.0, 100.0 + slack + 0.1)
    assert not covered(100.0, 100.0 + slack)  # a writer's clock may be off by that much
    assert not covered(100.0, float("-inf"))  # never asked
    assert not covered(None, 1e12)  # no broker time: taken as now


# --- the runner's hold ------------------------------------------------------------------------
def test_steps_that_came_with_their_topology_are_handed_on_after_it():
    jobs = _LateJobs([_job_event(0, "start"), _job_event(1, "topology")], read=1)
    order = _order(jobs)
    out = order.ordered(_Group(), [_step(T0 + 2)])
    # without the ask, `jobs` looked read to its end (its last fetch said 1) and the step went alone
    assert [(r.topic, r.event_ts) for r in out] == [("jobs", T0 + 1), ("telemetry.gpu", T0 + 2)]
    assert jobs.asks == 1


def test_records_that_came_after_the_last_ask_wait_for_the_next_one():
    jobs = _LateJobs([_job_event(0, "start")], read=1)
    order = _order(jobs)
    group = _Group()
    assert [r.event_ts for r in order.ordered(group, [_step(T0 + 2)])] == [T0 + 2]
    jobs.records.append(_job_event(3, "topology"))  # written with the next step, after that ask
    assert order.ordered(group, [_step(T0 + 4)]) == []  # the ask is not due yet: held
    assert order.ordered(group, []) == []  # and still, not asked about: nothing new came
    assert jobs.asks == 1
    order.reach.asked_at -= broadcast_reach.REACH_EVERY_S  # the last ask that old (set, not waited)
    out = order.ordered(group, [])
    assert [(r.topic, r.event_ts) for r in out] == [("jobs", T0 + 3), ("telemetry.gpu", T0 + 4)]
    assert jobs.asks == 2
    assert order.ordered(group, []) == [] and jobs.asks == 2  # a quiet member does not ask


def test_a_broker_that_does_not_say_where_jobs_ends_is_said_once_and_data_goes_on_as_before(caplog):
    jobs = _LateJobs([_job_event(0, "start"), _job_event(1, "topology")], read=1, fails=True)
    order = _order(jobs)
    group = _Group()
    with caplog.at_level(logging.WARNING):
        out = order.ordered(group, [_step(T0 + 2)])
        assert [r.topic for r in out] == ["telemetry.gpu"]  # as before the ask: the last fetch's word
        order.reach.asked_at -= 1.0
        assert [r.topic for r in order.ordered(group, [_step(T0 + 5)])] == ["telemetry.gpu"]
    assert jobs.asks == 1  # not asked again while the failure is waited out
    assert caplog.text.count("did not say where the broadcast topics end") == 1


def test_a_backlog_written_before_the_last_ask_is_not_held_for_another():
    jobs = _LateJobs([_job_event(0, "start")], read=1)
    order = _order(jobs)
    group = _Group()
    old = 3 * broadcast_reach.COVER_SLACK_S
    assert [r.event_ts for r in order.ordered(group, [_step(T0 + 2, written_ago_s=old)])] == [T0 + 2]
    assert jobs.asks == 1  # the first ask: nothing was asked before
    # the ask not due again, the next poll's records, written before it, go at once, unasked about
    assert [r.event_ts for r in order.ordered(group, [_step(T0 + 3, written_ago_s=old)])] == [T0 + 3]
    assert jobs.asks == 1
    assert order.ordered(group, [_step(T0 + 4)]) == []  # one just written waits for the next ask
