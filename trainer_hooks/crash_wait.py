"""What a launcher does between a crash of its ranks and their restart: wait for the remediator's
verdict, for both launchers (`faultlens launch`, trainer_hooks/launcher.py, and `faultlens run`,
trainer_hooks/elastic_run.py), so the two cannot drift apart.

A crash (an exit code that no command explains) waits ``crash_wait`` seconds for the command that
says how to go on: an evict of the machines that failed, a reattempt, a rollback, a stop. A
`run_checks` (read before the crash was seen, or during the wait) means the remediator is running
stop-time checks on the job's machines and will send that command once they answer, so the wait is
stretched to the checks' own ``wait_s`` plus ``crash_wait``: restarting in place meanwhile would put
the job back on a suspect machine. Pure but for the clock: commands come from a callable.
"""

from __future__ import annotations

import time
from typing import Callable

from faultlens.events.command import Command

RESTART_ACTIONS = ("evict", "restart", "reattempt", "rollback")
LEAVING_ACTIONS = (*RESTART_ACTIONS, "stop")  # the commands that end a round of the ranks
_POLL_S = 0.5


def evicts_none_of(cmd: Command, nodes: tuple[str, ...] | list[str]) -> bool:
    """An evict of machines the job no longer runs on (sent before a restart swapped them out)."""
    return cmd.action == "evict" and not set(cmd.nodes) & set(nodes)


def checks_wait_s(checks: Command | None) -> float | None:
    """How long a run_checks says its checks take (``wait_s``); None for any other command or for a
    missing or absurd value, which holds nothing."""
    if checks is None or checks.action != "run_checks":
        return None
    wait_s = (checks.params or {}).get("wait_s")
    if not (isinstance(wait_s, (int, float)) and not isinstance(wait_s, bool) and 0 < wait_s < 86400):
        return None
    return float(wait_s)


def held_until(deadline: float, checks: Command | None, since: float, crash_wait: float) -> float:
    """``deadline`` stretched by a run_checks that came at ``since`` (time.monotonic()): to its
    ``wait_s`` plus ``crash_wait`` from then."""
    wait_s = checks_wait_s(checks)
    return deadline if wait_s is None else max(deadline, since + wait_s + crash_wait)


def wait_for_verdict(next_command: Callable[[float], Command | None], nodes: tuple[str, ...] | list[str],
                     crash_wait: float, *, checks: Command | None = None, checks_at: float | None = None,
                     on_checks: Callable[[Command, float], None] | None = None) -> Command | None:
    """The command that says how to go on after a crash, or None after the wait.

    ``next_command(seconds)``: the next command within ``seconds``, or None. ``checks``: a
    run_checks read before the crash was seen (at ``checks_at``, default now). ``on_checks(cmd,
    at)`` is told of each run_checks that comes during the wait. Other commands (checkpoint,
    capture_stacks) are the ranks' business and do not end the wait."""
    now = time.monotonic()
    deadline = held_until(now + crash_wait, checks, now if checks_at is None else checks_at, crash_wait)
    while (left := deadline - time.monotonic()) > 0:
        cmd = next_command(min(left, _POLL_S))
        if cmd is None:
            continue
        if cmd.action in LEAVING_ACTIONS:
            if not evicts_none_of(cmd, nodes):
                return cmd
        elif cmd.action == "run_checks":
            at = time.monotonic()
            deadline = held_until(deadline, cmd, at, crash_wait)
            if on_checks is not None:
                on_checks(cmd, at)
    return None
