"""Silence judged against live peers (issue 32): a node is silent only when its job's other nodes
report on past it; a job, or a part of it, that goes quiet together is one alert, never evictions."""

from __future__ import annotations

import random
import time

import pytest

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.rules.liveness import SilenceDetector
from tests.diagnosis.diag_events import JOB, T0, beat, nodes, step, topology


def _phased_beats(names: list[str], until: float, every: float = 10.0, seed: int = 1,
                  stop: dict[str, float] | None = None):
    """Each node's agent beats every ``every`` seconds from its own phase (agents start at different
    moments), as a real fleet does; ``stop`` ends some nodes' beats early."""
    rng = random.Random(seed)
    stop = stop or {}
    out = []
    for n in names:
        t = rng.uniform(0, every)
        while t < min(until, stop.get(n, until)):
            out.append(beat(t, n))
            t += every
    return sorted(out, key=lambda e: e.ts)


def _evictions(found) -> list:
    return [(d.fault, d.nodes) for d in found if d.action == "evict"]


@pytest.mark.parametrize("seed", range(6))
def test_a_whole_job_going_quiet_under_the_wall_clock_evicts_nobody(seed):
    """The stream ends for every node at once (a trace's end, a job that finished, a dead node-stage
    member): the live consumer's wall clock then moves the job's time, and nodes cross the grace
    period one by one in the order of their beats' phases. Before, the first few were 'a minority'
    and evicted (issue 32: h100-13 'for 31s', h100-03 'for 30s')."""
    e = Engine(EngineConfig(implicit=False, grace_s=30))
    e.process(topology(n=16, gpus=8, tp=8, pp=2))
    for ev in _phased_beats(nodes(16), 600, seed=seed):
        e.process(ev)
    found = []
    wall = time.time()
    e._lanes[JOB].arrival_wall = wall  # the last event arrived just now
    for k in range(1, 400):
        found += e.tick(wall + 0.5 * k)
    assert _evictions(found) == []
    [alert] = [d for d in found if d.fault == "telemetry_lost"]
    # Nothing on its clock arrived either (no other job shares it): the pipeline's silence or the
    # input's end, as `analyze` reads a trace's end (recorded, no alert).
    assert alert.action == "none" and alert.nodes == () and "the 16 still reporting" in alert.detail
    assert "the stream stopped" in alert.detail


def test_a_node_that_stops_while_its_peers_beat_on_is_evicted_with_their_word():
    det = SilenceDetector(grace_s=30)
    for ev in _phased_beats(nodes(16), 300, stop={"n005": 120}):
        det.observe(ev)
    found = det.tick(T0 + 300)
    assert [(f.fault, f.action, f.nodes) for f in found] == [("node_silent", "evict", ("n005",))]
    assert "15 of its 15 peers reported on" in found[0].detail


def test_peers_must_have_gone_on_for_the_grace_period_not_the_clock():
    """The job's time is past n005's grace, but no peer has reported that far past its last beat
    (the consumer moved the job's time, the peers' next beats are still on their way): no verdict
    until they come."""
    det = SilenceDetector(grace_s=30)
    events = _phased_beats(nodes(8), 300, stop={"n005": 120})
    last = max(e.ts for e in events if e.node == "n005")
    for ev in events:
        if ev.ts < last + 29:
            det.observe(ev)
    assert det.tick(last + 35) == []
    for ev in events:
        det.observe(ev)
    assert [(f.action, f.nodes) for f in det.tick(T0 + 300)] == [("evict", ("n005",))]


def test_a_few_nodes_quiet_together_are_one_alert_not_evictions():
    """5 of 16 (over a quarter) stop within a grace period of each other: a rack, a switch or a
    telemetry partition, named once; no machine is evicted."""
    det = SilenceDetector(grace_s=30)
    quiet = ["n002", "n003", "n009", "n010", "n014"]
    for ev in _phased_beats(nodes(16), 300, stop={n: 150 + i for i, n in enumerate(quiet)}):
        det.observe(ev)
    found = det.tick(T0 + 300)
    assert [(f.fault, f.action, f.nodes) for f in found] == [("node_silent", "alert", tuple(quiet))]
    assert det.tick(T0 + 310) == []


def test_nodes_that_fall_silent_far_apart_are_each_judged_alone():
    det = SilenceDetector(grace_s=30)
    stop = {"n001": 60, "n002": 200}
    events = _phased_beats(nodes(4), 400, stop=stop)
    found = []
    for ev in events:
        found += det.tick(ev.ts)
        det.observe(ev)
    assert [(f.action, f.nodes) for f in found] == [("evict", ("n001",)), ("evict", ("n002",))]


def test_a_two_node_job_judges_a_node_by_the_other():
    det = SilenceDetector(grace_s=30)
    for ev in _phased_beats(nodes(2), 200, stop={"n001": 100}):
        det.observe(ev)
    assert [(f.action, f.nodes) for f in det.tick(T0 + 200)] == [("evict", ("n001",))]


def test_a_one_node_job_going_quiet_is_the_jobs_stream_not_its_node():
    det = SilenceDetector(grace_s=30)
    for ev in _phased_beats(nodes(1), 100):
        det.observe(ev)
    [f] = det.tick(T0 + 200)
    assert (f.fault, f.action) == ("telemetry_lost", "alert")


def test_every_agent_gone_while_the_trainer_steps_is_not_a_fleet_of_evictions():
    """A bad agent roll-out: every node's beats stop, every rank steps on."""
    det = SilenceDetector(grace_s=30)
    for ev in _phased_beats(nodes(8), 100):
        det.observe(ev)
    for i, t in enumerate(range(5, 300, 10)):
        for r, n in enumerate(nodes(8)):
            det.observe(step(t + 0.01 * r, n, rank=r, n=i))
    found = det.tick(T0 + 300)
    assert [f.action for f in found] == ["alert"] and found[0].nodes == tuple(nodes(8))
