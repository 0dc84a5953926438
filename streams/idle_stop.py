"""When a bounded run (``GroupRunner.run(idle_stop_s=...)``: tests, replays, benches reading a
backlog) may take its input for done.

"No records for ``idle_stop_s``" alone was wrong twice on a starved machine (issue 32). A member
that took a leaving member's partitions over spent one loop of over six seconds rebuilding them
and stopped at its end, 15,687 records unread: the loop's own slowness counted as quiet. And a
poll that brings nothing is no proof that nothing is left to read when the CPU is too starved for
the fetch to come back in time. So idleness counts from the last records *or the last
assignment*, needs several empty polls in a row (time spent in one slow loop is not quiet), and,
where the runner can tell (``drained``), waits while the broker still holds records of the
member's partitions, for at most ``unread_wait_s`` more: a member left in a rebalance's limbo
(kafka-python keeps revoked partitions in its assignment until a join that may never complete)
must still end its run.

Quiet is counted in polls that returned nothing, not in wall time (session 25): a process stopped
for 20 s (SIGSTOP: a starved or descheduled member) came back to a poll that returned nothing and
took the stop for 23 s of quiet, and two members stopped right after resuming, their input not read
(the fetch a stopped process never sent cannot have brought records). Each empty poll adds the time
since the one before, but at most a poll's length and ``LOOP_SLACK_S`` (a slow loop still adds some
quiet, so a starved run still ends); a gap longer than ``STALL_S`` past the poll's length is a stall
of the process itself: it adds nothing, and several empty polls are needed again after it (a gap
right after one is a slow loop, counted as one: a loop always that slow still ends its run).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger(__name__)

# Empty polls in a row before a run may count as idle.
MIN_EMPTY_POLLS = 3
# How long past idle_stop_s a run waits for records the broker says are still unread.
UNREAD_WAIT_S = 60.0
# What one empty poll adds to the quiet at most, past the poll's own length: the loop's own work.
LOOP_SLACK_S = 0.5
# A gap between two polls longer than the poll's length and this is a stall of the process (stopped,
# descheduled, swapped), not quiet.
STALL_S = 5.0


@dataclass
class IdleStop:
    idle_stop_s: float
    min_empty_polls: int = MIN_EMPTY_POLLS
    unread_wait_s: float = UNREAD_WAIT_S
    poll_s: float = 0.2  # the poll's timeout (RunnerOptions.poll_timeout_ms)
    quiet_s: float = 0.0  # quiet counted so far, in empty polls
    last_poll: float = 0.0
    empty_polls: int = 0
    stalls: int = 0  # stalls of the process seen (not quiet)
    _stalled_before: bool = False
    _warned: bool = False

    def start(self, now: float) -> None:
        """Something that restarts the count: records read, a partition assigned, a join going on."""
        self.quiet_s, self.last_poll, self.empty_polls, self._warned = 0.0, now, 0, False

    def polled(self, now: float, got_records: bool) -> None:
        if got_records:
            self.start(now)
            return
        gap, self.last_poll = now - self.last_poll, now
        stalled = gap > self.poll_s + STALL_S
        if stalled and not self._stalled_before:
            # the process did not run: no poll could have brought anything in that time
            self._stalled_before = True
            self.stalls += 1
            self.empty_polls = 0
            log.info("no poll for %.0fs (the process stalled): not counted as quiet", gap)
            return
        # a loop slow time after time is a slow loop, not a stall: some quiet still counts
        self._stalled_before = stalled
        self.quiet_s += min(gap, self.poll_s + LOOP_SLACK_S)
        self.empty_polls += 1

    def due(self, now: float, drained: Callable[[], bool]) -> bool:
        """Whether the run may stop now; ``drained`` (asked only once the rest holds) says whether
        every partition of the member was read to its end."""
        quiet = self.quiet_s + 1e-9  # a sum of poll lengths
        if quiet < self.idle_stop_s or self.empty_polls < self.min_empty_polls:
            return False
        if drained():
            return True
        if quiet >= self.idle_stop_s + self.unread_wait_s:
            log.warning("idle for %.0fs with records of its partitions still unread: stopping anyway", quiet)
            return True
        if not self._warned:
            self._warned = True
            log.info("quiet for %.0fs but records of its partitions are still unread: waiting for them", quiet)
        return False


@dataclass
class JoinWait:
    """How long a member has waited in a group's join (between a revocation, or its start, and its
    next assignment), counted in polls: each at most ``STALL_S`` past the poll's length, so a stall
    of the process counts as one long poll (a member stopped for 20 s and kicked from its group was
    not 20 s in a join), while a poll that blocks in a join that does not complete (90 s seen on
    Tansu) still adds up to ``grace_s``.
    ``stuck`` once the join outlasted ``grace_s``: the runner then rejoins with a fresh member
    (session 25: a kicked member's join that Tansu never completed, the others having left it
    mid-way, stalled for good; the member gave up with 5,836 records of 18 partitions unread)."""

    grace_s: float
    poll_s: float = 0.2
    waited_s: float = 0.0
    last_poll: float | None = None

    def reset(self) -> None:
        self.waited_s, self.last_poll = 0.0, None

    def polled(self, now: float) -> None:
        if self.last_poll is None:
            self.last_poll = now
            return
        gap, self.last_poll = now - self.last_poll, now
        self.waited_s += min(gap, self.poll_s + STALL_S)

    @property
    def stuck(self) -> bool:
        return self.waited_s + 1e-9 >= self.grace_s
