"""Gray failures by peer comparison (Minder's idea: in one job, healthy machines look alike).

Job-level. For every closed feature window, each node's features are scored against its peers
in the same job and the same window: a robust z-score (distance from the peer median in units
of 1.4826 × MAD, with a floor so a very uniform fleet does not turn 1 % into 10 sigma), counted
only in the direction that is worse (clock down, compute time up, ...). An IsolationForest fitted
on the job's healthy windows (their z-vectors) adds a second, multivariate opinion that lets a
moderate drift in several metrics at once count. A node that stays away from its peers for
``persist`` consecutive windows becomes a ``fail_slow`` suspicion (action capture_stacks,
confidence < 1), which the implicit-fault detector turns into rounds of stack captures.

The peer model proper (``peer_model``; off with ``--no-peer-model``) is what goes beyond one
threshold on one window: the forest's opinion above, and :class:`DriftJudge`, which follows
each node's slow drift over tens of minutes (diagnosis.peers.drift_features) and ranks the drifting
nodes as suspects for stack capture. It never convicts: its findings ask for stacks or alert a
person, with a confidence below ``CORROBORATED``, so no eviction rests on it alone.

Only a measured slowdown convicts (the node's compute time against its peers'). Temperature,
power, clocks and PCIe replays explain a slowdown, never stand for one: a healthy GPU that runs
warm, or one held at its power cap, computes as fast as its peers. A slowdown explained by a
hardware drift (clocks down, power down) is two independent signals, and the suspicion says so
with a confidence of at least ``CORROBORATED``; a slowdown with thermal / power-brake throttle
flags is ``gpu_thermal`` on that node (docs/design.md §3: evict when step time also suffers).
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from faultlens.diagnosis.peers.drift_features import BASELINE, RECENT, DriftFeatures, DriftTracker, peer_drift_z, relative
from faultlens.diagnosis.peers.drift_features import MIN_PEERS as DRIFT_MIN_PEERS
from faultlens.diagnosis.peers.features import DIRECTION, FEATURES, NodeWindow
from faultlens.diagnosis.peers.net_drift import NetDriftJudge
from faultlens.diagnosis.peers.peer_forest import JobForests
from faultlens.diagnosis.rules.base import Finding
from faultlens.events.envelope import Envelope

log = logging.getLogger(__name__)

Z_THRESHOLD = 6.0
Z_SOFT = 3.5  # with the forest's agreement
Z_SLOW_SOFT = 2.5  # ... the slowdown itself must still be this clear
MIN_REL_DEV = 0.08
# A slowdown counts from 5 %: compute time is the measured thing, and one slow rank sets the pace.
MIN_SLOW_REL = 0.05
MIN_PEERS = 4
PERSIST = 3
# A sigma floor per feature: relative to the median, and absolute (units of the feature).
FLOOR_REL = 0.02
FLOOR_ABS = {"sm_clock_ratio": 0.02, "power_ratio": 0.03, "temp_c": 2.0, "throttle": 0.05,
             "pcie_replay_rate": 1.0, "compute_s": 0.005}
# What convicts (a measured slowdown) and what may only explain it (hardware).
SLOWDOWN = ("compute_s",)
HARDWARE = ("sm_clock_ratio", "power_ratio", "temp_c", "throttle", "pcie_replay_rate")
# A suspicion at or above this confidence carries a second independent signal (hardware drift
# beside the slowdown): enough to evict when no stack round answers (diagnosis.peers.failslow).
CORROBORATED = 0.75


@dataclass(slots=True)
class _Streak:
    windows: int = 0
    since: float = 0.0
    worst: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # feature -> (z, value, median)
    evidence: list[str] = field(default_factory=list)
    fired: bool = False
    rule: bool = False  # some window crossed the threshold on its own (else only the forest's vote flagged it)


@dataclass(frozen=True, slots=True)
class Scored:
    node: str
    z: dict[str, float]  # signed so that positive = worse than peers
    rel: dict[str, float]
    medians: dict[str, float]
    values: dict[str, float]


def peer_scores(windows: list[NodeWindow]) -> list[Scored]:
    """Robust z-scores of every node against the peers of one job-window (pure)."""
    out = []
    stats: dict[str, tuple[float, float]] = {}
    for feat in FEATURES:
        vals = [w.features[feat] for w in windows if feat in w.features]
        if len(vals) < MIN_PEERS:
            continue
        med = statistics.median(vals)
        mad = statistics.median(abs(v - med) for v in vals)
        sigma = max(1.4826 * mad, FLOOR_REL * abs(med), FLOOR_ABS.get(feat, 1e-9))
        stats[feat] = (med, sigma)
    for w in windows:
        z, rel, meds, values = {}, {}, {}, {}
        for feat, (med, sigma) in stats.items():
            if feat not in w.features:
                continue
            v = w.features[feat]
            z[feat] = DIRECTION[feat] * (v - med) / sigma
            rel[feat] = abs(v - med) / abs(med) if med else float("inf") if v != med else 0.0
            meds[feat] = med
            values[feat] = v
        out.append(Scored(w.node, z, rel, meds, values))
    return out


class PeerAnomalyDetector:
    """Collects closed node windows per job and judges each job-window once it is complete."""

    def __init__(self, window_s: float = 10.0, persist: int = PERSIST, z_threshold: float = Z_THRESHOLD,
                 use_forest: bool = True, seed: int = 0, drift: bool = False) -> None:
        self.window_s = window_s
        self.drift = DriftJudge(use_forest=use_forest, seed=seed) if drift else None
        self.persist = persist
        self.z_threshold = z_threshold
        self.use_forest = use_forest
        self.seed = seed
        self._pending: dict[tuple[str, float], dict[str, NodeWindow]] = {}
        self._streaks: dict[tuple[str, str], _Streak] = {}
        self._forests = JobForests(seed)
        self._net: dict[str, NetDriftJudge] = {}

    def observe_window(self, window: NodeWindow) -> None:
        self._pending.setdefault((window.job, window.start), {})[window.node] = window

    def observe_net(self, event: Envelope) -> list[Finding]:
        """A `net`/`sample` (port counters): a NIC decaying slowly (diagnosis.peers.net_drift), peer model on."""
        if self.drift is None:
            return []
        return self._net.setdefault(event.job, NetDriftJudge()).observe(event)

    def tick(self, now: float) -> list[Finding]:
        # A window is judged once two more windows have passed: late nodes have reported by then.
        ready = sorted(k for k in self._pending if k[1] + 3 * self.window_s <= now)
        out: list[Finding] = []
        for key in ready:
            out.extend(self._judge(key[0], key[1], list(self._pending.pop(key).values())))
        return out

    def flush(self) -> list[Finding]:
        out: list[Finding] = []
        for key in sorted(self._pending, key=lambda k: k[1]):
            out.extend(self._judge(key[0], key[1], list(self._pending.pop(key).values())))
        return out

    # --- judging ----------------------------------------------------------------------------
    def _judge(self, job: str, start: float, windows: list[NodeWindow]) -> list[Finding]:
        if len(windows) < MIN_PEERS:
            return []
        scored = peer_scores(windows)
        by_node = {w.node: w for w in windows}
        out: list[Finding] = self.drift.observe(job, start, scored, by_node) if self.drift is not None else []
        vectors = np.array([[max(-10.0, min(10.0, s.z.get(f, 0.0))) for f in FEATURES] for s in scored])
        # The forest only matters for a node already Z_SOFT away somewhere: score just those.
        tops = [max((z for f, z in s.z.items() if z > 0 and s.rel.get(f, 0.0) >= MIN_REL_DEV), default=0.0) for s in scored]
        forest_flags = self._forest_flags(job, vectors, np.array(tops) >= Z_SOFT)
        for i, s in enumerate(scored):
            bad = {f: z for f, z in s.z.items()
                   if z > 0 and s.rel.get(f, 0.0) >= (MIN_SLOW_REL if f in SLOWDOWN else MIN_REL_DEV)}
            slow = max((bad.get(f, 0.0) for f in SLOWDOWN), default=0.0)
            top = max(bad.values(), default=0.0)
            flagged = slow >= self.z_threshold or (forest_flags[i] and slow >= Z_SLOW_SOFT and top >= Z_SOFT)
            key = (job, s.node)
            if not flagged and not any(f in s.z for f in SLOWDOWN):
                continue  # no step in this window (steps longer than it): no measurement, streak kept
            if not flagged:
                if self.use_forest:
                    self._forests.add_healthy(job, vectors[i])
                self._streaks.pop(key, None)
                continue
            st = self._streaks.setdefault(key, _Streak(since=start))
            st.windows += 1
            st.rule = st.rule or slow >= self.z_threshold
            for f, z in bad.items():
                if z > st.worst.get(f, (0.0,))[0]:
                    st.worst[f] = (z, s.values[f], s.medians[f])
            if len(st.evidence) < 16:
                st.evidence.extend(by_node[s.node].evidence[:2])
            if st.windows >= self.persist and not st.fired:
                st.fired = True
                out.append(self._finding(job, start, s.node, st, by_node[s.node], bool(forest_flags[i])))
        return out

    def _forest_flags(self, job: str, vectors: np.ndarray, ask: np.ndarray) -> np.ndarray:
        if not self.use_forest:
            return np.zeros(len(vectors), dtype=bool)
        return self._forests.flags(job, vectors, ask)

    def _finding(self, job: str, start: float, node: str, st: _Streak, w: NodeWindow, forest: bool) -> Finding:
        parts = [f"{f} {v:.4g} vs peer median {m:.4g} ({z:.1f} robust sigmas)"
                 for f, (z, v, m) in sorted(st.worst.items(), key=lambda kv: -kv[1][0])[:4]]
        slow = max(st.worst.get(f, (0.0,))[0] for f in SLOWDOWN)
        # Hardware that explains the slowdown: clocks or power well below the peers', or throttling.
        explains = sorted(f for f in HARDWARE if f != "temp_c" and st.worst.get(f, (0.0,))[0] >= Z_SOFT)
        head = f"{node} computed slower than its peers for {st.windows} consecutive {self.window_s:.0f}s windows: "
        tail = ("; isolation forest agrees" if forest else "")
        if not st.rule:
            # Flagged only with the forest's vote: the model asks for evidence, it never convicts alone.
            tail += "; below the threshold on its own (the model's vote only): no eviction without stacks"
        if "throttle" in explains and w.features.get("throttle", 0.0) > 0 and not st.rule:
            return Finding(
                job=job, ts=start + self.window_s, onset=st.since, fault="gpu_thermal", action="alert",
                nodes=(node,), ranks=w.ranks, entity="thermal", confidence=round(CORROBORATED - 0.05, 3),
                evidence=tuple(st.evidence),
                detail=head + "; ".join(parts) + "; throttled (thermal / power brake) while slower" + tail,
            )
        if "throttle" in explains and w.features.get("throttle", 0.0) > 0:
            return Finding(
                job=job, ts=start + self.window_s, onset=st.since, fault="gpu_thermal", action="evict",
                nodes=(node,), ranks=w.ranks, entity="thermal", confidence=round(min(0.95, 0.8 + 0.01 * slow), 3),
                evidence=tuple(st.evidence),
                detail=head + "; ".join(parts) + "; throttled (thermal / power brake) while slower: gray failure" + tail,
            )
        if explains and st.rule:
            confidence = min(0.9, CORROBORATED + 0.01 * slow + (0.05 if forest else 0.0))
            tail = f"; explained by {', '.join(explains)}" + tail
        elif explains:
            confidence = CORROBORATED - 0.05
            tail = f"; explained by {', '.join(explains)}" + tail
        else:
            confidence = min(CORROBORATED - 0.05, 0.5 + 0.02 * slow + (0.05 if forest else 0.0))
            tail = "; no hardware drift explains it" + tail
        return Finding(
            job=job, ts=start + self.window_s, onset=st.since, fault="fail_slow", action="capture_stacks",
            nodes=(node,), ranks=w.ranks, entity="peers", confidence=round(confidence, 3),
            evidence=tuple(st.evidence), detail=head + "; ".join(parts) + tail,
        )


# --- slow drifts: the model ranks suspects for stack capture, it never convicts ----------------
DRIFT_Z = 5.0  # a node's compute time this many robust sigmas further from its own baseline than its peers'
DRIFT_MIN_EXCESS = 0.01  # ... and at least 1 % slower than it was
JOINT_Z = 5.0  # compute, clocks and power together (Stouffer's sum of their excess z-scores)
JOINT_SIGNAL_Z = 2.0  # ... each of at least two of them this far out
DRIFT_FOREST_Z = 2.5  # with the forest's agreement, two signals this far out suffice
DRIFT_PERSIST = 3  # consecutive one-minute buckets
# Below CORROBORATED: diagnosis.peers.failslow never lets a drift suspicion stand as an eviction.
DRIFT_CONFIDENCE_MAX = 0.6
DRIFT_ALERT_AFTER_S = 900.0  # still drifting this long after the suspicion: alert a person
DRIFT_REFIRE_S = 3600.0  # one suspicion per node per hour (the stack rounds it starts cost every rank)


@dataclass(slots=True)
class _DriftStreak:
    buckets: int = 0
    since: float = 0.0
    fired_at: float | None = None
    alerted: bool = False


class DriftJudge:
    """Per job: slow-drift features per node each minute → ranked suspects (action capture_stacks),
    and an alert for a person when a suspect keeps drifting. Pure but for its per-job state."""

    def __init__(self, use_forest: bool = True, seed: int = 0) -> None:
        self.use_forest = use_forest
        self.seed = seed
        self._trackers: dict[str, DriftTracker] = {}
        self._streaks: dict[tuple[str, str], _DriftStreak] = {}
        self._forests = JobForests(seed)

    def observe(self, job: str, start: float, scored: list[Scored], windows: dict[str, NodeWindow]) -> list[Finding]:
        tracker = self._trackers.setdefault(job, DriftTracker())
        rel = {s.node: relative(s.values, s.medians) for s in scored}
        closed = tracker.observe(start, rel, {n: w.evidence for n, w in windows.items()})
        if closed is None:
            return []
        t, feats = closed
        if len(feats) < DRIFT_MIN_PEERS:
            return []
        zs = peer_drift_z(feats)
        vectors = np.array([f.vector(z) for f, z in zip(feats, zs, strict=True)])
        hot = [sum(1 for s in ("compute", "clock", "power") if z.get(f"excess_{s}", 0.0) >= DRIFT_FOREST_Z) >= 2
               for z in zs]
        forest = self._forest_flags(job, vectors, np.array(hot))
        judged = [(f, z, *_drift_score(f, z, bool(forest[i]))) for i, (f, z) in enumerate(zip(feats, zs, strict=True))]
        suspects = sorted((j for j in judged if j[2] > 0), key=lambda j: -j[2])
        out: list[Finding] = []
        for f, z, score, why in judged:
            key = (job, f.node)
            if score <= 0:
                if self.use_forest:
                    self._forests.add_healthy(job, f.vector(z))
                st = self._streaks.get(key)
                if st is not None and st.fired_at is None:
                    del self._streaks[key]
                elif st is not None:
                    st.buckets = 0
                continue
            st = self._streaks.setdefault(key, _DriftStreak(since=t))
            st.buckets += 1
            w = windows.get(f.node)
            ranks = w.ranks if w is not None else ()
            evidence = tracker.evidence(f.node)
            place = next(i for i, j in enumerate(suspects, 1) if j[0].node == f.node)
            head = (f"{f.node} drifted away from its peers: {_describe(f, z)}; {why}; drift suspect {place} of "
                    f"{len(suspects)} in the job")
            if st.buckets >= DRIFT_PERSIST and (st.fired_at is None or t - st.fired_at >= DRIFT_REFIRE_S):
                st.fired_at, st.alerted = t, False
                out.append(Finding(
                    job=job, ts=t, onset=st.since, fault="fail_slow", action="capture_stacks", nodes=(f.node,),
                    ranks=ranks, entity="drift", confidence=_drift_confidence(score), evidence=evidence,
                    detail=head + f" for {st.buckets} min: capture stacks to localise it (the model ranks "
                                  f"suspects, it never convicts alone)"))
            elif st.fired_at is not None and not st.alerted and t - st.fired_at >= DRIFT_ALERT_AFTER_S \
                    and st.buckets >= DRIFT_PERSIST:
                st.alerted = True
                out.append(Finding(
                    job=job, ts=t, onset=st.since, fault="fail_slow", action="alert", nodes=(f.node,), ranks=ranks,
                    entity="drift-alert", confidence=_drift_confidence(score), evidence=evidence,
                    detail=head + f", still {t - st.fired_at:.0f}s after it was first suspected: inspect the "
                                  f"machine (no stack or counter evidence convicts it, so nothing is evicted)"))
        return out

    def _forest_flags(self, job: str, vectors: np.ndarray, ask: np.ndarray) -> np.ndarray:
        if not self.use_forest:
            return np.zeros(len(vectors), dtype=bool)
        return self._forests.flags(job, vectors, ask)


def _drift_score(f: DriftFeatures, z: dict[str, float], forest: bool) -> tuple[float, str]:
    """How strongly a node drifts (0: not at all) and which test says so (pure)."""
    slow = z.get("excess_compute", 0.0)
    if slow >= DRIFT_Z and f.excess.get("compute", 0.0) >= DRIFT_MIN_EXCESS:
        return slow, "compute time crept up against its own baseline"
    excess = [max(-3.0, min(6.0, z.get(f"excess_{s}", 0.0))) for s in ("compute", "clock", "power")]
    out_there = sum(1 for e in excess if e >= JOINT_SIGNAL_Z)
    joint = sum(excess) / math.sqrt(3.0)
    if out_there >= 2 and joint >= JOINT_Z and f.excess.get("compute", 0.0) > 0:
        return joint, "several signals drift together (joint deviation)"
    if forest and sum(1 for e in excess if e >= DRIFT_FOREST_Z) >= 2:
        return joint, "isolation forest on the drift features agrees"
    return 0.0, ""


def _drift_confidence(score: float) -> float:
    # At least 0.5: requests for evidence (diagnosis.peers.failslow, diagnosis.hang.detector) sit below it.
    return round(min(DRIFT_CONFIDENCE_MAX, 0.5 + 0.01 * score), 3)


def _describe(f: DriftFeatures, z: dict[str, float]) -> str:
    what = {"compute": "compute time", "clock": "SM clocks", "power": "power"}
    sign = {"compute": 1.0, "clock": -1.0, "power": -1.0}  # features are positive when worse; show the real way
    parts = []
    for sig in ("compute", "clock", "power"):
        if sig not in f.excess:
            continue
        slope = f.slope.get(sig)
        trend = f", trend {sign[sig] * slope * 100:+.1f} %/h" if slope is not None else ""
        parts.append(f"{what[sig]} {sign[sig] * f.excess[sig] * 100:+.1f} % vs its own baseline "
                     f"({z.get('excess_' + sig, 0.0):.1f} robust sigmas beyond its peers' drift{trend})")
    return ", ".join(parts) + f" (its last {RECENT} min against its first {BASELINE} min in the job)"
