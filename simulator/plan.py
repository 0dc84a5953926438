"""Which faults happen where and when: the builder API and the default (ByteRobust) fault mix.

``FaultPlan().fail_at("gpu_lost", node="n003", t=120).fail_at("job_hang", rank=17, t=400)``
places faults by hand (``t`` in seconds after the trace start). :func:`random_plan` draws a
realistic one. Nodes are named by their *slot* (``n003`` is slot 3): after a swap the slot holds
a spare (``s000``), and a fault planned on ``n003`` later lands on whatever machine fills slot 3.

Episode lengths are fixed per class (:data:`EPISODE_S`). Job-wide faults (those that stop or slow
the whole job, or make every rank log) never overlap: each ends, restart included, before the
next starts. Node-local faults overlap freely on different nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import Iterable

import numpy as np

from faultlens.events.diagnosis_record import FAULT_CLASSES

JOB_WIDE = frozenset({
    "gpu_lost", "gpu_thermal", "host_oom", "cuda_error", "nccl_error", "user_code", "nan_loss",
    "loss_spike", "job_hang", "fail_slow", "app_fault",
})

# Job-wide faults localised by absence and comparison (no log line names them).
IMPLICIT = frozenset({"job_hang", "fail_slow"})

# Seconds from onset to the end of the episode, restart included (see faults.py for the shape of
# each). Sized so that a detector has the evidence it needs (k × step time for a hang, rounds of
# stacks every 10 s for fail-slow — five rounds, or the detector's 150 s campaign timeout when a
# restart of another fault disturbs them — the NCCL timeout for sympathetic errors).
EPISODE_S = {
    "gpu_lost": 95.0, "gpu_memory": 60.0, "nvlink": 60.0, "gpu_thermal": 150.0,
    "gpu_reset_required": 60.0, "nic": 120.0, "kernel": 60.0, "host_oom": 95.0,
    "cuda_error": 95.0, "nccl_error": 95.0, "user_code": 45.0, "nan_loss": 80.0,
    "loss_spike": 60.0, "job_hang": 240.0, "fail_slow": 200.0, "node_silent": 90.0,
    "app_fault": 60.0,
}

# Not injected: `unknown` is no fault, `clock_skew` an alert about a node's clock (not a fault of the
# job), `telemetry_lost` an alert about the job's stream as a whole (it ended, or the pipeline lost it).
# Classes the simulator cannot inject (storage: no simulated disk or NFS yet; loss_stalled: no
# simulated loss curve that stops learning) have no episode length: a class added to the vocabulary
# becomes injectable when it gets an injector and its EPISODE_S entry, never before.
SIM_CLASSES = tuple(c for c in FAULT_CLASSES if c in EPISODE_S)

# ByteRobust Table 1 (778,135 jobs) mapped onto our classes, in percent. "CUDA error" (36.1 %) is
# split across the GPU classes that surface as CUDA errors; CPU overload (11.0 %) shows up as
# stragglers and kernel lockups; disk space (5.0 %) as user-code exceptions; manual restarts
# (17.3 %) are not faults and are left out. NaN (0.3 %) and MFU decline (0.8 %) are rare in the
# census but every class appears at least once when the count allows (--every-class).
DEFAULT_MIX = {
    "cuda_error": 12.0, "gpu_lost": 4.0, "gpu_memory": 5.0, "nvlink": 3.0,
    "gpu_reset_required": 2.0, "app_fault": 4.0, "nccl_error": 6.1,
    "fail_slow": 6.8, "kernel": 5.0,
    "host_oom": 10.1, "job_hang": 9.9, "user_code": 5.0, "nic": 2.9,
    "gpu_thermal": 1.0, "nan_loss": 0.3, "loss_spike": 0.5, "node_silent": 1.0,
}

WARMUP_S = 120.0  # healthy steps before the first fault, so detectors have a baseline
GAP_S = 20.0  # at least this much healthy time between job-wide episodes (two steps)


@dataclass(frozen=True)
class PlannedFault:
    fault: str
    t: float  # seconds after the trace start
    slot: int | None = None  # node slot; None: the injector picks one (from the rank if given)
    rank: int | None = None
    gpu: int | None = None
    detail: str | None = None  # a variant, e.g. "xid48" or "hung_task"

    def __post_init__(self) -> None:
        if self.fault not in SIM_CLASSES:
            raise ValueError(f"unknown fault class {self.fault!r} (one of {', '.join(SIM_CLASSES)})")
        if self.t < 0:
            raise ValueError(f"fault {self.fault} at t={self.t}: time must be >= 0")

    @property
    def job_wide(self) -> bool:
        return self.fault in JOB_WIDE

    @property
    def end(self) -> float:
        return self.t + EPISODE_S[self.fault]


def slot_of(node: str) -> int:
    """``n003`` → 3: faults are planned on slots, whatever machine fills them later."""
    if len(node) < 2 or node[0] != "n" or not node[1:].isdigit():
        raise ValueError(f"plan nodes by their original name n000, n001, ... (got {node!r})")
    return int(node[1:])


@dataclass
class FaultPlan:
    faults: list[PlannedFault] = field(default_factory=list)

    def fail_at(self, fault: str, *, t: float, node: str | None = None, rank: int | None = None,
                gpu: int | None = None, detail: str | None = None) -> "FaultPlan":
        self.faults.append(PlannedFault(fault, float(t), slot_of(node) if node else None, rank, gpu, detail))
        return self

    def sorted(self) -> list[PlannedFault]:
        return sorted(self.faults, key=lambda f: f.t)

    def end(self) -> float:
        return max((f.end for f in self.faults), default=0.0)

    def check(self) -> None:
        """Job-wide episodes must not overlap (their effects would mix); raise naming the pair."""
        wide = [f for f in self.sorted() if f.job_wide]
        for a, b in pairwise(wide):
            if b.t < a.end:
                raise ValueError(f"job-wide faults overlap: {a.fault} at t={a.t:.0f} runs to {a.end:.0f}, "
                                 f"{b.fault} starts at t={b.t:.0f}")


def draw_classes(n: int, rng: np.random.Generator, every_class: bool = True,
                 mix: dict[str, float] | None = None) -> list[str]:
    mix = mix or DEFAULT_MIX
    names = sorted(mix)
    chosen: list[str] = []
    if every_class and n >= len(SIM_CLASSES):
        chosen = list(SIM_CLASSES)
    weights = np.array([mix[c] for c in names], dtype=float)
    extra = rng.choice(len(names), size=n - len(chosen), p=weights / weights.sum())
    chosen += [names[i] for i in extra]
    order = rng.permutation(len(chosen))
    return [chosen[i] for i in order]


def min_duration(classes: Iterable[str]) -> float:
    """The shortest trace that holds these faults: job-wide episodes back to back with gaps."""
    classes = list(classes)
    wide = sum(EPISODE_S[c] + GAP_S for c in classes if c in JOB_WIDE)
    local = max((EPISODE_S[c] for c in classes if c not in JOB_WIDE), default=0.0)
    return WARMUP_S + max(wide, local + GAP_S)


def random_plan(n: int, duration: float | None, nodes: int, rng: np.random.Generator,
                every_class: bool = True) -> tuple[FaultPlan, float]:
    """``n`` faults from the default mix over ``duration`` s (None: as short as fits).

    Job-wide episodes are spread evenly with random slack; node-local ones go at random times on
    nodes that have no other episode then. Returns the plan and the trace duration.
    """
    classes = draw_classes(n, rng, every_class)
    need = min_duration(classes)
    if duration is None:
        duration = need
    elif duration < need:
        raise ValueError(f"{n} faults need at least {need:.0f} s of trace (job-wide episodes may not "
                         f"overlap); got --duration {duration:.0f}")
    plan = FaultPlan()
    wide = [c for c in classes if c in JOB_WIDE]
    slack = duration - need
    t = WARMUP_S
    busy: dict[int, list[tuple[float, float]]] = {}
    # Hangs and slowdowns are found by absence and comparison over minutes; a node-local fault
    # starting inside one (a node going silent, a kernel lockup that restarts the job) explains or
    # ends it, and the label would name a fault no evidence could single out. Such starts are
    # avoided while the plan has room.
    quiet: list[tuple[float, float]] = []
    for c in wide:
        t += float(rng.uniform(0, slack / max(1, len(wide))))
        slot = int(rng.integers(nodes))
        plan.faults.append(PlannedFault(c, round(t, 3), slot))
        busy.setdefault(slot, []).append((t, t + EPISODE_S[c] + GAP_S))
        if c in IMPLICIT:
            quiet.append((t - GAP_S, t + EPISODE_S[c]))
        t += EPISODE_S[c] + GAP_S
    for c in (c for c in classes if c not in JOB_WIDE):
        for attempt in range(100):
            start = float(rng.uniform(WARMUP_S, max(WARMUP_S + 1, duration - EPISODE_S[c] - GAP_S)))
            slot = int(rng.integers(nodes))
            end = start + EPISODE_S[c] + GAP_S
            if attempt < 70 and any(q0 <= start <= q1 for q0, q1 in quiet):
                continue
            if all(e <= start or s >= end for s, e in busy.get(slot, ())):
                break
        else:
            raise ValueError(f"could not place {c}: too many faults on {nodes} nodes in {duration:.0f} s")
        busy.setdefault(slot, []).append((start, end))
        plan.faults.append(PlannedFault(c, round(start, 3), slot))
    plan.check()
    return plan, duration
