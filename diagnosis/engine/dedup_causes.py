"""Consequence suppression: which findings are the echo of a fault the job already has (Dedup's
third job, docs/design.md §3).

A crash anywhere stops every rank: the NCCL timeouts, the hang and the stalled steps that follow
on its peers are its consequences, not faults of their own; a node whose GPU vanished stops
beating and its CUDA calls fail. A primary is a diagnosis that asks something of the job or a
machine (or a wave candidate still held, which would have been one judged at once); a
consequence within ``suppress_s`` of it is dropped while it explains it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from faultlens.diagnosis.rules.base import Finding
from faultlens.events.diagnosis_record import Action, FaultClass

# A consequence starts when its cause does: a stall's onset is the last step, an NCCL incident's
# the start of the stuck collective, a silent node's its last beat. Within this slack of the
# primary it is the primary's echo; later it is a fault of its own.
SUPPRESS_S = 60.0
# Consequences of a crash anywhere in the job: every peer waits, steps stop, the job slows.
JOB_CONSEQUENCES = frozenset({FaultClass.NCCL_ERROR, FaultClass.JOB_HANG, FaultClass.FAIL_SLOW})
# Consequences of a fault on the same node: a node whose GPU or kernel died stops beating, and
# CUDA calls on a GPU that vanished or lost its memory fail.
NODE_CONSEQUENCES = frozenset({FaultClass.NODE_SILENT, FaultClass.CUDA_ERROR, FaultClass.APP_FAULT})
HARDWARE = frozenset(
    {FaultClass.GPU_LOST, FaultClass.GPU_MEMORY, FaultClass.GPU_RESET_REQUIRED, FaultClass.NVLINK, FaultClass.KERNEL}
)
# Primaries that stop every rank of the job (a process dies, a collective breaks, steps stop):
# whatever NCCL timeouts or stalls follow anywhere in the job are their echo.
JOB_STOPPING = frozenset(
    {
        FaultClass.GPU_LOST,
        FaultClass.CUDA_ERROR,
        FaultClass.NCCL_ERROR,
        FaultClass.USER_CODE,
        FaultClass.HOST_OOM,
        FaultClass.APP_FAULT,
        FaultClass.NODE_SILENT,
        FaultClass.JOB_HANG,
        FaultClass.NAN_LOSS,
    }
)
_EVICTING = frozenset({Action.EVICT, Action.EVICT_RESET_GPU, Action.INSPECT_HARDWARE})
# Classes that stop the job only as the actions below say: a port down for good or flapping twice
# (an eviction; one tolerated flap is an alert or sympathetic) breaks every collective through it;
# an uncorrectable memory error kills the process that touched it (Xid 48, 95 and the counters
# that rose evict; Xid 94's contained error asks a reattempt), and its peers' watchdogs then see a
# "remote process exited". Retired pages over the limit also evict without stopping anything: a
# peer's fault within suppress_s of one is taken for its echo, and the eviction restarts the job.
STOPPING_WHEN: dict[str, frozenset[str]] = {FaultClass.NIC: _EVICTING, FaultClass.GPU_MEMORY: _EVICTING | {Action.REATTEMPT}}


def stops_job(fault: str, action: str) -> bool:
    """Does a primary of ``fault`` asking ``action`` stop every rank of its job?"""
    return fault in JOB_STOPPING or action in STOPPING_WHEN.get(fault, ())


@dataclass(frozen=True, slots=True)
class Primary:
    onset: float
    ts: float
    nodes: frozenset[str]
    fault: str
    stops_job: bool


class Causes:
    """The primaries of each job lately, and whether a finding is one's consequence."""

    def __init__(self, suppress_s: float = SUPPRESS_S, job_size: Callable[[str], int] | None = None) -> None:
        self.suppress_s = suppress_s
        self.job_size = job_size  # nodes in a job (from the topology), to tell "one node" from "everyone"
        self._primaries: dict[str, list[Primary]] = {}
        self._restarts: dict[str, list[float]] = {}

    def restarted(self, job: str, ts: float) -> None:
        """What went wrong before the restart at ``ts`` explains nothing that starts after it."""
        self._restarts.setdefault(job, []).append(ts)

    def add(
        self, job: str, onset: float, ts: float, nodes: tuple[str, ...], fault: str, action: str, confidence: float = 1.0
    ) -> None:
        """A diagnosis (or a held wave candidate) that may explain what follows: one that asks
        something (neither a record nor an alert, nor a request for stacks), and no slowdown."""
        if (
            action not in (Action.NONE, Action.ALERT)
            and fault != FaultClass.FAIL_SLOW
            and not (action == Action.CAPTURE_STACKS and confidence < 0.5)
        ):
            self._primaries.setdefault(job, []).append(Primary(onset, ts, frozenset(nodes), fault, stops_job(fault, action)))

    def explained(self, f: Finding) -> bool:
        """Is this finding the usual consequence of a primary fault already diagnosed in the job?

        A job-wide consequence (NCCL errors, a hang, a slowdown) is explained by a job-stopping
        primary anywhere in the job, or by any primary on the node it singles out. Blaming most
        of the job singles out nobody, so overlap with such a blame explains nothing."""
        if f.fault not in JOB_CONSEQUENCES and f.fault not in NODE_CONSEQUENCES:
            return False
        onset = f.onset if f.onset is not None else f.ts
        size = self.job_size(f.job) if self.job_size else 0
        specific = bool(f.nodes) and (not size or len(f.nodes) * 2 <= size)
        for p in self._primaries.get(f.job, ()):
            if p.fault == f.fault:
                continue  # the same class is folded or escalated, not suppressed
            if not (p.onset - self.suppress_s <= onset <= p.ts + self.suppress_s):
                continue
            if any(p.onset < r < onset for r in self._restarts.get(f.job, ())):
                continue  # the job restarted in between: a new run, a new fault
            # Overlap means something only when both sides single out a few nodes.
            overlap = (
                specific and bool(p.nodes) and (not size or len(p.nodes) * 2 <= size) and bool(p.nodes.intersection(f.nodes))
            )
            if f.fault in JOB_CONSEQUENCES:
                # A crash stops steps (a hang, NCCL timeouts); it does not make one node slower.
                if overlap or (p.stops_job and f.fault != FaultClass.FAIL_SLOW):
                    return True
            elif overlap and (f.fault == FaultClass.NODE_SILENT or p.fault in HARDWARE):
                return True
        return False

    def prune(self, horizon: float, restart_horizon: float) -> None:
        """Forget primaries last seen before ``horizon`` and restarts before ``restart_horizon``."""
        for job, prims in self._primaries.items():
            if prims and prims[0].ts < horizon:
                self._primaries[job] = [p for p in prims if p.ts >= horizon]
        for job, restarts in self._restarts.items():
            if restarts and restarts[0] < restart_horizon:
                self._restarts[job] = [r for r in restarts if r >= restart_horizon]
