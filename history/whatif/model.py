"""The inputs of an ETTR projection: a job, its fault classes and its recovery paths.

Everything is per node-day of running time and in seconds, so a preset, a TOML file, flags and
measured values (``sources``) all fill the same frozen dataclasses; ``Scenario.validate`` is the one
place bad input is refused (a ``ValueError`` the command turns into exit 2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

DAY_S = 86400.0
PHASES = ("detection", "localisation", "recovery", "over_eviction", "lost_work")


@dataclass(frozen=True)
class FaultClass:
    """One kind of interruption and what each occurrence costs.

    ``rate`` follows Meta's series model (Kokolis et al. 2025): a job of N nodes sees N x rate
    faults per day. ``evict_share`` of the faults replace machines (warm standby, or a requeue when
    the pool is dry), the rest restart in place. ``over_evict`` healthy machines go with each evicted
    culprit (a blamed parallel group). ``slowdown`` is the throughput lost while the fault is being
    found (1 = the job stops; a fail-slow machine leaves it running slower). ``loses_work`` is False
    where the trainer can save before the restart (planned restarts, fail-slow evictions).
    ``timeout_s`` / ``manual_localise_s`` are what the framework's timeout alone gives (no faultlens).
    ``stop_time`` classes are not localised by the diagnosis itself: it asks for a stop-time
    diagnosis (docs/design.md §4), whose diagnostics, reattempts and rollbacks are ``localise_s``.
    """

    name: str
    rate: float                    # faults per node-day
    detect_s: float
    localise_s: float = 0.0
    evict_share: float = 1.0
    over_evict: float = 0.0
    slowdown: float = 1.0
    loses_work: bool = True
    planned: bool = False          # recovery by hot update, nothing to detect
    timeout_s: float = 600.0
    manual_localise_s: float = 0.0
    stop_time: bool = False

    @property
    def degrades(self) -> bool:
        """The job keeps running (slower) while this fault is found; faults keep arriving meanwhile."""
        return not self.planned and self.slowdown < 1.0

    def validate(self) -> None:
        for key in ("rate", "detect_s", "localise_s", "over_evict", "timeout_s", "manual_localise_s"):
            value = getattr(self, key)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"fault class {self.name!r}: {key} must be a finite number >= 0, got {value}")
        for key in ("evict_share", "slowdown"):
            value = getattr(self, key)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"fault class {self.name!r}: {key} must be in [0, 1], got {value}")


@dataclass(frozen=True)
class Recovery:
    """Seconds from the culprit being known to the job training again, by path (ByteRobust §6)."""

    standby_s: float = 56.0        # warm standby: requeue / 10.87
    requeue_s: float = 611.0       # ByteRobust: 454-768 s
    restart_s: float = 56.0        # in-place reattempt / rollback
    hot_update_s: float = 55.0     # ByteRobust: 46-65 s

    def validate(self) -> None:
        for key, value in vars(self).items():
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"recovery {key} must be a finite number >= 0, got {value}")


@dataclass(frozen=True)
class Scenario:
    """A job to project: size, length, checkpointing, spares and its fault classes."""

    gpus: int
    days: float
    faults: tuple[FaultClass, ...]
    gpus_per_node: int = 8
    checkpoint_interval_s: float | None = None   # None: the optimum (closed_form.optimal_interval)
    checkpoint_stall_s: float = 0.03
    recovery: Recovery = field(default_factory=Recovery)
    spares: int | None = None                    # None: the pool's binomial P99 (remediation.pool)
    spare_return_days: float = 1.0               # an evicted machine's spare is back after this
    name: str = "custom"
    # input key ("gpus", "recovery.restart_s", "faults.job_hang.detect_s") -> provenance.Input
    provenance: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def nodes(self) -> int:
        return math.ceil(self.gpus / self.gpus_per_node)

    @property
    def duration_s(self) -> float:
        return self.days * DAY_S

    def fault_rate_s(self) -> float:
        """Faults per second of running, the whole job."""
        return self.nodes * sum(f.rate for f in self.faults) / DAY_S

    def validate(self) -> None:
        if self.gpus <= 0:
            raise ValueError(f"gpus must be > 0, got {self.gpus}")
        if self.gpus_per_node <= 0:
            raise ValueError(f"gpus per node must be > 0, got {self.gpus_per_node}")
        if not math.isfinite(self.days) or self.days <= 0:
            raise ValueError(f"days must be > 0, got {self.days}")
        if not math.isfinite(self.checkpoint_stall_s) or self.checkpoint_stall_s < 0:
            raise ValueError(f"checkpoint stall must be >= 0 s, got {self.checkpoint_stall_s}")
        if self.checkpoint_interval_s is not None:
            if not math.isfinite(self.checkpoint_interval_s) or self.checkpoint_interval_s <= 0:
                raise ValueError(f"checkpoint interval must be > 0 s, got {self.checkpoint_interval_s}")
            if self.checkpoint_interval_s > self.duration_s:
                raise ValueError(f"checkpoint interval {self.checkpoint_interval_s:g} s is longer than the job "
                                 f"({self.duration_s:g} s)")
        if self.spares is not None and self.spares < 0:
            raise ValueError(f"spares must be >= 0, got {self.spares}")
        if not math.isfinite(self.spare_return_days) or self.spare_return_days <= 0:
            raise ValueError(f"spare return time must be > 0 days, got {self.spare_return_days}")
        if not self.faults:
            raise ValueError("no fault classes")
        names = [f.name for f in self.faults]
        if len(set(names)) != len(names):
            raise ValueError(f"fault classes named twice: {sorted(n for n in set(names) if names.count(n) > 1)}")
        for f in self.faults:
            f.validate()
        self.recovery.validate()

    def with_fault(self, name: str, **changes: Any) -> Scenario:
        """This scenario with one class changed (sensitivity, measured values)."""
        if name not in {f.name for f in self.faults}:
            raise KeyError(name)
        return replace(self, faults=tuple(replace(f, **changes) if f.name == name else f for f in self.faults))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "gpus": self.gpus, "gpus_per_node": self.gpus_per_node, "nodes": self.nodes,
            "days": self.days, "checkpoint_interval_s": self.checkpoint_interval_s,
            "checkpoint_stall_s": self.checkpoint_stall_s, "spares": self.spares,
            "spare_return_days": self.spare_return_days, "recovery": dict(vars(self.recovery)),
            "faults": [dict(vars(f)) for f in self.faults],
        }


def timeout_only(scenario: Scenario) -> Scenario:
    """The same job with the framework's timeout alone: every fault is noticed when the collective
    times out, the culprit found by hand, and every replacement is a requeue (no warm standby, no hot
    update, no spares)."""
    faults = tuple(f if f.planned else replace(f, detect_s=f.timeout_s, localise_s=f.manual_localise_s)
                   for f in scenario.faults)
    r = scenario.recovery
    recovery = replace(r, standby_s=r.requeue_s, hot_update_s=r.requeue_s, restart_s=r.requeue_s)
    return replace(scenario, faults=faults, recovery=recovery, spares=0, name=f"{scenario.name} (timeout only)")
