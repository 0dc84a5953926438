"""The launcher after a crash: stop-time checks hold the restart until their verdict; node names."""

from __future__ import annotations

import argparse
import queue
import threading
import time

import pytest

from faultlens.events.command import Command
from faultlens.trainer_hooks.launcher import Launcher, node_names


def held_launcher(crash_wait: float, nodes=("fl-node1", "fl-node2")) -> Launcher:
    """A launcher with no broker: only what the wait after a crash reads."""
    launcher = Launcher.__new__(Launcher)
    launcher.args = argparse.Namespace(crash_wait=crash_wait)
    launcher.commands = queue.Queue()
    launcher.nodes = tuple(nodes)
    launcher.emitted = []
    launcher.emit = launcher.emitted.append
    return launcher


def command(action: str, nodes=("fl-node2",), **params) -> Command:
    now = time.time()
    return Command(job="j", action=action, nodes=tuple(nodes), issued_at=now, expires_at=now + 60, params=params)


def later(launcher: Launcher, seconds: float, cmd: Command) -> threading.Timer:
    t = threading.Timer(seconds, launcher.commands.put, (cmd,))
    t.start()
    return t


def test_run_checks_holds_the_restart_for_the_verdict():
    launcher = held_launcher(crash_wait=0.2)
    launcher.commands.put(command("run_checks", ("fl-node1", "fl-node2"), then="reattempt", wait_s=30.0))
    evict = command("evict", ("fl-node2",), replacements=["fl-node3"])
    timer = later(launcher, 0.8, evict)  # well past --crash-wait: only the checks' wait keeps it open
    try:
        assert launcher._wait_after_crash() == evict
    finally:
        timer.cancel()
    [held] = launcher.emitted
    assert held["event"] == "waiting_for_checks" and held["wait_s"] == 30.0
    assert held["nodes"] == ["fl-node1", "fl-node2"]


class ExitsLater:
    """A rank process that is still running for its first polls, then has crashed."""

    def __init__(self, polls_alive: int, code: int) -> None:
        self.left, self.code = polls_alive, code

    def poll(self) -> int | None:
        self.left -= 1
        return None if self.left >= 0 else self.code


def test_run_checks_read_before_the_crash_is_seen_still_holds_the_restart():
    # CI saw this order: the crash's log lines reached the remediator, whose run_checks came in
    # while the launcher's poll still found the rank running. The wait after the crash must still
    # be held for the checks, or the job is reattempted in place on the suspect machine.
    launcher = held_launcher(crash_wait=0.2)
    launcher.args.command_wait = 0.2
    launcher.attempt = 1
    launcher.procs = [(ExitsLater(3, 0), "fl-node1", 0), (ExitsLater(3, 1), "fl-node2", 1)]
    launcher.commands.put(command("run_checks", ("fl-node1", "fl-node2"), then="reattempt", wait_s=30.0))
    evict = command("evict", ("fl-node2",), replacements=["fl-node3"])
    timer = later(launcher, 1.2, evict)
    try:
        assert launcher._watch() == ("evict", evict, [])
    finally:
        timer.cancel()
    assert [e["event"] for e in launcher.emitted] == ["crash", "waiting_for_checks"]


def test_other_commands_do_not_end_the_wait_and_nothing_ends_it_at_crash_wait():
    launcher = held_launcher(crash_wait=0.5)
    for cmd in (command("capture_stacks"), command("evict", ("n777",)), command("run_checks", wait_s="soon")):
        launcher.commands.put(cmd)
    assert launcher._wait_after_crash() is None  # then the launcher reattempts in place, as before
    assert launcher.emitted == []  # a run_checks without a usable wait_s does not stretch the wait
    launcher.commands.put(command("reattempt", ()))
    assert launcher._wait_after_crash().action == "reattempt"


def test_node_names():
    assert node_names(argparse.Namespace(nodes=3, node_names="")) == ("n000", "n001", "n002")
    assert node_names(argparse.Namespace(nodes=2, node_names="fl-node1, fl-node2")) == ("fl-node1", "fl-node2")
    with pytest.raises(ValueError, match="given twice"):
        node_names(argparse.Namespace(nodes=2, node_names="a,a"))
