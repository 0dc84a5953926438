"""Where one event sits in time.

:class:`EventClock` places one event in time. A consumer must not let one bad clock (or one hostile
sender) drag a job's time forward: an event stamped more than ``max_skew_s`` ahead of every real
clock the consumer has (its own wall clock at arrival and the broker's record timestamp) is from
the future, and is judged at its arrival position instead. Each node's clock is measured against
its peers: read live, the offset ``event ts - record ts`` is the same for every node of a job, so
a node whose offset differs from the job's by more than the bound has a skewed clock; its events
are shifted back by the measured difference and still count. Read from a backlog (a spool
flushed, a trace replayed fast) the offsets of one job spread apart, and no clock is judged.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple, Sequence

DEFAULT_MAX_SKEW_S = 300.0


def _record_key(r: Any) -> tuple[str, str, float, float | None] | None:
    """A record's ``(job, node, ts, record_ts)`` as :meth:`EventClock.place_records` reads it; None
    where it states no time (placed at its broker's or the wall's)."""
    value, timestamp_ms = r.value, r.timestamp_ms
    record_ts = timestamp_ms / 1000.0 if timestamp_ms and timestamp_ms > 0 else None
    try:
        ts, job, node = value.ts, value.job, value.node
    except AttributeError:
        ts, job, node = getattr(value, "ts", None), getattr(value, "job", ""), getattr(value, "node", "")
    if type(ts) is not float:
        ts = float(ts) if isinstance(ts, (int, float)) else None
    if ts is None:
        return None
    if type(job) is not str or type(node) is not str:
        job, node = str(job), str(node)
    return job, node, ts, record_ts


class Placement(NamedTuple):
    """Where an event is judged: ``ts`` (its own unless its clock was off) and why it moved (a
    tuple: one is made for every record read)."""

    ts: float
    skew_s: float | None = None  # the node's measured clock error, when beyond the bound
    clamped: str | None = None  # "future" when the event's own time was not believable


@dataclass(slots=True)
class _NodeOffsets:
    recent: deque = field(default_factory=lambda: deque(maxlen=15))
    median: float = 0.0
    fresh: int = 0  # offsets added since the median was taken
    correction: float = 0.0  # what its events are shifted by, held steady while the skew stays
    # Its job's recent offsets and record-time span (EventClock's, for the job): held here too, so a
    # record costs one lookup of its node, not three of its job.
    job_recent: deque = field(default_factory=deque)
    job_span: list[float] = field(default_factory=list)


# With fewer nodes a job has no majority to tell the wrong clock from the right ones.
MIN_PEERS = 3
# Clocks are judged only once a job has been sending for this long by the broker's clock.
LIVE_SPAN_S = 60.0


class EventClock:
    """Places events in time (see the module's docstring). Not thread-safe: one per consumer.

    :meth:`observe` learns offsets and :meth:`place` uses them: a consumer observes a whole polled
    batch before placing any of it, so the first records of a job are not placed on the word of
    whichever node happened to be read first."""

    def __init__(self, max_skew_s: float = DEFAULT_MAX_SKEW_S, *, judge_peers: bool = True) -> None:
        if max_skew_s <= 0:
            raise ValueError("max_skew_s must be positive")
        self.max_skew_s = max_skew_s
        # Whether a node's clock is judged against its peers': only where a record's broker time is
        # when its node sent it (the telemetry topics). On `summaries` it is when a node-stage
        # member wrote it, and members read at different speeds (a backlog, a starved CPU): a
        # fast member's nodes looked 829 s ahead of a slow one's, the job stage moved one node's
        # beats back by that much, and evicted it as silent (issue 32). The node stage judged and
        # placed those events already; only stamps from the future are still refused.
        self.judge_peers = judge_peers
        self._nodes: dict[tuple[str, str], _NodeOffsets] = {}
        self._job_nodes: dict[str, list[_NodeOffsets]] = {}
        self._job_offset: dict[str, float] = {}
        self._job_dirty: dict[str, int] = {}
        self._job_recent: dict[str, deque] = {}  # recent offsets of all its nodes
        # The spread (q3 - q1) of a job's recent offsets, taken when judges() asks (once a job and
        # poll) of the offsets as they were at the job's latest estimate (_spread_of), not at every
        # estimate (each 64 records of a job): sorting 255 offsets every estimate was ~0.6 % of the
        # node stage's instructions reading a backlog, which judges() never asks (issue 56).
        self._job_spread: dict[str, float] = {}
        self._spread_of: dict[str, tuple[float, ...] | None] = {}  # job → those offsets, until taken
        self._job_span: dict[str, list[float]] = {}  # first and last record time seen
        # (record time, job offset) a few times a minute: read live, the offset stays put.
        self._job_history: dict[str, deque] = {}
        self._job_drift: dict[str, float] = {}  # _drift(job), kept when the history moves

    @property
    def skewed_nodes(self) -> dict[tuple[str, str], float]:
        return {key: e.correction for key, e in self._nodes.items() if e.correction}

    def _from_future(self, ts: float, record_ts: float | None, wall_now: float) -> bool:
        reference = wall_now if record_ts is None else max(wall_now, record_ts)
        return ts > reference + self.max_skew_s

    def observe(self, job: str, node: str, ts: float, record_ts: float | None, wall_now: float) -> None:
        """Learn the offset of one event (no-op without a record time or for a stamp from the future,
        and where clocks are not judged against peers)."""
        self.observe_many(((job, node, ts, record_ts),), wall_now)

    def observe_many(self, events: Iterable[tuple[str, str, float, float | None]], wall_now: float) -> None:
        """:meth:`observe` of each ``(job, node, ts, record_ts)`` in turn, in one call: the intake
        teaches the clock a whole poll before placing any of it, and a call a record was a tenth of
        its placing (issue 56)."""
        if not self.judge_peers:
            return
        nodes, job_dirty, limit = self._nodes, self._job_dirty, self.max_skew_s
        wall_limit = wall_now + limit
        for job, node, ts, record_ts in events:
            if record_ts is None:
                continue
            # _from_future, inline: past max(wall_now, record_ts) + limit is past both sums (the
            # same float additions); nearly every record fails the first test (per record: issue 56).
            if ts > wall_limit and ts > record_ts + limit:
                continue
            offset = ts - record_ts
            entry = nodes.get((job, node))
            new = entry is None
            if entry is None:
                entry = nodes[(job, node)] = _NodeOffsets(
                    median=offset, job_recent=self._job_recent.setdefault(job, deque(maxlen=255)),
                    job_span=self._job_span.setdefault(job, [record_ts, record_ts]))
                self._job_nodes.setdefault(job, []).append(entry)
                job_dirty[job] = 64
            entry.recent.append(offset)
            entry.job_recent.append(offset)
            span = entry.job_span
            if record_ts < span[0]:
                span[0] = record_ts
            elif record_ts > span[1]:
                span[1] = record_ts
            entry.fresh += 1
            if entry.fresh >= 8:  # a median every few events keeps the hot path cheap
                # (statistics.median's own sum, inline: a call every 8 records was ~1 % of this loop, issue 56)
                recent = sorted(entry.recent)
                half = len(recent) // 2
                entry.median = recent[half] if len(recent) % 2 else (recent[half - 1] + recent[half]) / 2
                entry.fresh = 0
                job_dirty[job] += 1
            elif not new:
                continue  # the job's count moved neither here nor by a new node (64): no estimate is due
            if job_dirty[job] >= 8:
                self._estimate(job, record_ts)

    def place_records(self, records: Sequence[Any], wall_now: float) -> int:
        """Each of ``records`` placed in time, the whole batch learnt first: what the intake did by
        reading each record's ``(job, node, ts, record_ts)``, :meth:`observe_many` of them, and
        :meth:`moved` where a job is judged, in one pass a record (a tuple built a record, and a
        second loop to take it apart, were ~5 % of placing: issue 56). A record is anything with the
        runner's Record's fields: ``value`` (its ``ts``, ``job`` and ``node``), ``timestamp_ms``,
        and ``event_ts``, ``skew_s`` and ``clamped``, which are set. Returns how many were moved.

        Learning a record as it is read is learning the batch before placing any of it: nothing is
        placed (beyond its own time, which learning never reads) until the loop is done."""
        jobs: dict[str, bool] = {}  # the jobs of the records placed at their own time (a dict: no call a record)
        judge = self.judge_peers
        nodes, job_dirty, limit = self._nodes, self._job_dirty, self.max_skew_s
        wall_limit = wall_now + limit
        latest = -math.inf  # the latest own time placed (compared here: a max() over the records after was ~2 % of placing)
        for r in records:
            # (_record_key's reading, inline: per record)
            value, timestamp_ms = r.value, r.timestamp_ms
            record_ts = timestamp_ms / 1000.0 if timestamp_ms and timestamp_ms > 0 else None  # broker_time, inline
            try:  # an envelope (every decoder's): its fields read as attributes, not by three getattr calls
                ts, job, node = value.ts, value.job, value.node
            except AttributeError:
                ts, job, node = getattr(value, "ts", None), getattr(value, "job", ""), getattr(value, "node", "")
            if type(ts) is not float:
                ts = float(ts) if isinstance(ts, (int, float)) else None
            if ts is None:
                r.event_ts = record_ts if record_ts is not None else wall_now
                continue
            if type(job) is not str or type(node) is not str:
                job, node = str(job), str(node)
            r.event_ts = ts  # its own time, where nearly every record stays (moved below, where not)
            jobs[job] = True
            if ts > latest:
                latest = ts
            # observe_many's body, inline (the same tests in the same order)
            if record_ts is None or not judge:
                continue
            if ts > wall_limit and ts > record_ts + limit:
                continue
            offset = ts - record_ts
            entry = nodes.get((job, node))
            new = entry is None
            if entry is None:
                entry = nodes[(job, node)] = _NodeOffsets(
                    median=offset, job_recent=self._job_recent.setdefault(job, deque(maxlen=255)),
                    job_span=self._job_span.setdefault(job, [record_ts, record_ts]))
                self._job_nodes.setdefault(job, []).append(entry)
                job_dirty[job] = 64
            entry.recent.append(offset)
            entry.job_recent.append(offset)
            span = entry.job_span
            if record_ts < span[0]:
                span[0] = record_ts
            elif record_ts > span[1]:
                span[1] = record_ts
            entry.fresh += 1
            if entry.fresh >= 8:
                recent = sorted(entry.recent)
                half = len(recent) // 2
                entry.median = recent[half] if len(recent) % 2 else (recent[half - 1] + recent[half]) / 2
                entry.fresh = 0
                job_dirty[job] += 1
            elif not new:
                continue
            if job_dirty[job] >= 8:
                self._estimate(job, record_ts)
        if not jobs:
            return 0
        # Whether each job's clocks can be judged is settled by the learning above: asked once a job
        # here, so an event judged at its own time (nearly all, and every one of a backlog, which is
        # not read live) costs no call to moved(), unless it is stamped from the future.
        judges = {job: self.judges(job) for job in jobs}
        if not any(judges.values()) and latest <= wall_limit:
            # No job's clocks judged, nothing from the future (past every clock: wall <= max(wall,
            # broker time)): each stays at its own time, set above, with no second pass (issue 56).
            return 0
        moved = 0
        for r in records:  # (read again: this pass is rare, a list of what was placed a record was not)
            key = _record_key(r)
            if key is None:
                continue  # placed by its broker's time or the wall's (above)
            job, node, ts, record_ts = key
            if not judges[job] and ts <= (wall_now if record_ts is None or wall_now >= record_ts else record_ts) + limit:
                continue  # at its own time (set above)
            at = self.moved(job, node, ts, record_ts, wall_now)  # a move always says by how much (skew_s)
            if at is not None:
                moved += 1
                r.event_ts, r.skew_s, r.clamped = at.ts, at.skew_s, at.clamped
        return moved

    def _estimate(self, job: str, record_ts: float) -> None:
        """The job's offset taken again from its nodes' medians (every few of their updates)."""
        self._job_offset[job] = statistics.median([e.median for e in self._job_nodes[job]])  # (a list: no generator)
        history = self._job_history.setdefault(job, deque(maxlen=64))
        if not history or record_ts - history[-1][0] >= LIVE_SPAN_S / 8:
            history.append((record_ts, self._job_offset[job]))
            self._job_drift[job] = self._drift(job)
        recent = self._job_recent[job]
        self._spread_of[job] = tuple(recent) if len(recent) > 1 else None
        self._job_spread.pop(job, None)
        self._job_dirty[job] = 0

    def _spread(self, job: str) -> float:
        """How far the job's recent offsets spread (q3 - q1) at its latest estimate; inf before one."""
        spread = self._job_spread.get(job)
        if spread is None:
            if job not in self._spread_of:
                return float("inf")
            offsets = self._spread_of.pop(job)
            q = statistics.quantiles(offsets, n=4) if offsets is not None else [0, 0, 0]
            spread = self._job_spread[job] = q[2] - q[0]
        return spread

    def _drift(self, job: str) -> float:
        """How far the job's offset moved over the last minute of broker time."""
        history = self._job_history.get(job)
        if not history:
            return 0.0
        latest_ts, latest = history[-1]
        past = next((off for ts, off in history if latest_ts - ts <= LIVE_SPAN_S), latest)
        return abs(latest - past)

    def judges(self, job: str) -> bool:
        """Whether :meth:`moved` may move an event of ``job`` that is not from the future: False
        while the job's clocks cannot be judged (too few nodes, not seen live: the span, spread and
        drift tests of :meth:`moved`). It changes only as :meth:`observe` learns, so a consumer that
        places a batch after observing all of it asks once per job and batch (issue 56: reading a
        backlog, moved() found that for every record)."""
        nodes = self._job_nodes.get(job)
        if nodes is None or len(nodes) < MIN_PEERS:
            return False
        span = self._job_span.get(job, [0.0, 0.0])
        return not (span[1] - span[0] < LIVE_SPAN_S or self._spread(job) > self.max_skew_s / 4
                    or self._job_drift.get(job, 0.0) > self.max_skew_s / 4)

    def place(self, job: str, node: str, ts: float, record_ts: float | None, wall_now: float) -> Placement:
        return self.moved(job, node, ts, record_ts, wall_now) or Placement(ts)

    def moved(self, job: str, node: str, ts: float, record_ts: float | None, wall_now: float) -> Placement | None:
        """:meth:`place`, but None where the event is judged at its own time (nearly always: no
        tuple is made for each record read)."""
        if self._from_future(ts, record_ts, wall_now):
            # No real clock of ours has reached it: judged where it arrived.
            reference = wall_now if record_ts is None else max(wall_now, record_ts)
            at = reference if record_ts is None else record_ts + self._job_offset.get(job, 0.0)
            return Placement(at, ts - reference, "future")
        entry = self._nodes.get((job, node))
        if entry is None:
            return None
        if not self.judges(job):
            # Not (yet) seen live: a burst sent at once, offsets that disagree among themselves (a
            # spool flushed, a trace replayed) or that drift (a simulation faster than real time),
            # where the broker's time says when an event was sent, not when it happened. Clocks
            # cannot be judged from that; none is corrected. (Or too few nodes to judge.)
            return None
        skew = entry.median - self._job_offset[job]
        # Hysteresis: the correction stays put while the measured skew wobbles within half the
        # bound (a backlog makes offsets noisy), so a corrected node's events keep their spacing.
        if abs(skew) > self.max_skew_s and abs(skew - entry.correction) > self.max_skew_s / 2:
            entry.correction = skew
        elif abs(skew) <= self.max_skew_s / 2:
            entry.correction = 0.0
        if record_ts is not None:  # without a record time, the node's correction alone applies
            own = (ts - record_ts) - entry.median  # this event against its own node's recent clock
            if abs(own) > self.max_skew_s:
                # One stamp far off its own node's clock (far past or future, read live): judged where
                # it arrived, by the node's usual offset, and flagged.
                return Placement(record_ts + entry.median - entry.correction, own, "outlier")
        if not entry.correction:
            return None
        return Placement(ts - entry.correction, entry.correction)
