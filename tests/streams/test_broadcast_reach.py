"""A live member hands on the group's records only once its broadcast reader (`jobs`) has read as
far as the broker held when they came (streams/runner/broadcast_reach.py): a topology written with
its job's first steps was read after them, its last fetch's high watermark saying `jobs` was read
to its end, and the steps were judged with no topology. Kafka-free: consumer stand-ins say how far
each partition was read; tests/diagnosis/test_fleet_waves_stages.py has the broker."""

from __future__ import annotations

import logging

from kafka.structs import TopicPartition

from faultlens.events.envelope import Envelope, encode
from faultlens.streams.runner import broadcast_reach
from faultlens.streams.runner.broadcast_reach import ask_due, covered, short_of
from faultlens.streams.runner.types import Record
from tests.helpers.event_time_stand_ins import GroupConsumer, JobsReader, data_record, event_time_order

T0 = 1_767_225_600.0


def _late_jobs(records: list[bytes], read: int, fails: bool = False) -> JobsReader:
    """`jobs` on the broker holds ``records``; the reader has read ``read`` of them, and its last
    fetch said that was the end."""
    return JobsReader(read, records=records, fails=fails, written_ms=int(T0 * 1000))


def _job_event(i: int, kind: str) -> bytes:
    return encode(Envelope(ts=T0 + i, job="j", node="-", source="job", kind=kind, id=f"{kind}{i}", data={}))


def _step(ts: float, written_ago_s: float = 0.0) -> Record:
    env = Envelope(ts=ts, job="j", node="n001", source="train", kind="step", data={"rank": 0})
    return data_record(env, b"n001", written_ago_s)


def _order(jobs: JobsReader):
    return event_time_order(jobs, follow_jobs=True)


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
    jobs = _late_jobs([_job_event(0, "start"), _job_event(1, "topology")], read=1)
    order = _order(jobs)
    out = order.ordered(GroupConsumer(), [_step(T0 + 2)])
    # without the ask, `jobs` looked read to its end (its last fetch said 1) and the step went alone
    assert [(r.topic, r.event_ts) for r in out] == [("jobs", T0 + 1), ("telemetry.gpu", T0 + 2)]
    assert jobs.asks == 1


def test_records_that_came_after_the_last_ask_wait_for_the_next_one():
    jobs = _late_jobs([_job_event(0, "start")], read=1)
    order = _order(jobs)
    group = GroupConsumer()
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
    jobs = _late_jobs([_job_event(0, "start"), _job_event(1, "topology")], read=1, fails=True)
    order = _order(jobs)
    group = GroupConsumer()
    with caplog.at_level(logging.WARNING):
        out = order.ordered(group, [_step(T0 + 2)])
        assert [r.topic for r in out] == ["telemetry.gpu"]  # as before the ask: the last fetch's word
        order.reach.asked_at -= 1.0
        assert [r.topic for r in order.ordered(group, [_step(T0 + 5)])] == ["telemetry.gpu"]
    assert jobs.asks == 1  # not asked again while the failure is waited out
    assert caplog.text.count("did not say where the broadcast topics end") == 1


def test_a_backlog_written_before_the_last_ask_is_not_held_for_another():
    jobs = _late_jobs([_job_event(0, "start")], read=1)
    order = _order(jobs)
    group = GroupConsumer()
    old = 3 * broadcast_reach.COVER_SLACK_S
    assert [r.event_ts for r in order.ordered(group, [_step(T0 + 2, written_ago_s=old)])] == [T0 + 2]
    assert jobs.asks == 1  # the first ask: nothing was asked before
    # the ask not due again, the next poll's records, written before it, go at once, unasked about
    assert [r.event_ts for r in order.ordered(group, [_step(T0 + 3, written_ago_s=old)])] == [T0 + 3]
    assert jobs.asks == 1
    assert order.ordered(group, [_step(T0 + 4)]) == []  # one just written waits for the next ask
