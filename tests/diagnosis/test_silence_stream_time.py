"""Silence judged by the stream's event time (the outside-check rehearsal, tests/outside): a job whose
whole stream stops while another job of the same stream reports on is one `telemetry_lost` alert,
offline as live, and the wall clock stands in only for a stream that stopped entirely, which is
recorded as the pipeline's silence (action none), as `analyze` judges no absence at a trace's end."""

from __future__ import annotations

import time

from faultlens.diagnosis.engine.core import Engine, EngineConfig, analyze
from tests.diagnosis.diag_events import JOB, T0, beat, nodes, topology

OTHER = "neighbour"


def _two_jobs(quiet_from: float, until: float = 300.0) -> list:
    """Two 4-node jobs beating every 5 s; ``JOB`` stops at ``quiet_from``, ``OTHER`` goes on."""
    out = [topology(n=4, gpus=1, tp=1, pp=1), topology(n=4, gpus=1, tp=1, pp=1, job=OTHER)]
    for t in range(0, int(until), 5):
        for n in nodes(4):
            out.append(beat(t, n, job=OTHER))
            if t < quiet_from:
                out.append(beat(t, n))
    return out


def test_a_job_quiet_while_its_neighbour_reports_on_is_one_alert_offline():
    found = analyze(_two_jobs(quiet_from=100))
    lost = [d for d in found if d.fault == "telemetry_lost"]
    assert [(d.job, d.action, d.nodes) for d in lost] == [(JOB, "alert", ())]
    assert lost[0].onset == T0 + 95
    assert not [d for d in found if d.fault == "node_silent"]


def test_the_wall_clock_leaves_a_job_alone_while_another_job_still_arrives():
    e = Engine(EngineConfig(implicit=False, grace_s=30))
    for event in _two_jobs(quiet_from=100, until=120):
        e.process(event)
    before = e.job_time(JOB)
    wall = time.time()
    e._lanes[JOB].arrival_wall = wall - 60  # its last record a minute ago
    e._lanes[OTHER].arrival_wall = wall  # the neighbour's just now: the stream has not stopped
    assert e.tick(wall + 10) == [] and e.job_time(JOB) == before


def test_a_stream_that_stops_entirely_is_recorded_then_alerted_if_the_stream_runs_on_without_the_job():
    e = Engine(EngineConfig(implicit=False, grace_s=30))
    events = _two_jobs(quiet_from=100, until=100)
    for event in events:
        e.process(event)
    wall = time.time()
    for lane in e._lanes.values():
        lane.arrival_wall = wall
    stopped = [d for k in range(1, 200) for d in e.tick(wall + 0.5 * k) if d.fault == "telemetry_lost"]
    assert sorted((d.job, d.action) for d in stopped) == sorted([(OTHER, "none"), (JOB, "none")])
    assert all("the whole stream stopped" in d.detail for d in stopped)
    # The neighbour comes back, the job does not: now its silence is its own.
    again = [d for t in range(100, 200, 5) for n in nodes(4) for d in e.process(beat(t + 200, n, job=OTHER))]
    lost = [d for d in again if d.fault == "telemetry_lost"]
    assert [(d.job, d.action) for d in lost] == [(JOB, "alert")]
    assert not [d for d in again if d.fault == "node_silent" and d.action == "evict"]
