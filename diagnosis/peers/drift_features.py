"""Slow-drift features: how far each node has moved away from its peers over tens of minutes.

The peer comparison of diagnosis/peers/anomaly.py judges one 10 s window at a time, so a node must
stand several robust sigmas apart *in a single window* to be seen. A GPU whose clocks and power
sag by a few percent, or a node whose compute time creeps up 3 % an hour, never does until it is
far gone: inside one window its deviation is smaller than the healthy noise. Averaged over many
windows, and measured against the node's *own* past (healthy machines differ by fixed offsets:
a slower silicon bin, a warmer rack), the same drift is many sigmas clear.

Per node and signal, each job-window gives a relative deviation from that window's peer median,
signed so that positive is worse (compute time up; clocks, power down). These are folded into
one-minute buckets (median), and from a node's bucket series come, per signal:

* ``excess``: the level of the last ``RECENT`` buckets minus the node's baseline (the median of
  its first ``BASELINE`` buckets in the job): how far it moved from where it started;
* ``slope``: the least-squares trend over the last ``TREND`` buckets, per hour.

Each is then turned into a robust z-score against the same feature of the job's other nodes
(:func:`peer_drift_z`): a whole job slowing down (a slower data shard, a warmer room) moves
every node and flags none. Everything here is pure but the small per-job :class:`DriftTracker`.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np

BUCKET_S = 60.0
RECENT = 10  # buckets (minutes) that make the current level
BASELINE = 20  # first buckets of a node that make its baseline
TREND = 30  # buckets of the trend
HISTORY = 240  # buckets kept per node (4 h)
MIN_PEERS = 4

# signal → (window feature, direction: +1 when higher is worse)
SIGNALS: dict[str, tuple[str, int]] = {
    "compute": ("compute_s", +1),
    "clock": ("sm_clock_ratio", -1),
    "power": ("power_ratio", -1),
}
# Sigma floors (relative units) so a very uniform fleet does not turn 0.1 % into 10 sigma.
FLOOR = {"compute": 0.002, "clock": 0.003, "power": 0.004}
SLOPE_FLOOR = {"compute": 0.004, "clock": 0.006, "power": 0.008}  # per hour
FEATURE_NAMES = tuple(f"{kind}_{sig}" for sig in SIGNALS for kind in ("excess", "slope"))


def relative(values: Mapping[str, float], medians: Mapping[str, float]) -> dict[str, float]:
    """A node's deviation from its window's peer medians, per signal, positive = worse (pure)."""
    out = {}
    for sig, (feat, sign) in SIGNALS.items():
        v, m = values.get(feat), medians.get(feat)
        if v is None or not m or not math.isfinite(v):
            continue
        out[sig] = sign * (v / m - 1.0)
    return out


@dataclass(frozen=True, slots=True)
class DriftFeatures:
    node: str
    excess: dict[str, float]  # signal → recent level minus the node's baseline
    slope: dict[str, float]  # signal → per hour over the last TREND buckets
    level: dict[str, float]  # signal → recent level (relative to the peers)
    buckets: int

    def vector(self, z: Mapping[str, float]) -> list[float]:
        return [max(-10.0, min(10.0, z.get(name, 0.0))) for name in FEATURE_NAMES]


def node_drift(node: str, series: Iterable[tuple[float, Mapping[str, float]]],
               baseline: Mapping[str, float]) -> DriftFeatures | None:
    """Drift features of one node from its bucket series ``[(t, {signal: rel})]`` (pure)."""
    rows = list(series)
    if len(rows) < RECENT:
        return None
    excess, slope, level = {}, {}, {}
    for sig in SIGNALS:
        recent = [r[sig] for _, r in rows[-RECENT:] if sig in r]
        if len(recent) < RECENT // 2:
            continue
        level[sig] = statistics.median(recent)
        if sig in baseline:
            excess[sig] = level[sig] - baseline[sig]
        pts = [(t, r[sig]) for t, r in rows[-TREND:] if sig in r]
        if len(pts) >= RECENT:
            t = np.array([p[0] for p in pts]) / 3600.0
            y = np.array([p[1] for p in pts])
            t = t - t.mean()
            denom = float((t * t).sum())
            if denom > 0:
                slope[sig] = float((t * (y - y.mean())).sum() / denom)
    return DriftFeatures(node, excess, slope, level, len(rows))


def peer_drift_z(feats: list[DriftFeatures]) -> list[dict[str, float]]:
    """Robust z of every node's drift features against its peers' (positive = worse) (pure)."""
    out: list[dict[str, float]] = [{} for _ in feats]
    for sig in SIGNALS:
        for kind, floor in (("excess", FLOOR[sig]), ("slope", SLOPE_FLOOR[sig])):
            vals = [(i, getattr(f, kind)[sig]) for i, f in enumerate(feats) if sig in getattr(f, kind)]
            if len(vals) < MIN_PEERS:
                continue
            xs = [v for _, v in vals]
            med = statistics.median(xs)
            sigma = max(1.4826 * statistics.median(abs(x - med) for x in xs), floor)
            for i, v in vals:
                out[i][f"{kind}_{sig}"] = (v - med) / sigma
    return out


@dataclass(slots=True)
class _Node:
    buckets: deque = field(default_factory=lambda: deque(maxlen=HISTORY))
    current: dict[str, list[float]] = field(default_factory=dict)
    baseline: dict[str, float] | None = None
    first: list[dict[str, float]] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    last: float = 0.0  # the last bucket it reported in


class DriftTracker:
    """One job's per-node bucket series. :meth:`observe` takes a judged job-window's relative
    deviations and, when the window opens a new minute, returns every node's features for the
    minute that closed (with the window evidence of the drifting nodes)."""

    def __init__(self, bucket_s: float = BUCKET_S) -> None:
        self.bucket_s = bucket_s
        self._nodes: dict[str, _Node] = {}
        self._bucket: float | None = None

    def observe(self, start: float, rel: Mapping[str, Mapping[str, float]],
                evidence: Mapping[str, tuple[str, ...]] = {}) -> tuple[float, list[DriftFeatures]] | None:
        bucket = math.floor(start / self.bucket_s) * self.bucket_s
        closed = None
        if self._bucket is not None and bucket > self._bucket:
            closed = (self._bucket + self.bucket_s, self._close(self._bucket))
        if self._bucket is None or bucket > self._bucket:
            self._bucket = bucket
        elif bucket < self._bucket:
            return None  # a window of a minute already closed
        for node, r in rel.items():
            st = self._nodes.setdefault(node, _Node())
            for sig, v in r.items():
                st.current.setdefault(sig, []).append(v)
            ev = evidence.get(node)
            if ev:
                st.evidence = (st.evidence + list(ev[:1]))[-8:]
        return closed

    def _close(self, bucket: float) -> list[DriftFeatures]:
        out = []
        for node, st in list(self._nodes.items()):
            if not st.current:
                if bucket - st.last > HISTORY * self.bucket_s:
                    del self._nodes[node]  # gone from the job (swapped out): bounded state
                continue
            st.last = bucket
            row = {sig: statistics.median(vs) for sig, vs in st.current.items()}
            st.current = {}
            st.buckets.append((bucket, row))
            if st.baseline is None:
                st.first.append(row)
                if len(st.first) >= BASELINE:
                    st.baseline = {sig: statistics.median(r[sig] for r in st.first if sig in r)
                                   for sig in SIGNALS if any(sig in r for r in st.first)}
                    st.first = []
            if st.baseline is None:
                continue
            f = node_drift(node, st.buckets, st.baseline)
            if f is not None:
                out.append(f)
        return out

    def evidence(self, node: str) -> tuple[str, ...]:
        st = self._nodes.get(node)
        return tuple(st.evidence) if st else ()

    def forget(self, node: str) -> None:
        self._nodes.pop(node, None)
