"""The crash wait both launchers share (trainer_hooks/crash_wait.py), on scripted commands."""

from __future__ import annotations

import time

import pytest

from faultlens.events.command import Command
from faultlens.trainer_hooks.crash_wait import checks_wait_s, evicts_none_of, held_until, wait_for_verdict


def cmd(action: str, nodes: tuple[str, ...] = (), **params) -> Command:
    now = time.time()
    return Command(job="j", action=action, issued_at=now, expires_at=now + 60, nodes=nodes, params=params)


def script(*commands: Command):
    queue = list(commands)
    return lambda seconds: queue.pop(0) if queue else None


def test_the_wait_ends_on_the_first_command_that_says_how_to_go_on():
    verdict = cmd("reattempt")
    got = wait_for_verdict(script(cmd("checkpoint"), cmd("capture_stacks"), cmd("evict", ("gone",)), verdict),
                           ("n0", "n1"), crash_wait=60.0)
    assert got is verdict  # the ranks' commands and an evict of a machine the job left do not end it


def test_an_evict_naming_one_of_the_jobs_machines_ends_it():
    evict = cmd("evict", ("n1", "gone"))
    assert evicts_none_of(cmd("evict", ("gone",)), ("n0", "n1")) and not evicts_none_of(evict, ("n0", "n1"))
    assert wait_for_verdict(script(evict), ("n0", "n1"), crash_wait=60.0) is evict


def test_run_checks_during_the_wait_is_told_and_without_a_verdict_the_wait_ends_empty():
    told = []
    checks = cmd("run_checks", ("n1",), wait_s=0.2)
    got = wait_for_verdict(script(checks), ("n0", "n1"), crash_wait=0.05, on_checks=lambda c, at: told.append(c))
    assert got is None and told == [checks]


def test_run_checks_stretches_the_deadline_to_its_wait_plus_the_crash_wait():
    checks = cmd("run_checks", wait_s=30)
    assert held_until(100.0, checks, since=50.0, crash_wait=10.0) == 100.0  # 50 + 30 + 10 is earlier
    assert held_until(100.0, checks, since=70.0, crash_wait=10.0) == 110.0
    assert held_until(100.0, cmd("checkpoint", wait_s=30), since=70.0, crash_wait=10.0) == 100.0


@pytest.mark.parametrize("wait_s", [None, True, -1, 0, 86400, "30", [30]])
def test_a_missing_or_absurd_checks_wait_holds_nothing(wait_s):
    assert checks_wait_s(cmd("run_checks", wait_s=wait_s)) is None
    assert held_until(5.0, cmd("run_checks", wait_s=wait_s), since=0.0, crash_wait=1.0) == 5.0
