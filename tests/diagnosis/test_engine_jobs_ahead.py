"""A job-stage member reads the broadcast `jobs` topic in full, also for a job whose data another
member holds. When a rebalance then hands it that job's data (a member was killed), the job's
records read ahead must not have moved the job's time: its data is not late, the topology in force
is the one of the data's time, and a restart applies at its own place in event time.
(This is what tests/diagnosis/test_stages_kill.py::test_e2e_a_job_stage_member_killed_mid_stream_changes_nothing
hit under load: the hang suspicion named the spare that replaced the hung node after its eviction.)"""

from __future__ import annotations

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.events.topology import Topology
from tests.diagnosis.diag_events import JOB, T0, beat, ev, nodes, step

BEFORE = Topology.grid(nodes(4), 2, 2, 2, 2)
AFTER = Topology.grid(["n000", "n001", "n002", "s000"], 2, 2, 2, 2)  # n003 evicted at t=400


def _jobs_topic():
    return [BEFORE.to_event(JOB, T0, event_id="topo-before"),
            ev(400, "-", "job", "restart", reason="evict", command_id="c1", nodes_out=["n003"], nodes_in=["s000"]),
            AFTER.to_event(JOB, T0 + 401, event_id="topo-after")]


def test_job_records_read_ahead_of_the_jobs_data_do_not_move_its_time():
    engine = Engine(EngineConfig(implicit=False))
    for record in _jobs_topic():  # the broadcast topic, read before any of the job's data
        engine.process(record)
    assert engine.job_time(JOB) is None
    engine.process(step(100, "n003", 6, 10))
    assert engine.job_time(JOB) == T0 + 100 and engine.stats["late"] == 0
    # The topology of the data's time, not the one the restart brought.
    assert engine.book.topology(JOB).nodes == BEFORE.nodes
    engine.process(beat(402, "s000"))
    assert engine.book.topology(JOB).nodes == AFTER.nodes


def test_a_restart_read_ahead_waits_for_the_jobs_data_to_reach_it():
    engine = Engine(EngineConfig(implicit=False))
    for record in _jobs_topic():
        engine.process(record)
    lane = engine._lanes[JOB]
    assert [e.kind for e in lane.pending] == ["restart"]  # not applied before the data that precedes it
    engine.process(step(100, "n003", 6, 10))
    assert [e.kind for e in lane.pending] == ["restart"]
    engine.process(step(400.5, "n000", 0, 40))
    assert lane.pending == []
