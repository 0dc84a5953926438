"""A hang is not told from a job whose whole telemetry stopped (issue 47's finding, issue 32's rule:
the whole job quiet is the job's or the pipeline's silence, never a machine's).

The live consumer moves a quiet job's time by the wall clock. A job stage left up longer after a
trace of a hung-then-restarted job (the simulated sim-hang#1 of bench/testbed/backlog_split.py)
raised a job_hang suspicion 60 s after the job's last beat and, 30 s on, reattempted the job:
"no stack dump arrived within 30s", dumps that would have travelled the stopped stream; `faultlens
analyze` of the same trace gives neither. The detectors (diagnosis.hang.detector) are fed events and then
ticked on past their end, as the wall clock ticks a quiet job; the last test runs the whole engine.
"""

from __future__ import annotations

import time

import pytest

from bench.testbed.stack_samples import JOB, T0, beat_event, fig7_dumps, grid, run_detector, stack_event, step_event
from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.implicit import ImplicitConfig, ImplicitFaultDetector
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.hang.detector import HangConfig
from faultlens.simulator.config import SimConfig
from faultlens.simulator.plan import FaultPlan
from faultlens.simulator.run import simulate
from tests.diagnosis.sim_replay import acting

TOPO = grid(16, 2, tp=2, pp=4, dp=4)
STUCK = 7


def _detector() -> ImplicitFaultDetector:
    book = JobBook()
    book.update(TOPO.to_event(JOB, T0))
    return ImplicitFaultDetector(book, ImplicitConfig(hang=HangConfig(collect_timeout_s=30.0)))


def _hung(beats_until: float) -> list:
    """Every rank steps every 2 s up to step 20 (t=40), then none does; the agents beat every 10 s
    until ``beats_until``, then nothing of the job arrives any more."""
    events = [step_event(2.0 * n + 0.001 * r, TOPO, r, n) for n in range(1, 21) for r in range(32)]
    events += [beat_event(float(t), node) for t in range(0, int(beats_until) + 1, 10) for node in TOPO.nodes]
    return events


def test_agents_that_beat_on_without_dumps_still_get_the_reattempt_at_the_first_beat_past_the_timeout():
    # What stays: the processes live (their agents beat on), no rank is behind, no dump came.
    out = run_detector(_detector(), _hung(beats_until=400), until=400)
    assert [(d.action, d.ts - T0) for d in out] == [("capture_stacks", 101.0), ("reattempt", 140.0)]
    assert "no stack dump arrived within 30s" in out[1].detail


@pytest.mark.parametrize("beats_until", [50, 70])
def test_a_job_whose_whole_telemetry_stopped_before_the_stall_threshold_is_no_hang(beats_until):
    # Beats listing live pids stop 10 or 30 s after the last step; a minute later the 60 s stall
    # floor is crossed while the last beat is still "fresh" (60 s), but nothing of the job has
    # arrived for longer than liveness' grace (30 s): its telemetry_lost, no suspicion, no verdict.
    det = _detector()
    assert run_detector(det, _hung(beats_until), until=600) == []
    assert not det.hang.wants_dumps(JOB)


def test_a_stall_whose_telemetry_stops_before_its_verdict_gets_no_verdict():
    # Suspected at t=101 while the agents beat; the stream stops at t=110, before the 30 s collection
    # ends: the missing dumps say nothing (they would travel the same stopped stream).
    det = _detector()
    out = run_detector(det, _hung(beats_until=110), until=900)
    assert [d.action for d in out] == ["capture_stacks"]
    assert det.hang.wants_dumps(JOB)  # still open: the dumps, if they come, belong to it


def test_a_verdict_held_by_an_outage_is_given_on_what_the_backlog_brings():
    # The same stop, then the pipeline comes back at t=300 with what it held: the beats of the
    # outage and the dumps the agents sent at t=105. They name the stuck rank's pipeline, as they
    # would have had they arrived on time (before the fix: a reattempt at t=131, the dumps ignored).
    det = _detector()
    assert [d.action for d in run_detector(det, _hung(beats_until=110), until=300)] == ["capture_stacks"]
    backlog = [beat_event(float(t), node) for t in range(120, 401, 10) for node in TOPO.nodes]
    backlog += [stack_event(105.0 + 0.01 * r, TOPO, r, text) for r, text in fig7_dumps(TOPO, STUCK).items()]
    out = run_detector(det, backlog, start=301, until=400)
    assert [d.action for d in out] == ["evict"]
    assert out[0].group == f"pp:{TOPO.group_id(STUCK, 'pp')}"


def test_an_outage_with_no_dumps_in_its_backlog_then_gets_todays_verdict():
    det = _detector()
    run_detector(det, _hung(beats_until=110), until=300)
    backlog = [beat_event(float(t), node) for t in range(120, 401, 10) for node in TOPO.nodes]
    out = run_detector(det, backlog, start=301, until=400)
    assert [(d.action, d.ts - T0) for d in out] == [("reattempt", 301.0)]


@pytest.fixture(scope="module")
def sim_hang():
    """sim-hang#1 of the backlog tests: n003 hangs at t=240 (found, evicted, the job restarted at
    480); the trace ends at 539."""
    run = simulate(SimConfig(nodes=8, gpus=4, seed=1, job="sim-hang-1"),
                   FaultPlan().fail_at("job_hang", node="n003", t=240))
    return list(run.events()), run.config.start_ts


def _live_past_the_end(events, past_s: float = 150.0) -> list:
    """The engine fed ``events``, then the live consumer's wall clock ticking it every quarter of a
    second (without waiting for it) until the job's time is ``past_s`` beyond its last event."""
    engine = Engine(EngineConfig(grace_s=5.0))
    live = {}
    for e in events:
        live.update((d.id, d) for d in engine.process(e))
    job, end, wall = events[0].job, max(e.ts for e in events), time.time()
    step = 0
    while engine.job_time(job) < end + past_s:
        step += 1
        live.update((d.id, d) for d in engine.tick(wall_now=wall + 0.25 * step))
    live.update((d.id, d) for d in engine.flush())
    return list(live.values())


def test_the_engine_ticked_past_a_hung_traces_end_acts_as_analyze(sim_hang):
    # Its last step is 7.4 s before the end, its last beat 4 s: the job's time moved by the wall
    # clock crossed the 63 s stall threshold while that beat was 59.5 s old, "fresh" by the 60 s
    # rule: a suspicion, and 30 s on a reattempt (the issue 47 finding). Now what analyze gives.
    events, _ = sim_hang
    live, end = _live_past_the_end(events), max(e.ts for e in events)
    assert acting(live) == acting(analyze(events))
    assert [d.action for d in live if d.fault == "job_hang" and d.ts > end] == []
    assert [d.action for d in live if d.fault == "telemetry_lost"] == ["none"]  # nothing on its clock arrived


def test_a_stream_that_stops_during_a_hang_gets_no_verdict_the_stream_did_not_give(sim_hang):
    # The same trace cut 35 s into the hang (the pipeline stopped then): analyze sees no stall long
    # enough to suspect; live, the wall clock used to carry the job to a suspicion and, with the
    # GPU windows seen before the cut, to an eviction of n003 on no data of the last minute.
    events, start = sim_hang
    cut = [e for e in events if e.ts <= start + 275]
    live = _live_past_the_end(cut)
    assert acting(live) == acting(analyze(cut))
    # A request for stacks 28 s after the last report, before the job counts as quiet (30 s), may
    # go out (live cannot yet tell a stopped stream from a late one); no verdict follows it.
    assert [d.action for d in live if d.fault == "job_hang"] in ([], ["capture_stacks"])
