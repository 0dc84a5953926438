"""Event time for consumers: where an event sits in time, and in which order to hand events on.

Used by :class:`streams.runner.loop.GroupRunner` (live) and testable alone. Where one event sits in time
(a node's clock judged against its peers) is :mod:`events.event_clock`; how far one partition has
got, from its own records and its upstream writers' words, is :mod:`events.partition_mark`.

:class:`WatermarkMerge` hands records on in event-time order across partitions and topics,
whatever speed each partition is read at (a backlog after an outage, a slow broker, a rebalance).
Each partition's watermark is the latest event time it delivered; a record is released once every
partition that may still deliver something earlier has moved past it. A partition that has caught
up with its high-water mark and delivered nothing for ``max_idle_s`` stops holding the others
back (Kafka Streams' ``max.task.idle.ms``, Flink's idleness). Partitions that run ahead are
reported for pausing so the consumer fetches from the ones behind.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left, bisect_right, insort
from operator import itemgetter
from typing import Generic, Hashable, Iterable, Iterator, NamedTuple, TypeVar

from faultlens.events.partition_mark import PartitionState, last_words, live_writers, partition_mark

T = TypeVar("T")
Partition = Hashable


class WriterWord(NamedTuple):
    """An upstream writer's announcement: it has written everything up to ``watermark`` (-inf:
    nothing yet); ``reads`` names the input partitions it reads, of ``of`` in its whole group;
    ``behind`` says it still has input to read (a backlog, a partition just taken over); ``idle``,
    that it has handed on all it read and its input has been quiet (it holds nothing back); ``done``,
    its last word: it stopped because its input ended (an idle stop), not because it failed."""

    member: str
    watermark: float
    reads: list[str] | None = None
    of: int | None = None
    behind: bool | None = None
    idle: bool | None = None
    done: bool | None = None


class UpstreamStop(NamedTuple):
    """Every upstream writer of a partition has fallen silent (none spoke for ``writer_ttl_s``):
    ``since`` is the wall time the last of them spoke, ``members`` those that spoke last, and
    ``watermark`` how far they had written. What is quiet downstream of it is the pipeline's silence,
    not its sources': a consumer's clock must not run on past ``since`` (docs/design.md §1).
    ``behind``: a word in force when they fell silent said its writer still had input to read (a
    backlog, a partition just taken over): records are on their way, so the quiet before ``since``
    is no more the sources' than the silence after it, and a consumer's clock must not run at all.
    A starved or rebalancing node stage falls silent so; a clock moved up to ``since`` then moved a
    hung job's time past steps still to come (test_silence_backlog_wide, a machine at load 10)."""

    since: float
    members: tuple[str, ...]
    watermark: float
    behind: bool = False


# A held record is the tuple (ts, seq, partition, offset, item): ``seq`` is unique, so tuples
# order by (ts, seq) in C and never compare further. Each partition's held records are one list
# in that order (a run): a poll's records of a partition come in offset order and, nearly always,
# in time order, so a poll is appended to its partition's run, and a release cuts each run's
# prefix at the low watermark (a bisection) and merges the prefixes in one sort (timsort merges
# sorted runs). A global heap cost two pushes and a pop a record (issue 56).
_TS, _PART, _OFFSET, _ITEM = 0, 2, 3, 4
_item_of, _offset_of = itemgetter(_ITEM), itemgetter(_OFFSET)
_LAST = float("inf")  # (limit, _LAST) sorts after every held record stamped ``limit``


class WatermarkMerge(Generic[T]):
    """Holds records until every partition that may deliver earlier ones has moved past them."""

    def __init__(self, max_idle_s: float = 2.0, max_held_per_partition: int = 20_000,
                 max_held: int = 500_000, writer_ttl_s: float = 15.0, max_lead_s: float = 120.0,
                 min_held_to_pause: int = 5_000) -> None:
        self.max_idle_s = max_idle_s
        self.writer_ttl_s = writer_ttl_s
        self.max_held_per_partition = max_held_per_partition
        # Event-time alignment: a partition that holds more than ``min_held_to_pause`` records and
        # whose data runs more than ``max_lead_s`` of event time past the low watermark (or any, while
        # some partition has said nothing yet) is paused; it resumes within half of each.
        self.max_lead_s = max_lead_s
        self.min_held_to_pause = min_held_to_pause
        self.max_held = max_held
        self._parts: dict[Partition, PartitionState] = {}
        self._runs: dict[Partition, list[tuple]] = {}  # partition → its held records, in (ts, seq) order
        self._held = 0
        self._seq = itertools.count()
        self.forced = 0  # records released before their time because memory ran out
        self._slowest: set[Partition] = set()  # the partitions that set the last low watermark
        self._low: float | None = None  # the last low watermark (None: every partition idle)
        self._judged = False  # a low watermark was taken at least once
        # Event time up to which everything was handed on (what a writer downstream may announce).
        self.progress: float | None = None

    # --- partitions ---------------------------------------------------------------------------
    def assign(self, partitions: Iterable[Partition], wall_now: float, *, follower: bool = False) -> None:
        taken_over = False
        for p in partitions:
            if p not in self._parts:
                self._parts[p] = PartitionState(last_data=wall_now, follower=follower)
                taken_over = taken_over or not follower
        if taken_over:
            # What was handed on so far covers none of the new partitions' records: the progress a
            # writer downstream may announce starts again from what the merge hands on next.
            self.progress = None

    def looked_away(self, seconds: float) -> None:
        """The consumer fetched nothing for ``seconds`` (a slow loop, a process starved of CPU or
        stopped): no partition was quiet meanwhile, it was not looked at. Idle means caught up and
        silent while fetched from; a partition whose records came during the gap is caught up only
        by the high-water mark of its fetch before it, and was passed over as idle while the
        partitions fetched first were handed on past its records (a live member stopped 3 s at a
        time: a job's steps handed on 114 s of event time after what was handed on already)."""
        for state in self._parts.values():
            state.last_data += seconds

    def revoke(self, partitions: Iterable[Partition]) -> int:
        """Forget partitions taken away (their records are uncommitted: the new owner re-reads them)."""
        gone = set(partitions) & set(self._parts)
        for p in gone:
            del self._parts[p]
        dropped = sum(len(self._runs.pop(p, ())) for p in gone)
        self._held -= dropped
        return dropped

    @property
    def held(self) -> int:
        return self._held

    # --- records ------------------------------------------------------------------------------
    def add(self, partition: Partition, offset: int, ts: float, item: T, wall_now: float,
            broker_ts: float | None = None) -> None:
        state = self._parts.get(partition)
        if state is None:  # (not setdefault: that would build a state for every record)
            state = self._parts[partition] = PartitionState()
        state.watermark = ts if state.watermark is None else max(state.watermark, ts)
        state.last_data = wall_now
        state.reached(broker_ts)
        state.held += 1
        insort(state.offsets, offset)
        self._hold(partition, [(ts, next(self._seq), partition, offset, item)])

    def add_run(self, partition: Partition, offsets: list[int], times: list[float], items: list[T],
                wall_now: float, broker_ts: float | None = None) -> None:
        """Records of one partition in the order read (``broker_ts``: the latest broker time among
        them): what :meth:`add` of each in turn does, in one call. The runner adds a poll a
        partition at a time; per record, the call and its bookkeeping were a third of the merge."""
        if not items:
            return
        state = self._parts.get(partition)
        if state is None:
            state = self._parts[partition] = PartitionState()
        top = max(times)
        state.watermark = top if state.watermark is None else max(state.watermark, top)
        state.last_data = wall_now
        state.reached(broker_ts)
        state.held += len(items)
        if not len(offsets) == len(times) == len(items):
            raise ValueError("add_run: offsets, times and items differ in length")
        # Each entry (ts, seq, partition, offset, item) built by zip in C, not a comprehension (issue 56).
        entries = list(zip(times, itertools.islice(self._seq, len(items)), itertools.repeat(partition), offsets, items))
        entries.sort()  # (in offset order, nearly always in time order too: one pass)
        self._hold(partition, entries)
        # The offsets held, in order: a poll's come in offset order after those held (one pass to
        # see it, then appended); else (a replay, a rebalance) merged from the first later one held.
        run = sorted(offsets)
        held = state.offsets
        if not held or held[-1] <= run[0]:
            held += run
        else:
            at = bisect_right(held, run[0])
            run += held[at:]
            del held[at:]
            run.sort()
            held += run

    def _hold(self, partition: Partition, entries: list[tuple]) -> None:
        """Sorted ``entries`` of ``partition`` merged into its run."""
        self._held += len(entries)
        run = self._runs.get(partition)
        if run is None:
            self._runs[partition] = entries
        elif not run or run[-1] < entries[0]:
            run += entries
        else:  # some held record is later than the first new one: merge the two from there on
            at = bisect_right(run, entries[0])
            tail = run[at:]
            del run[at:]
            tail += entries
            tail.sort()
            run += tail

    def report(self, partition: Partition, writer: str, watermark: float, wall_now: float,
               said_at: float | None = None, *, reads: Iterable[str] | None = None, of: int | None = None,
               behind: bool | None = None, idle: bool | None = None, done: bool | None = None) -> None:
        """An upstream writer of ``partition`` has written everything up to ``watermark``;
        ``said_at`` is when it said so (the broker's record time): an old announcement read from a
        retained backlog speaks for a writer that may be long gone.

        ``-inf`` is a writer's hello after a rebalance: it may now write records of partitions it
        took over, older than anything it announced before, so its earlier words no longer hold
        and the partition waits for its next one. ``reads`` names the input partitions the writer
        reads now, of ``of`` read by all writers together; ``behind``, that it still has input to
        read; ``idle``, that it has nothing to write (its input quiet, all of it handed on): an
        idle writer's word covers the partitions it reads and holds nothing back. A member whose
        input had gone quiet (a partition of no node, a job that ended) otherwise held every job
        stage at its last word, or, once silent, left its partitions uncovered: a stall for good."""
        state = self._parts.setdefault(partition, PartitionState(last_data=wall_now))
        previous = state.writers.get(writer)
        heard = wall_now if said_at is None else min(wall_now, said_at)
        if previous is not None and watermark != float("-inf"):
            watermark = max(watermark, previous[0])
        state.writers[writer] = (watermark, heard, None if reads is None else frozenset(reads), bool(behind),
                                 bool(idle), bool(done))
        if of is not None:
            state.of = of
        state.last_data = wall_now
        state.reached(said_at)

    def upstream_behind(self, wall_now: float, caught_up: dict[Partition, bool]) -> bool:
        """Whether some upstream writer still has input to read, or some input partition of theirs
        has no writer yet: more records are on their way, however quiet this consumer's own input
        is, so the wall clock must not stand in for event time (a job stage whose node stage was
        rebalancing for 30 s would otherwise move a job's time past records still to come)."""
        for p, state in self._parts.items():
            if state.follower or not state.writers:
                continue
            backlog = not caught_up.get(p, True)
            live = live_writers(state, wall_now, self.writer_ttl_s, backlog)
            if not live:
                # Every writer fell silent: nothing is on its way until one comes back. Its jobs'
                # clocks stop where the writers did (stopped_upstream); saying "behind" here
                # stopped the clock of every job and left the outage unreported.
                continue
            if any(behind for _, _, behind, _ in live):
                return True
            if partition_mark(state, wall_now, self.writer_ttl_s, backlog) == float("-inf"):
                return True
        return False

    def stopped_upstream(self, wall_now: float, caught_up: dict[Partition, bool]) -> dict[Partition, UpstreamStop]:
        """The partitions whose every upstream writer fell silent (died, stalled, or was stopped),
        with when and who. A partition whose writers never spoke is not here: it has no upstream
        stage (the arrival-order topics, `jobs`); nor is one whose last writers all said, as they
        stopped, that their input had ended (``done``: a bounded run's idle stop). A writer killed
        says nothing of the kind, and its partition is here once it is silent."""
        out: dict[Partition, UpstreamStop] = {}
        for p, state in self._parts.items():
            if state.follower or not state.writers:
                continue
            if live_writers(state, wall_now, self.writer_ttl_s, backlog=not caught_up.get(p, True)):
                continue
            since = max(heard for _, heard, _, _, _, _ in state.writers.values())
            last = {w: (mark, heard, done) for w, (mark, heard, _, _, _, done) in state.writers.items()
                    if since - heard < self.writer_ttl_s}
            if all(done for _, _, done in last.values()):
                continue
            behind = any(behind for _, _, behind, _ in last_words(state, self.writer_ttl_s))
            out[p] = UpstreamStop(since, tuple(sorted(last)), max(mark for mark, _, _ in last.values()), behind)
        return out

    def low_watermark(self, wall_now: float, caught_up: dict[Partition, bool]) -> float | None:
        """The event time up to which every partition has delivered; None when all are idle
        (everything held may go); -inf while a partition that must speak has said nothing yet."""
        low: float | None = None
        slowest: set[Partition] = set()
        for p, state in self._parts.items():
            if state.follower:
                continue
            if self._idle(p, state, wall_now, caught_up):
                continue
            mark = partition_mark(state, wall_now, self.writer_ttl_s, backlog=not caught_up.get(p, True))
            mark = mark if mark is not None else float("-inf")
            if low is None or mark < low:
                low, slowest = mark, {p}
            elif mark == low:
                slowest.add(p)
        self._slowest = slowest
        self._low, self._judged = low, True
        return low

    def release(self, wall_now: float, caught_up: dict[Partition, bool]) -> list[T]:
        """Records whose time has come, in event-time order (ties in arrival order).

        A quiet partition that held the low watermark back goes idle once its last records are
        handed on, and the low watermark moves to the next one: judged again here until it stops
        moving, not once per call. Once per call, a consumer whose input went quiet (the end of a
        backlog, a job between checkpoints) released one partition's worth per poll timeout: with
        54 telemetry partitions, up to ten seconds for the last records of a quiet stretch."""
        out: list[T] = []
        while True:
            released = self._release_once(wall_now, caught_up)
            out += released
            parts = self._parts
            # judged again only when a partition that set the low watermark has just gone idle
            if not released or not any(self._idle(p, parts[p], wall_now, caught_up)
                                       for p in self._slowest if p in parts):
                return out

    def _idle(self, partition: Partition, state: PartitionState, wall_now: float,
              caught_up: dict[Partition, bool]) -> bool:
        """Caught up, nothing held, quiet for max_idle_s: the partition sets no low watermark. Not a
        partition with upstream writers: their words on it say how far it has got (idle writers let
        it go), and its quiet says nothing. A writer's records and words go to each partition in its
        own batch; one partition's next records may reach the broker, or a poll, after the word the
        writer sent with them has been read on another. Passed over as idle, the late partition let
        that word release the other's records past its own still unread (tests/events/
        test_merge_written_partition_quiet.py): a job's clock mate handed on ahead of it moves its time."""
        return (not state.writers and caught_up.get(partition, True) and state.held == 0
                and wall_now - state.last_data >= self.max_idle_s)

    def _release_once(self, wall_now: float, caught_up: dict[Partition, bool]) -> list[T]:
        low = self.low_watermark(wall_now, caught_up)
        # Everything idle: as far as the data itself got (followers never lead).
        limit = low if low is not None else self._reached(wall_now)
        gone = self._take(limit)
        out = list(map(_item_of, gone))  # (in C: per record, issue 56)
        if limit != float("-inf") and limit != float("inf"):  # inf: every upstream writer idle
            self.progress = limit if self.progress is None else max(self.progress, limit)
        return out

    def _reached(self, wall_now: float) -> float:
        marks = [m for s in self._parts.values() if not s.follower and (m := partition_mark(s, wall_now, self.writer_ttl_s)) is not None]
        return max(marks) if marks else float("-inf")

    def _take(self, limit: float) -> list[tuple]:
        """The held records up to ``limit`` (and, past ``max_held``, the earliest beyond it), in
        (ts, seq) order, their offsets let go: what popping a heap of them all would give."""
        runs, key = self._runs, (limit, _LAST)
        gone: list[tuple] = []
        for partition, run in runs.items():
            at = bisect_right(run, key)
            if at:
                self._release_offsets(partition, run, at)
                gone += run[:at]
                del run[:at]
        self._held -= len(gone)
        over = self._held - self.max_held
        if over > 0:  # memory ran out: the earliest records beyond the limit go too (rare)
            rest = list(itertools.islice(heapq.merge(*runs.values()), over))
            taken: dict[Partition, int] = {}
            for entry in rest:  # the earliest of all are, in each run, a prefix of it
                taken[entry[_PART]] = taken.get(entry[_PART], 0) + 1
            for partition, count in taken.items():
                run = runs[partition]
                self._release_offsets(partition, run, count)
                del run[:count]
            self._held -= over
            self.forced += over
            gone += rest
        gone.sort()  # the runs' prefixes merged
        return gone

    def drain(self) -> list[T]:
        """Everything held, in event-time order (end of input)."""
        gone = self._take(float("inf"))
        top = max((entry[_TS] for entry in gone if entry[_TS] != float("-inf")), default=None)
        if top is not None:
            self.progress = top if self.progress is None else max(self.progress, top)
        return list(map(_item_of, gone))

    def _release_offsets(self, partition: Partition, entries: list[tuple], count: int) -> None:
        """The offsets of ``partition``'s first ``count`` ``entries`` let go: one copy of each taken
        from the partition's offsets held (a bundle's events share its offset, a copy each). Nearly
        always they are the lowest held, in order: then the held list loses its prefix at once,
        where a heap popped each in a Python loop (issue 56)."""
        state = self._parts.get(partition)
        if state is None:
            return
        state.held -= count
        offsets = state.offsets
        let_go = list(map(_offset_of, entries[:count]))
        if offsets[:count] == let_go:
            del offsets[:count]
            return
        let_go.sort()
        if offsets[:count] == let_go:
            del offsets[:count]
            return
        for offset in let_go:  # let go out of offset order (times that went back): one copy each
            at = bisect_left(offsets, offset)
            if at < len(offsets) and offsets[at] == offset:
                del offsets[at]

    # --- what the consumer should do ----------------------------------------------------------
    @property
    def idle(self) -> bool:
        """Whether every partition was idle at the last release (caught up, nothing held, quiet for
        max_idle_s), or there are none: this consumer has nothing to hand on."""
        return self._judged and self._low is None

    def held_items(self) -> Iterator[T | None]:
        """What is held, in no particular order (None for a watermark record's place)."""
        return (entry[_ITEM] for run in self._runs.values() for entry in run)

    def frontier(self, partition: Partition) -> float | None:
        """The broker's time of the latest record read from ``partition`` (None: none yet)."""
        state = self._parts.get(partition)
        return None if state is None else state.frontier

    def tracks(self, partition: Partition) -> bool:
        """Whether ``partition`` is assigned here (not revoked since)."""
        return partition in self._parts

    def lowest_held_offset(self, partition: Partition) -> int | None:
        """The first offset of ``partition`` not yet handed on: commit up to (not including) it."""
        state = self._parts.get(partition)
        return state.offsets[0] if state is not None and state.offsets else None

    def to_pause(self) -> set[Partition]:
        """Partitions to stop fetching from while the others catch up: one holding too much, or
        one whose data runs far ahead in event time. A consumer reading a backlog fetches
        partitions unevenly (a fetch fills one partition's queue before the next, and a MB is 20 s
        of one topic but 300 s of another), and everything read ahead of the low watermark waits
        in memory: unaligned, a 370k-message backlog held 210k decoded records at once, and the
        collector and cache misses doubled what decoding cost (bench/results_throughput.md).

        Never the slowest partition: only reading it further moves the low watermark (its upstream
        writers' progress comes in it), so pausing it would hold everything for good. ``max_held``
        still bounds memory."""
        return {p for p, s in self._parts.items()
                if p not in self._slowest and not s.follower
                and (s.held > self.max_held_per_partition or self._ahead(s, 1.0))}

    def to_resume(self) -> set[Partition]:
        return {p for p, s in self._parts.items()
                if p in self._slowest or s.follower
                or (s.held <= self.max_held_per_partition // 2 and not self._ahead(s, 0.5))}

    def _ahead(self, state: PartitionState, margin: float) -> bool:
        """Whether ``state`` holds more than ``margin`` × min_held_to_pause records and runs more
        than ``margin`` × max_lead_s past the last low watermark (any lead at all while that is
        -inf: a partition not heard from yet may hold the earliest events)."""
        low = self._low
        if low is None or state.held <= self.min_held_to_pause * margin or state.watermark is None:
            return False
        return low == float("-inf") or state.watermark - low > self.max_lead_s * margin
