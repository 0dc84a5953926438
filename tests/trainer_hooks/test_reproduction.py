"""Dual-phase reproduction in the launcher: the pure parts (trainer_hooks.reproduction) with a fake group runner."""

from __future__ import annotations

import pytest

from faultlens.events.command import Command
from faultlens.events.envelope import decode, encode
from faultlens.events.payloads import check_payload
from faultlens.remediation.ladder import dual_phase_plan
from faultlens.trainer_hooks.reproduction import judge_run, reproduction_groups, run_reproduction

NODES = ("n000", "n001", "n002", "n003")


def restart(nodes=NODES):
    return Command(job="j", action="restart", issued_at=1.0, expires_at=2.0, diagnosis_id="d1",
                   params={"mode": "dual_phase_replay", "plan": dual_phase_plan(nodes).to_dict()})


def test_each_group_runs_once_and_only_groups_holding_the_bad_machine_reproduce():
    ran, events, lines = [], [], []

    def run_group(nodes):
        ran.append(nodes)
        return {n: (1 if n == "n002" else None if "n002" in nodes else 0) for n in nodes}, False

    cmd = restart()
    failing = run_reproduction(cmd, "j", NODES, run_group, 60.0, events.append, lines.append)
    assert ran == [("n000", "n001"), ("n002", "n003"), ("n000", "n002"), ("n001", "n003")]
    assert failing == {"horizontal": [1], "vertical": [0]}
    assert [e.kind for e in events] == ["replay"] * 4 + ["replay_done"]
    for e in events:
        check_payload(decode(encode(e)))
    assert events[1].data["detail"] == "exited n002=1" and events[0].data["detail"].startswith("ran clean")
    assert events[-1].data["failing_horizontal"] == [1] and events[-1].data["command_id"] == cmd.id
    assert [line["event"] for line in lines] == ["replay_group"] * 4 + ["replay_done"]
    assert dual_phase_plan(NODES).culprits([1], [0]) == ("n002",)


def test_the_whole_job_is_not_reproduced_again_and_machines_gone_are_dropped():
    ran = []
    failing = run_reproduction(restart(("a", "b")), "j", ("a", "b"), lambda n: (ran.append(n), ({x: 0 for x in n}, False))[1],
                         60.0, lambda e: None, lambda line: None)
    assert ran == [("a",), ("b",)] and failing == {"horizontal": [0], "vertical": []}
    assert reproduction_groups(restart().params, ("n000", "n001"))["horizontal"] == [("n000", "n001"), ()]


def test_a_hang_reproduces_and_bad_plans_are_refused():
    assert judge_run({"a": None}, True, 30.0) == (True, "still running after 30s (a hang reproduces)")
    assert judge_run({"a": 0, "b": 0}, False, 30.0)[0] is False
    with pytest.raises(ValueError):
        reproduction_groups({"mode": "dual_phase_replay"}, NODES)
    with pytest.raises(ValueError):
        reproduction_groups({"plan": {"horizontal": [["a"]], "vertical": "a"}}, NODES)
