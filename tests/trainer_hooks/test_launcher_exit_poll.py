"""The launcher's watch of an attempt (trainer_hooks/launcher.py): the ranks that obey one command
(an exit code of trainer_hooks/exit_codes.py) reach their step boundary at different moments. Those
that exited while the launcher waited for the command count with the first it saw: before, only the
ranks exited at the first poll were evicted, and a node whose rank exited a moment later stayed in
the job (test_launcher_broker's exit-codes test, on a loaded machine). No broker: fake ranks whose
exits are told by how often they were polled, not by a clock."""

from __future__ import annotations

import argparse
import queue

from faultlens.trainer_hooks.exit_codes import ACTION_EXIT
from faultlens.trainer_hooks.launcher import Launcher


class Rank:
    """A rank that exits with ``code`` at its ``at``-th poll (1: the first)."""

    def __init__(self, code: int | None, at: int):
        self.code, self.at, self.polls = code, at, 0

    def poll(self) -> int | None:
        self.polls += 1
        return self.code if self.polls >= self.at else None


def launcher(*ranks: tuple[str, Rank]) -> Launcher:
    watch = Launcher.__new__(Launcher)  # the watch needs no broker, listener nor producer
    watch.args = argparse.Namespace(command_wait=0.01, crash_wait=0.01)
    watch.nodes = tuple(dict.fromkeys(node for node, _ in ranks))
    watch.commands = queue.Queue()
    watch.procs = [(rank, node, i) for i, (node, rank) in enumerate(ranks)]
    watch.emitted = []
    watch.emit = watch.emitted.append
    return watch


def test_ranks_that_obey_a_moment_after_the_first_are_evicted_with_it():
    evict = ACTION_EXIT["evict"]
    watch = launcher(("n000", Rank(evict, at=1)), ("n001", Rank(evict, at=2)), ("n002", Rank(None, at=1)))
    assert watch._watch() == ("evict", None, ["n000", "n001"])  # n002 trains on: not evicted


def test_the_first_code_seen_decides_and_only_its_ranks_go():
    watch = launcher(("n000", Rank(ACTION_EXIT["evict"], at=1)), ("n001", Rank(ACTION_EXIT["rollback"], at=2)))
    assert watch._watch() == ("evict", None, ["n000"])
