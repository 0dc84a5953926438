"""When a consumer-group runner waits for its outputs to be acknowledged and commits.

At-least-once: nothing is committed before the outputs of everything before it are acknowledged.
Waiting for the acknowledgements after every batch kept a member idle for the broker's round
trip each time, so a member that keeps reading only sends in between and settles (flush, then
commit) every ``interval_s`` (streams.runner.options.COMMIT_INTERVAL_S); a caught-up member, or
one at the end of its run, settles at once. Pure: the runner tells it what happened and when.

What is to be committed is what was handed on, not only what was read: in event time the merge
holds records past the poll that read them and lets them go in a later loop that may read nothing
(the other partitions caught up or idle), or at the end of a run. Those are :meth:`handed_on`
too; counted only as reads, they were settled before they went, and a group's last commits
stayed below them (two members through a rebalance ended with 300 of 600 records committed, and
a restart read the rest again).
"""

from __future__ import annotations


class CommitSchedule:
    """Whether records were handed on since the last settle, and whether one is due."""

    __slots__ = ("interval_s", "settled_at", "unsettled")

    def __init__(self, interval_s: float, now: float = 0.0):
        self.interval_s = interval_s
        self.settled_at = now  # monotonic time of the last flush and commit
        # records read or handed on since the last settle: their offsets are not committed yet
        self.unsettled = False

    def start(self, now: float) -> None:
        """The run starts: the first interval counts from here."""
        self.settled_at = now

    def sent(self, read: bool, now: float) -> bool:
        """Outputs were sent (``read``: for records read in this loop); whether to settle now:
        not while reading within the interval, always for a call with nothing read (caught up, or
        the end of the run)."""
        self.unsettled = self.unsettled or read
        return not read or now - self.settled_at >= self.interval_s

    def handed_on(self) -> None:
        """Records went to the handler (event time: let go by the merge, maybe in a loop that read
        nothing): their offsets are to be committed at the next settle."""
        self.unsettled = True

    def settled(self, now: float) -> bool:
        """Everything sent was acknowledged; whether records were handed on since the last
        settle (then their offsets are to be committed)."""
        self.settled_at = now
        unsettled, self.unsettled = self.unsettled, False
        return unsettled

    def failed(self) -> None:
        """Outputs were not acknowledged: every partition is read again from its last commit, so
        nothing handed on before is left to commit."""
        self.unsettled = False
