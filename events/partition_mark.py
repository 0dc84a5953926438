"""How far one partition of a :class:`events.event_time.WatermarkMerge` has got in event time.

A partition is as far along as its own records, unless upstream writers (the node stage's members
writing `summaries`) announce watermarks in it: then it is only as far as its slowest live writer
that still has work, it waits while an input partition of theirs has no writer that spoke, and
when every writer fell silent their last words still bind. :class:`PartitionState` is what the
merge keeps per partition; the functions judge it (pure: the merge passes the wall time and the
writers' time to live).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PartitionState:
    """What a merge knows of one partition: its own data, its upstream writers' words, what it holds."""

    watermark: float | None = None
    # Upstream writers' own watermarks, when a partition has several (the node stage's members
    # writing `summaries`): writer → (watermark, wall time heard, input partitions it reads, still
    # behind on its input, idle, done: stopped because its input ended). The partition is then only as far along as its slowest live
    # writer that is not idle.
    writers: dict[str, tuple[float, float, frozenset[str] | None, bool, bool, bool]] = field(default_factory=dict)
    # How many input partitions the writers read in all, when they say which ones each reads:
    # then the partition is held back while some input partition has no live writer that reads
    # it (a member whose rebalance callback ran late has not said hello yet, and its records are
    # still to come).
    of: int | None = None
    # A follower (a topic every member reads in full, such as `jobs`) never sets the pace: its
    # records wait until the other partitions' data has reached them.
    follower: bool = False
    last_data: float = 0.0  # wall time of the last record it delivered (or of its assignment)
    # The broker's time of the latest record read from it: while a backlog is read, a writer is
    # alive if it spoke shortly before that, not shortly before now.
    frontier: float | None = None
    held: int = 0
    # The offsets of the records held, in ascending order, an offset once a record (a bundle's
    # events share its offset: a copy each); the first is where a commit stops.
    offsets: list[int] = field(default_factory=list)

    def reached(self, broker_ts: float | None) -> None:
        """A record (or an announcement) stamped ``broker_ts`` by the broker was read from it."""
        if broker_ts is not None and (self.frontier is None or broker_ts > self.frontier):
            self.frontier = broker_ts


def partition_mark(state: PartitionState, wall_now: float, writer_ttl_s: float, backlog: bool = False) -> float | None:
    """How far ``state``'s partition has got in event time: its slowest live writer that is not idle,
    else its own data; -inf while an input partition of its writers has none that spoke."""
    # Read live, a writer silent for writer_ttl_s is gone. Read from a backlog, every word is
    # old by the wall clock: a writer is gone only once the partition's own records have moved
    # writer_ttl_s of broker time past its last word.
    live = live_writers(state, wall_now, writer_ttl_s, backlog)
    if not live:
        # Every writer fell silent (starved, stalled in a rebalance, dead, or done): their last
        # words still bind. Judged by its own data, the partition handed on one writer's
        # records past another's still to come, and a starved node stage's heartbeats came
        # after their peers' had judged those nodes silent (issue 32).
        live = last_words(state, writer_ttl_s)
        if not live:
            return state.watermark
    if state.of is not None and all(reads is not None for _, reads, _, _ in live):
        covered: set[str] = set()
        for _, reads, _, _ in live:
            covered |= reads or frozenset()
        if len(covered) < state.of:
            return float("-inf")  # an input partition whose writer has not spoken yet
    # A writer that says it is behind has input still to read, whatever it says of idleness: a
    # member revoked mid-rebalance has an empty merge, "idle", and its word let one member's
    # records run 220 s past the other's (issue 32, starved).
    busy = [w for w, _, behind, idle in live if behind or not idle]
    if busy:
        return min(busy)
    # Every writer idle: nothing more is on its way; what is held goes as far as it reaches.
    return state.watermark if state.held else float("inf")


def live_writers(state: PartitionState, wall_now: float, writer_ttl_s: float,
                 backlog: bool) -> list[tuple[float, frozenset[str] | None, bool, bool]]:
    """The words of the writers that spoke within ``writer_ttl_s`` (of broker time, while a backlog is read)."""
    now = state.frontier if backlog and state.frontier is not None else wall_now
    return [(w, reads, behind, idle) for w, heard, reads, behind, idle, _ in state.writers.values()
            if now - heard < writer_ttl_s]


def last_words(state: PartitionState, writer_ttl_s: float) -> list[tuple[float, frozenset[str] | None, bool, bool]]:
    """The word in force for each input partition when no writer is live: the latest writer that
    said it reads it (a writer whose every partition a later one took over says nothing any
    more), and those that did not say what they read, from the last TTL of words."""
    words = sorted(state.writers.values(), key=lambda word: word[1], reverse=True)
    if not words:
        return []
    latest, covered = words[0][1], set[str]()
    out: list[tuple[float, frozenset[str] | None, bool, bool]] = []
    for mark, heard, reads, behind, idle, _ in words:
        if reads is None:
            if latest - heard < writer_ttl_s:
                out.append((mark, reads, behind, idle))
        elif reads - covered:
            covered |= reads
            out.append((mark, reads, behind, idle))
    return out
