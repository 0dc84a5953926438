"""What an active fault does to the cluster between two times, and the episode that owns it.

The engine asks these each tick (``active``); an episode that ends early (a command evicted its
node) cuts its effects short by moving ``t1`` to the present.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from faultlens.simulator.plan import PlannedFault

# kinds: "lost" (NVML nulls), "thermal" (heat + throttle ramp), "slow" (lower clocks/util),
# "reset" (recovery action asks for a GPU reset), "compute" (ranks' compute_s × factor),
# "loss" (nan / spike on every rank), "silent" (the node emits nothing), "idle" (a hung rank's
# GPU runs no kernel while its peers spin in NCCL), "sag" (SM clocks × ``factor`` and power ×
# ``power_factor`` at full strength, no throttle flag: a slow drift, simulator.drifts).
EFFECT_KINDS = frozenset({"lost", "thermal", "slow", "reset", "compute", "loss", "silent", "idle", "sag"})


@dataclass
class Effect:
    kind: str
    t0: float
    t1: float
    episode: int
    node: str | None = None
    gpus: tuple[int, ...] = ()
    ranks: frozenset[int] = frozenset()
    factor: float = 1.0
    mode: str = ""
    ramp_s: float = 0.0
    power_factor: float = 1.0
    steps: int = 0  # a "loss" effect that lasts this many steps (0: until t1)

    def __post_init__(self) -> None:
        if self.kind not in EFFECT_KINDS:
            raise ValueError(f"unknown effect kind {self.kind!r}")

    def active(self, t: float) -> bool:
        return self.t0 <= t < self.t1

    def strength(self, t: float) -> float:
        """0 → 1 over the ramp: heat builds up and slowdowns creep in rather than jump."""
        if self.ramp_s <= 0:
            return 1.0
        return max(0.0, min(1.0, (t - self.t0) / self.ramp_s))


@dataclass
class Episode:
    """One injected fault from onset to recovery, with its ground-truth label."""

    id: int
    planned: PlannedFault
    onset: float
    end: float
    nodes: list[str]
    ranks: list[int]
    swap: list[str] = field(default_factory=list)  # nodes replaced by spares at the end
    stops_job: bool = False  # the job is down (or hung) until the episode ends
    group: str | None = None
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    ended: bool = False

    def label(self, job: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "job": job,
            "fault": self.planned.fault,
            "nodes": list(self.nodes),
            "ranks": list(self.ranks),
            "onset": round(self.onset, 6),
            "end": round(self.end, 6),
            "detail": self.detail,
        }
        if self.group:
            out["group"] = self.group
        return out
