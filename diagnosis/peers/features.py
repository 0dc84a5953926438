"""Per-node feature windows: the node stage's compact summary of NVML samples and step times.

One :class:`NodeWindow` per node per ``window_s`` of event time (``compute_s`` is the slowest
rank's mean compute time, ``util_min`` the least busy GPU's mean utilisation); it is what the node stage
would publish on the ``summaries`` topic (source ``summary``, kind ``window``) for the job-level
peer comparison in diagnosis/peers/anomaly.py. A window closes when the node's first event of a later
window arrives, so a node that falls silent simply stops producing windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from math import isfinite
from typing import Mapping, Sequence

from faultlens.diagnosis.peers.sample_features import SAMPLE_FEATURES, Features, loose_features, pcie_replay_total, plain_features
from faultlens.events.envelope import Envelope
from faultlens.events.gpu_table import gpu_table
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import TrainStep
from faultlens.events.payloads_stage import SummaryWindow

WINDOW_S = 10.0

# Which way is "worse" for each feature the peer comparison judges (+1: higher is worse).
DIRECTION = {
    "sm_clock_ratio": -1,
    "power_ratio": -1,
    "temp_c": +1,
    "throttle": +1,
    "pcie_replay_rate": +1,
    "compute_s": +1,
}
FEATURES = tuple(DIRECTION)


@dataclass(frozen=True, slots=True)
class NodeWindow:
    job: str
    node: str
    start: float
    features: Mapping[str, float]
    samples: int
    ranks: tuple[int, ...] = ()
    evidence: tuple[str, ...] = ()

    def to_event(self) -> Envelope:
        """The summary record the node stage sends to the job stage (topic ``summaries``)."""
        return Envelope(ts=self.start, job=self.job, node=self.node, source="summary", kind="window",
                        data={"start": self.start, "features": dict(self.features), "samples": self.samples,
                              "ranks": list(self.ranks), "evidence": list(self.evidence)})

    @classmethod
    def from_event(cls, event: Envelope) -> "NodeWindow":
        """A `summary/window` back into the window (its Struct, SummaryWindow, checked the types)."""
        d = typed(event, SummaryWindow)
        return cls(event.job, event.node, float(event.ts if d.start is None else d.start),
                   {k: float(v) for k, v in (d.features or {}).items()}, d.samples or 0,
                   tuple(d.ranks or ()), tuple(d.evidence or ()))


# Samples a node holds before they are folded into its sums: per-node state has a fixed size.
FOLD_EVERY = 16


@dataclass(slots=True)
class _Acc:
    start: float
    # Event times known to fall in this window (floor(ts / window_s) * window_s == start at both ends, so at
    # every time between): a step is placed by two float compares, not a division, floor and product (issue 56).
    lo: float = math.inf
    hi: float = -math.inf
    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    # Where each feature first had a value (event number, place in its event): the window's
    # features keep the order in which a node reported them, however the sums were folded.
    first: dict[str, tuple[int, int]] = field(default_factory=dict)
    seq: int = 0
    samples: int = 0
    ranks: set[int] = field(default_factory=set)
    evidence: list[str] = field(default_factory=list)
    evidence_full: bool = False  # four ids held: no len() of them a step
    pcie_replay_first: float | None = None
    pcie_replay_last: float | None = None
    pcie_replay_t0: float = 0.0
    pcie_replay_t1: float = 0.0
    rank_compute: dict[int, list[float]] = field(default_factory=dict)  # rank → [sum, count]
    # The steps' times, summed in arrival order in slots of their own (a step is four in five of
    # the node stage's messages: issue 56) and put with the sample features when the window closes.
    step_time_sum: float = 0.0
    step_times: int = 0
    step_time_first: int = 0  # the event number of the first
    # Samples not folded yet: (event number, time, sample features, its GPUs' PCIe replay counters).
    held: list[tuple[int, float, Features, list]] = field(default_factory=list)

    def fold(self) -> None:
        """The held samples' features into the sums, added in arrival order (the order decides
        the last bit of a float sum)."""
        if not self.held:
            return
        held, self.held = self.held, []
        sums, counts, first = self.sums, self.counts, self.first
        for pos, name in enumerate(SAMPLE_FEATURES):
            total, count = sums.get(name, 0.0), counts.get(name, 0)
            seen = count
            for seq, _, feats, _ in held:
                v = feats[pos]
                if v is not None and isfinite(v):
                    total += v
                    count += 1
                    if name not in first:
                        first[name] = (seq, pos)
            if count > seen:
                sums[name], counts[name] = total, count
        if self.pcie_replay_first is None:
            self.pcie_replay_first, self.pcie_replay_t0 = pcie_replay_total(held[0][3]), held[0][1]
        self.pcie_replay_last, self.pcie_replay_t1 = pcie_replay_total(held[-1][3]), held[-1][1]


def _bounds(start: float, window_s: float, ts: float) -> tuple[float, float]:
    """The lowest and highest times near ``start`` and ``start + window_s`` that
    ``floor(t / window_s) * window_s`` puts in the window at ``start`` (``ts`` is one): that is
    monotone in ``t``, so every time between them is the window's too. A few float steps from each
    edge find where rounding puts it; where they do not, ``ts`` itself is the bound (a narrower
    range only sends more events the long way)."""

    def inside(t: float) -> bool:
        return math.floor(t / window_s) * window_s == start

    lo, hi = start, math.nextafter(start + window_s, -math.inf)
    for _ in range(4):
        if inside(lo) or lo >= ts:
            break
        lo = math.nextafter(lo, math.inf)
    for _ in range(4):
        if inside(hi) or hi <= ts:
            break
        hi = math.nextafter(hi, -math.inf)
    return (lo if inside(lo) and lo <= ts else ts), (hi if inside(hi) and hi >= ts else ts)


class FeatureWindows:
    """Node-local: folds a node's samples and steps into fixed event-time windows."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._acc: dict[tuple[str, str], _Acc] = {}

    def observe(self, event: Envelope) -> list[NodeWindow]:
        if event.source == "gpu" and event.kind == "sample":
            out: list[NodeWindow] = []
            acc = self._acc_at(event, out)
            if acc is not None:
                self._sample(acc, event)
                if not acc.evidence_full:
                    acc.evidence.append(event.id)
                    acc.evidence_full = len(acc.evidence) >= 4
            return out
        if event.source == "train" and event.kind == "step":
            return list(self.observe_step(event, typed(event, TrainStep)))  # read once by the node stage's payload check
        return []

    def observe_step(self, event: Envelope, step: TrainStep) -> Sequence[NodeWindow]:
        """A ``train``/``step`` whose payload the caller read (the node stage's step path, four in
        five of its messages: issue 56); the windows it closed (an empty tuple, no list a step, where none)."""
        # _acc_at inline where the step falls in the node's open window (nearly every step: a call
        # fewer a step, issue 56)
        acc = self._acc.get((event.job, event.node))
        out: Sequence[NodeWindow]
        if acc is not None and acc.lo <= event.ts <= acc.hi:
            acc.seq += 1
            out = ()
        else:
            closed: list[NodeWindow] = []
            acc = self._acc_at(event, closed)
            out = closed
            if acc is None:
                return out
        t = step.step_time_s  # finite, never negative, or null
        if t is not None:
            if acc.step_times == 0:
                acc.step_time_first = acc.seq
            acc.step_time_sum += t
            acc.step_times += 1
        rank = step.rank
        if rank is not None:
            acc.ranks.add(rank)
            compute = step.compute_s  # finite, never negative, or null
            if compute is not None:
                tally = acc.rank_compute.get(rank)
                if tally is None:
                    tally = acc.rank_compute[rank] = [0.0, 0]
                tally[0] += compute
                tally[1] += 1
        if not acc.evidence_full:
            acc.evidence.append(event.id)
            acc.evidence_full = len(acc.evidence) >= 4
        return out

    def _acc_at(self, event: Envelope, out: list[NodeWindow]) -> _Acc | None:
        """The node's window that holds ``event`` (the one before closed into ``out`` where it is
        the node's first event past it), its event counted; None for a straggler of a closed one."""
        start = math.floor(event.ts / self.window_s) * self.window_s
        key = (event.job, event.node)
        acc = self._acc.get(key)
        if acc is None or start > acc.start:
            if acc is not None:
                out.append(self._close(key, acc))
            acc = self._acc[key] = _Acc(start)
            acc.lo, acc.hi = _bounds(start, self.window_s, event.ts)
        elif start < acc.start:
            return None  # a straggling event of a closed window: too late to count
        acc.seq += 1
        return acc

    def _sample(self, acc: _Acc, event: Envelope) -> None:
        table = gpu_table(event)
        if table is not None:
            if not table.gpus:
                return
            feats, pcie_replays = plain_features(table)
        else:
            # A gpu/sample is read as its rows, never decoded into its Struct: see events/gpu_table.py.
            gpus = event.data.get("gpus")
            if not isinstance(gpus, list) or not gpus:
                return
            feats, pcie_replays = loose_features(gpus)
        acc.samples += 1
        acc.held.append((acc.seq, event.ts, feats, pcie_replays))
        if len(acc.held) >= FOLD_EVERY:
            acc.fold()

    def _close(self, key: tuple[str, str], acc: _Acc) -> NodeWindow:
        acc.fold()
        if acc.step_times:
            acc.sums["step_time_s"], acc.counts["step_time_s"] = acc.step_time_sum, acc.step_times
            acc.first["step_time_s"] = (acc.step_time_first, 0)
        feats = {k: acc.sums[k] / acc.counts[k] for k in sorted(acc.sums, key=acc.first.__getitem__)}
        if acc.rank_compute:
            # The slowest rank sets the node's pace (one slow GPU of eight barely moves a mean).
            feats["compute_s"] = max(total / n for total, n in acc.rank_compute.values())
        if acc.pcie_replay_first is not None and acc.pcie_replay_last is not None and acc.pcie_replay_t1 > acc.pcie_replay_t0:
            feats["pcie_replay_rate"] = max(0.0, (acc.pcie_replay_last - acc.pcie_replay_first) / (acc.pcie_replay_t1 - acc.pcie_replay_t0))
        return NodeWindow(key[0], key[1], acc.start, feats, acc.samples, tuple(sorted(acc.ranks)), tuple(acc.evidence))

    def flush(self) -> list[NodeWindow]:
        out = [self._close(k, a) for k, a in self._acc.items()]
        self._acc.clear()
        return out

