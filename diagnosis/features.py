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


@dataclass(slots=True)
class _Acc:
    start: float
    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    samples: int = 0
    ranks: set[int] = field(default_factory=set)
    evidence: list[str] = field(default_factory=list)
    replay_first: float | None = None
    replay_last: float | None = None
    replay_t0: float = 0.0
    replay_t1: float = 0.0
    rank_compute: dict[int, list[float]] = field(default_factory=dict)  # rank → [sum, count]

    def add(self, name: str, value: float | None) -> None:
        if value is None or not math.isfinite(value):
            return
        self.sums[name] = self.sums.get(name, 0.0) + value
        self.counts[name] = self.counts.get(name, 0) + 1


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
        ratios, powers, temps, throttled, replay, util = [], [], [], 0, 0.0, []
        for g in gpus:
            if not isinstance(g, Mapping):
                continue
            clock, cmax = num(g.get("sm_clock_mhz")), num(g.get("sm_clock_max_mhz"))
            if clock is not None and cmax:
                ratios.append(clock / cmax)
            power, limit = num(g.get("power_w")), num(g.get("power_limit_w"))
            if power is not None and limit:
                powers.append(power / limit)
            temp = num(g.get("temp_c"))
            if temp is not None:
                temps.append(temp)
            throttle = g.get("throttle")
            if throttle and not THERMAL.isdisjoint(throttle):
                throttled += 1
            replay += num(g.get("pcie_replay")) or 0.0
            u = num(g.get("util"))
            if u is not None:
                util.append(u)
        acc.add("util", sum(util) / len(util) if util else None)
        acc.add("util_min", min(util) if util else None)
        # The slowest GPU sets the node's pace in synchronous training: judge the worst one.
        acc.add("sm_clock_ratio", min(ratios) if ratios else None)
        acc.add("power_ratio", min(powers) if powers else None)
        acc.add("temp_c", max(temps) if temps else None)
        acc.add("throttle", throttled / len(gpus))
        if acc.replay_first is None:
            acc.replay_first, acc.replay_t0 = replay, event.ts
        acc.replay_last, acc.replay_t1 = replay, event.ts

    def _close(self, key: tuple[str, str], acc: _Acc) -> NodeWindow:
        feats = {k: acc.sums[k] / acc.counts[k] for k in acc.sums}
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

