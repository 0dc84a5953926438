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


@dataclass
class IdleStop:
    idle_stop_s: float
    min_empty_polls: int = MIN_EMPTY_POLLS
    unread_wait_s: float = UNREAD_WAIT_S
    quiet_since: float = 0.0
    empty_polls: int = 0
    _warned: bool = False

    def start(self, now: float) -> None:
        """Something that restarts the count: records read, a partition assigned, a join going on."""
        self.quiet_since, self.empty_polls, self._warned = now, 0, False

    def polled(self, now: float, got_records: bool) -> None:
        if got_records:
            self.start(now)
        else:
            self.empty_polls += 1

    def due(self, now: float, drained: Callable[[], bool]) -> bool:
        """Whether the run may stop now; ``drained`` (asked only once the rest holds) says whether
        every partition of the member was read to its end."""
        quiet = now - self.quiet_since
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
