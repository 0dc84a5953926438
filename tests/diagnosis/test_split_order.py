"""Split stages without Kafka (tests/diagnosis/split_stages.py): what node-stage members write
reaches the job stage in event-time order, and one, two or three members give the offline answer
on the hand-written cases and a simulated job. The same runs through a real broker are
tests/diagnosis/test_stages.py and bench/check_foreign_backlog.py."""

from __future__ import annotations

import pytest

from bench.testbed import foreign
from faultlens.diagnosis.engine.offline import analyze
from faultlens.events.trace import iter_trace
from tests.diagnosis.sim_replay import acting, offline_trace
from tests.diagnosis.split_stages import run_split, telemetry_records

CASES = ("dead_agent", "failslow_corroborated", "thermal_throttle", "hang_same_step", "healthy", "xid_two_sources")


@pytest.mark.parametrize("name", CASES)
def test_split_members_give_the_offline_answer_on_hand_written_cases(name):
    case = foreign.load(name)
    offline = acting(analyze(case.events))
    telemetry = telemetry_records(case.events)
    for members in (1, 2, 3):
        run = run_split(case.events, members, telemetry=telemetry)
        assert acting(run.diagnoses) == offline, (name, members)
        # A window is stamped when it closed: a member never writes below what it announced.
        assert run.late == [], [(e.source, e.kind, e.node, e.ts - foreign.T0) for e in run.late[:5]]


def test_split_members_give_the_offline_answer_on_a_simulated_job(tmp_path):
    path, offline, _ = offline_trace(tmp_path, "split-sim")
    events = list(iter_trace(path))
    telemetry = telemetry_records(events)
    for members in (2, 3):
        run = run_split(events, members, telemetry=telemetry)
        assert acting(run.diagnoses) == acting(offline)
        assert run.late == []
