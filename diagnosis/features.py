"""Per-node feature windows: the node stage's compact summary of NVML samples and step times.

One :class:`NodeWindow` per node per ``window_s`` of event time (``compute_s`` is the slowest
rank's mean compute time, ``util_min`` the least busy GPU's mean utilisation); it is what the node stage
would publish on the ``summaries`` topic (source ``summary``, kind ``window``) for the job-level
peer comparison in diagnosis/anomaly.py. A window closes when the node's first event of a later
window arrives, so a node that falls silent simply stops producing windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from diagnosis.rules.base import num
from streams.events import Envelope, InvalidEvent, as_float

WINDOW_S = 10.0
THERMAL = frozenset({"hw_thermal", "sw_thermal", "hw_power_brake", "hw_slowdown"})

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
        d = event.data
        try:
            return cls(event.job, event.node, float(d.get("start", event.ts)),
                       {str(k): float(v) for k, v in (d.get("features") or {}).items()}, int(d.get("samples", 0)),
                       tuple(int(r) for r in d.get("ranks") or ()), tuple(str(e) for e in d.get("evidence") or ()))
        except (AttributeError, TypeError, ValueError) as exc:
            raise InvalidEvent("data", f"not a node window summary: {exc}") from None


# What one GPU contributes to a window, one column each (a row per sample, GPUs side by side).
_COLUMNS = ("util", "sm_clock_mhz", "sm_clock_max_mhz", "power_w", "power_limit_w", "temp_c", "pcie_replay")
_NCOL = len(_COLUMNS)
# The sample features in the order a sample reports them (the window's features keep that order).
_SAMPLE_FEATURES = ("util", "util_min", "sm_clock_ratio", "power_ratio", "temp_c", "throttle")
# Samples a node holds before they are folded into its sums: per-node state has a fixed size.
FOLD_EVERY = 16


@dataclass(slots=True)
class _Acc:
    start: float
    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    # Where each feature first had a value (event number, place in its event): the window's
    # features keep the order in which a node reported them, however the sums were folded.
    first: dict[str, tuple[int, int]] = field(default_factory=dict)
    seq: int = 0
    samples: int = 0
    ranks: set[int] = field(default_factory=set)
    evidence: list[str] = field(default_factory=list)
    replay_first: float | None = None
    replay_last: float | None = None
    replay_t0: float = 0.0
    replay_t1: float = 0.0
    rank_compute: dict[int, list[float]] = field(default_factory=dict)  # rank → [sum, count]
    # Samples not folded yet: per sample its GPUs' _COLUMNS side by side, its time, its event
    # number and its share of thermally throttled GPUs.
    rows: list[list] = field(default_factory=list)
    row_ts: list[float] = field(default_factory=list)
    row_seq: list[int] = field(default_factory=list)
    row_throttle: list[float] = field(default_factory=list)

    def add(self, name: str, value: float | None) -> None:
        if value is None or not math.isfinite(value):
            return
        self.sums[name] = self.sums.get(name, 0.0) + value
        self.counts[name] = self.counts.get(name, 0) + 1
        if name not in self.first:
            self.first[name] = (self.seq, 0)

    def fold(self) -> None:
        """The held samples into the sums, over arrays: one sample's features are its GPUs'
        (mean and least util, the slowest clock and power ratio, the hottest GPU), summed over
        samples in arrival order so every sum is the one a sample-by-sample loop gives."""
        if not self.rows:
            return
        rows, self.rows = self.rows, []
        seqs, self.row_seq = self.row_seq, []
        times, self.row_ts = self.row_ts, []
        throttle, self.row_throttle = self.row_throttle, []
        width = max(len(r) for r in rows)
        try:
            a = np.array([r + [None] * (width - len(r)) for r in rows], dtype=float)
        except (TypeError, ValueError):  # a value that is not a plain number (unchecked input)
            a = np.array([[num(v) for v in r] + [None] * (width - len(r)) for r in rows], dtype=float)
        a = a.reshape(len(rows), width // _NCOL, _NCOL)
        util, clock, cmax, power, limit, temp = (a[:, :, i] for i in range(_NCOL - 1))
        have_util = ~np.isnan(util)
        n_util = have_util.sum(axis=1)
        # accumulate adds GPU by GPU, in the order a loop over one sample's GPUs would.
        util_sum = np.add.accumulate(np.where(have_util, util, 0.0), axis=1)[:, -1] if a.shape[1] else n_util * 0.0
        ratio = np.divide(clock, cmax, out=np.full_like(clock, np.nan), where=cmax != 0)
        power_ratio = np.divide(power, limit, out=np.full_like(power, np.nan), where=limit != 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            features = np.array([
                np.where(n_util > 0, util_sum / n_util, np.nan),
                np.fmin.reduce(util, axis=1, initial=np.nan) if a.shape[1] else n_util * np.nan,
                np.fmin.reduce(ratio, axis=1, initial=np.nan) if a.shape[1] else n_util * np.nan,
                np.fmin.reduce(power_ratio, axis=1, initial=np.nan) if a.shape[1] else n_util * np.nan,
                np.fmax.reduce(temp, axis=1, initial=np.nan) if a.shape[1] else n_util * np.nan,
                throttle,
            ])
        finite = np.isfinite(features).tolist()
        for pos, (name, values, ok) in enumerate(zip(_SAMPLE_FEATURES, features.tolist(), finite)):
            if not any(ok):
                continue
            total, count = self.sums.get(name, 0.0), self.counts.get(name, 0)
            for v, good in zip(values, ok):
                if good:
                    total += v
                    count += 1
            self.sums[name], self.counts[name] = total, count
            if name not in self.first:
                self.first[name] = (seqs[ok.index(True)], pos)
        if self.replay_first is None:
            self.replay_first, self.replay_t0 = _replay_total(rows[0]), times[0]
        self.replay_last, self.replay_t1 = _replay_total(rows[-1]), times[-1]


def _replay_total(row: list) -> float:
    """A sample's PCIe replay counters added over its GPUs (a GPU without one counts 0)."""
    total = 0.0
    for value in row[_NCOL - 1::_NCOL]:
        total += num(value) or 0.0
    return total


class FeatureWindows:
    """Node-local: folds a node's samples and steps into fixed event-time windows."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._acc: dict[tuple[str, str], _Acc] = {}

    def observe(self, event: Envelope) -> list[NodeWindow]:
        if not ((event.source == "gpu" and event.kind == "sample") or (event.source == "train" and event.kind == "step")):
            return []
        start = math.floor(event.ts / self.window_s) * self.window_s
        key = (event.job, event.node)
        acc = self._acc.get(key)
        out: list[NodeWindow] = []
        if acc is None or start > acc.start:
            if acc is not None:
                out.append(self._close(key, acc))
            acc = self._acc[key] = _Acc(start)
        elif start < acc.start:
            return []  # a straggling event of a closed window: too late to count
        acc.seq += 1
        if event.source == "gpu":
            self._sample(acc, event)
        else:
            acc.add("step_time_s", as_float(event.data.get("step_time_s")))
            rank = event.data.get("rank")
            if isinstance(rank, int) and not isinstance(rank, bool):
                acc.ranks.add(rank)
                compute = as_float(event.data.get("compute_s"))
                if compute is not None and math.isfinite(compute):
                    tally = acc.rank_compute.setdefault(rank, [0.0, 0])
                    tally[0] += compute
                    tally[1] += 1
        if len(acc.evidence) < 4:
            acc.evidence.append(event.id)
        return out

    def _sample(self, acc: _Acc, event: Envelope) -> None:
        gpus = event.data.get("gpus")
        if not isinstance(gpus, list) or not gpus:
            return
        acc.samples += 1
        row: list = []
        throttled = 0
        for g in gpus:
            if type(g) is not dict and not isinstance(g, Mapping):
                continue
            row.extend(map(g.get, _COLUMNS))
            throttle = g.get("throttle")
            if throttle and not THERMAL.isdisjoint(throttle):
                throttled += 1
        acc.rows.append(row)
        acc.row_ts.append(event.ts)
        acc.row_seq.append(acc.seq)
        acc.row_throttle.append(throttled / len(gpus))
        if len(acc.rows) >= FOLD_EVERY:
            acc.fold()

    def _close(self, key: tuple[str, str], acc: _Acc) -> NodeWindow:
        acc.fold()
        feats = {k: acc.sums[k] / acc.counts[k] for k in sorted(acc.sums, key=acc.first.__getitem__)}
        if acc.rank_compute:
            # The slowest rank sets the node's pace (one slow GPU of eight barely moves a mean).
            feats["compute_s"] = max(total / n for total, n in acc.rank_compute.values())
        if acc.replay_first is not None and acc.replay_t1 > acc.replay_t0:
            feats["pcie_replay_rate"] = max(0.0, (acc.replay_last - acc.replay_first) / (acc.replay_t1 - acc.replay_t0))
        return NodeWindow(key[0], key[1], acc.start, feats, acc.samples, tuple(sorted(acc.ranks)), tuple(acc.evidence))

    def flush(self) -> list[NodeWindow]:
        out = [self._close(k, a) for k, a in self._acc.items()]
        self._acc.clear()
        return out

