"""Silence judged the same live and offline, for jobs on different clocks (diagnosis/engine/time_base.py).

A job whose whole stream stops while a job on its own clock reports on is one `telemetry_lost`
alert by that job's event time, offline as live (tests/outside: job_quiet). A job is never moved
by a job on another clock (`faultlens demo`: a simulated cluster at 20x beside a real trainer;
an old trace beside a live job), nor while it still delivers. Where nothing on a job's clock
arrives any more, live, the wall clock moves its time and its silence is recorded as the
stream's (action none), as offline the end of a trace judges no absence."""

from __future__ import annotations

import time
import uuid

import pytest

from bench.testbed.backlog_split import finish_members, start_members
from faultlens.diagnosis.edge.node_consumer import NodeStageHandler
from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.engine.time_base import TimeBases
from faultlens.events import topics
from faultlens.events.bundle import Bundle, decode_bundled
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope, decode, encode
from faultlens.events.topics import key_partition
from faultlens.events.trace import write_trace
from faultlens.streams.replay import replay_trace
from faultlens.streams.runner.loop import Record
from tests.diagnosis.diag_events import JOB, T0, beat, nodes, topology
from tests.diagnosis.live_members import finish_job_members, start_job_members, upstream_done
from tests.kafka_fixtures import job_records, wait_for_records

OTHER = "neighbour"
AHEAD_S = 100_000.0  # how far the other job's clock runs ahead in the tests of two clocks


def _beats(job: str, start: float, until: float, shift: float = 0.0, every: float = 5.0, n: int = 4) -> list:
    """``n`` nodes of ``job`` beating every ``every`` s from ``start`` to ``until``, stamped ``shift`` s later."""
    return [beat(shift + t, node, job=job) for t in range(int(start), int(until), int(every)) for node in nodes(n)]


def _interleaved(*streams: list) -> list:
    """Several jobs' events in arrival order, each on its own clock: the i-th beat of each in turn,
    as a consumer reads jobs that report at the same wall time whatever their stamps say."""
    out, longest = [], max(len(s) for s in streams)
    for i in range(longest):
        out.extend(s[i] for s in streams if i < len(s))
    return out


def _two_jobs(quiet_from: float, until: float = 300.0) -> list:
    """Two 4-node jobs on one clock, beating every 5 s; ``JOB`` stops at ``quiet_from``, ``OTHER`` goes on."""
    head = [topology(n=4, gpus=1, tp=1, pp=1), topology(n=4, gpus=1, tp=1, pp=1, job=OTHER)]
    return head + sorted(_beats(JOB, 0, quiet_from) + _beats(OTHER, 0, until), key=lambda e: e.ts)


def _lost(found) -> list[tuple[str, str]]:
    return sorted((d.job, d.action) for d in found if d.fault == "telemetry_lost")


def _engine() -> Engine:
    return Engine(EngineConfig(implicit=False, grace_s=30))


# --- one clock ---------------------------------------------------------------------------------
def test_a_job_quiet_while_a_job_on_its_clock_reports_on_is_one_alert_offline():
    found = analyze(_two_jobs(quiet_from=100))
    assert _lost(found) == [(JOB, "alert")]
    [lost] = [d for d in found if d.fault == "telemetry_lost"]
    assert lost.onset == T0 + 95 and lost.nodes == ()
    assert lost.ts - lost.onset <= 65  # 30 s past the grace of the neighbour's time, and a beat
    assert not [d for d in found if d.fault == "node_silent"]


def test_jobs_in_a_row_never_delivered_together_and_judge_no_silence_of_each_other():
    # One job ends where the next begins (tests/outside's stream of traces in a row): nothing shows
    # the two share a clock, so the first one's end is no alert (offline, as each trace alone).
    events = [topology(n=4, gpus=1, tp=1, pp=1), topology(n=4, gpus=1, tp=1, pp=1, job=OTHER)]
    events += _beats(JOB, 0, 300) + _beats(OTHER, 300, 900)
    assert _lost(analyze(events)) == []


def test_the_wall_clock_leaves_a_job_alone_while_a_job_on_its_clock_still_arrives():
    e = _engine()
    for event in _two_jobs(quiet_from=100, until=120):
        e.process(event)
    before = e.job_time(JOB)
    wall = time.time()
    e._lanes[JOB].arrival_wall = wall - 60  # its last record a minute ago
    e._lanes[OTHER].arrival_wall = wall  # the neighbour's just now: their clock has not stopped
    assert e.tick(wall + 10) == [] and e.job_time(JOB) == before


def test_a_stream_that_stops_entirely_is_recorded_then_alerted_if_it_runs_on_without_the_job():
    e = _engine()
    for event in _two_jobs(quiet_from=100, until=100):
        e.process(event)
    wall = time.time()
    for lane in e._lanes.values():
        lane.arrival_wall = wall
    stopped = [d for k in range(1, 200) for d in e.tick(wall + 0.5 * k)]
    assert _lost(stopped) == [(JOB, "none"), (OTHER, "none")]
    assert all("the stream stopped" in d.detail for d in stopped if d.fault == "telemetry_lost")
    # The neighbour comes back, the job does not: now its silence is its own.
    again = [d for event in _beats(OTHER, 200, 300) for d in e.process(event)]
    assert _lost(again) == [(JOB, "alert")]
    assert not [d for d in again if d.fault == "node_silent"]


# --- two clocks --------------------------------------------------------------------------------
def _apart(stopped: str, ahead: str) -> tuple[list, dict[str, float]]:
    """``JOB`` and ``OTHER`` read together, ``ahead``'s stamps AHEAD_S later; ``stopped`` stops at 100 s
    of its own clock while the other reports on to 600 s. Also each job's clock shift."""
    shift = {JOB: 0.0, OTHER: 0.0}
    shift[ahead] = AHEAD_S
    runs = {job: _beats(job, 0, 100 if job == stopped else 600, shift=shift[job]) for job in (JOB, OTHER)}
    head = [topology(n=4, gpus=1, tp=1, pp=1, ts=shift[JOB]), topology(n=4, gpus=1, tp=1, pp=1, job=OTHER, ts=shift[OTHER])]
    return head + _interleaved(runs[JOB], runs[OTHER]), shift


def _per_event(events: list, e: Engine) -> list:
    """Each event through ``e``, asserting after each that every job's time is its own latest stamp."""
    found, own = [], {}
    for event in events:
        found.extend(e.process(event))
        if event.source == "job":
            continue  # a topology moves no time
        own[event.job] = max(own.get(event.job, event.ts), event.ts)
        assert {j: e.job_time(j) for j in own} == own, event
    return found


def test_a_job_on_a_clock_100000_s_ahead_never_moves_a_job_that_stops_nor_one_that_runs():
    for stopped, ahead in ((JOB, OTHER), (JOB, JOB), (OTHER, JOB), (OTHER, OTHER)):
        events, _ = _apart(stopped, ahead)
        e = _engine()
        found = _per_event(events, e)
        assert _lost(found) == [] and not [d for d in found if d.fault == "node_silent"], (stopped, ahead)
        assert e.clocks.mates(JOB) == frozenset()


def test_live_the_job_whose_clock_stopped_is_recorded_and_the_running_one_is_left_alone():
    events, shift = _apart(stopped=JOB, ahead=OTHER)
    e = _engine()
    _per_event(events[:-40], e)  # the stopped job's last beat long gone; the other one still arrives
    wall = time.time()
    e._lanes[JOB].arrival_wall = wall
    running = e.job_time(OTHER)
    live = []
    for k in range(1, 200):  # wall ticks between the running job's records
        e._lanes[OTHER].arrival_wall = wall + 0.5 * k
        live.extend(e.tick(wall + 0.5 * k))
    assert e.job_time(OTHER) == running
    assert e.job_time(JOB) > T0 + shift[JOB] + 100  # moved by the wall clock: nothing on its clock arrived
    assert _lost(live) == [(JOB, "none")]
    assert "the stream stopped" in next(d.detail for d in live if d.fault == "telemetry_lost")
    assert not [d for d in live if d.fault == "node_silent"]


def test_a_job_at_twenty_times_the_pace_never_shares_the_clock_of_one_at_real_time():
    # `faultlens demo`: the simulated cluster starts 1,615 s behind the wall clock and runs 20x,
    # level with the real trainer only at its end; the trainer reports every second of wall time.
    bases = TimeBases(grace_s=30.0, tolerance_s=15.0)
    moved = []
    for wall in range(0, 85):
        for k in range(20):
            moved += bases.check("sim", -1615.0 + 20 * wall + k)
        moved += bases.check("trainer", float(wall))
    assert moved == [] and bases.mates("sim") == frozenset()


def _mated() -> TimeBases:
    bases = TimeBases(grace_s=30.0, tolerance_s=15.0)
    for t in range(0, 60):
        bases.check("a", float(t))
        bases.check("b", float(t))
    assert bases.mates("a") == {"b"}
    return bases


def test_a_mate_that_delivers_on_after_the_other_leapt_ahead_parts_and_is_never_moved():
    bases = _mated()
    assert bases.check("a", 3660.0) == []  # a's clock leapt an hour: b is not judged quiet by it yet
    assert bases.check("b", 60.0) == [] and bases.mates("a") == frozenset()  # b delivers on its clock
    assert [bases.check("a", 3660.0 + t) for t in range(1, 60)] == [[]] * 59


def test_a_mate_silent_while_the_other_goes_on_for_a_grace_past_its_leap_is_quiet():
    # The whole stream paused (both quiet), then a came back and b did not.
    bases = _mated()
    moved = [m for t in range(0, 40) for m in bases.check("a", 300.0 + t)]
    assert moved[0] == ("b", 300.0) and bases.mates("a") == {"b"}


def test_a_mate_at_half_the_pace_parts_at_its_own_check_before_the_gap_is_a_grace():
    bases = _mated()
    for t in range(0, 60):
        assert bases.check("a", 60.0 + t) == []
        bases.check("b", 60.0 + t / 2)
    assert bases.mates("a") == frozenset()


def test_a_job_whose_upstream_stage_stopped_keeps_its_time_while_a_job_on_its_clock_reports_on():
    # Live, the job stage named the node-stage members that stopped writing the job's partition
    # (test_silence_upstream): its time stays where they stopped, as the alert says, however far
    # its mates' time goes; once its writers are back, its mates move it again.
    e = _engine()
    events = _two_jobs(quiet_from=100, until=300)
    for event in events[: len(events) // 3]:
        e.process(event)
    assert e.clocks.mates(JOB) == {OTHER}
    wall = time.time()
    e.tick(wall, until={JOB: wall - 1})
    rest = [d for event in events[len(events) // 3:] for d in e.process(event)]
    assert e.job_time(JOB) == T0 + 95 and _lost(rest) == []
    e.tick(wall, until={})
    again = [d for event in _beats(OTHER, 300, 310) for d in e.process(event)]
    assert _lost(again) == [(JOB, "alert")]


def _by_member(events: list, members: dict[str, int], wall_idle_s: float) -> list:
    """Split stages: one node-stage member reads every node, and job-stage members each hold some of
    the jobs (``members``: job → member), each fed what the node stage wrote of its jobs, in order,
    and what it wrote for every partition (its word on the jobs' clocks); every member reads the
    `jobs` broadcast. Then each one's wall clock ``wall_idle_s`` after them; the final diagnoses."""
    node = NodeStageHandler()
    node.watermarks([0, 1])
    engines = [Engine(EngineConfig(stage="job", implicit=False)) for _ in range(max(members.values()) + 1)]
    found = {}

    def to(engine: Engine, written: Envelope) -> None:
        found.update((d.id, d) for d in engine.process(written))

    for i, e in enumerate(events):
        if e.source == "job":
            node.book.update(e)
            for engine in engines:
                to(engine, e)
            continue
        record = Record("telemetry", 0, i, e.node.encode(), e, 0, event_ts=e.ts, raw=encode(e))
        for o in node.handle([record]):
            value = decode_bundled(o.value)
            for written in value.events if isinstance(value, Bundle) else (value,):
                for engine in engines if o.key is None else (engines[members[written.job]],):
                    to(engine, written)
    for engine in engines:
        found.update((d.id, d) for d in engine.tick(wall_now=time.time() + wall_idle_s))
    return list(found.values())


def test_members_that_hold_a_quiet_job_and_its_mates_apart_alert_as_one_engine_does():
    # The quiet job's mate is on the other member: the node stage's word on the jobs' clocks
    # (summary/clock) moves it there as the mate's events move it in one engine. Without the word,
    # the wall clock moved it: recorded (none), where `analyze` gives the alert.
    events = _two_jobs(quiet_from=100.0)
    quiet = [(d.job, str(d.action)) for d in analyze(events) if d.fault == "telemetry_lost"]
    assert quiet == [(JOB, "alert")]
    one = _by_member(events, {JOB: 0, OTHER: 0}, wall_idle_s=120.0)
    assert [(d.job, str(d.action)) for d in one if d.fault == "telemetry_lost" and d.job == JOB] == quiet
    apart = _by_member(events, {JOB: 0, OTHER: 1}, wall_idle_s=120.0)
    assert [(d.job, str(d.action)) for d in apart if d.fault == "telemetry_lost" and d.job == JOB] == quiet


def _job_on(partition: int, prefix: str) -> str:
    """A job name whose `summaries` records land on ``partition`` (of 3)."""
    return next(name for k in range(1000) if key_partition((name := f"{prefix}-{k}").encode(), 3) == partition)


@pytest.mark.broker
@pytest.mark.long(45)
def test_two_job_stage_members_over_kafka_holding_a_quiet_job_and_its_mate_apart_give_the_alert(own_kafka_settings, tmp_path):
    """As above, through Kafka: one node-stage member, two job-stage members holding the quiet job and
    its mate apart (`summaries` partitions 1 and 2: on different members under the range and the
    round-robin assignors). They stop together once the node stage is done (at its idle stop, its
    last word saying so) and they read what it wrote to the end, well before the wall clock's grace
    (30 s; their idle stop, 25 s, is the backstop), so only the mate's time, said by the node stage,
    can find the quiet job's loss, as `analyze` does. (Each stopping at its own 10 s idle stop, one
    left first at load and the other took its partition over: it held both jobs, CI.)"""
    quiet, mate = _job_on(1, "quiet"), _job_on(2, "mate")
    head = [topology(n=4, gpus=1, tp=1, pp=1, job=quiet), topology(n=4, gpus=1, tp=1, pp=1, job=mate)]
    events = head + sorted(_beats(quiet, 0, 100) + _beats(mate, 0, 300), key=lambda e: e.ts)
    assert [(d.job, str(d.action)) for d in analyze(events) if d.fault == "telemetry_lost"] == [(quiet, "alert")]
    trace = tmp_path / "two-jobs.parquet"
    write_trace(trace, events)
    replay_trace(own_kafka_settings, trace, speed=0, show_progress=False)
    tag = uuid.uuid4().hex[:6]
    nodes = start_members(own_kafka_settings, "node", 1, f"mates-node-{tag}", idle_s=6)
    wait_for_records(own_kafka_settings, topics.SUMMARIES, decode, "-", bool, timeout_s=60, progress=len)
    jobs = start_job_members(own_kafka_settings, 2, f"mates-job-{tag}")
    try:
        finish_members(own_kafka_settings, nodes)
    finally:
        upstream_done(jobs)
    finish_job_members(own_kafka_settings, jobs)
    held = [set(h._partition_of) for _, _, h in jobs]
    assert {frozenset(h & {quiet, mate}) for h in held} == {frozenset({quiet}), frozenset({mate})}, held
    latest = {d.id: d for d in job_records(own_kafka_settings, "diagnoses", Diagnosis.decode, None, idle_s=1.5)}
    assert sorted((d.job, str(d.action)) for d in latest.values() if d.fault == "telemetry_lost") == [(quiet, "alert")]
