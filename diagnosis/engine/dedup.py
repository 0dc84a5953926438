"""Folding, sympathetic suppression and escalation: findings in, diagnosis records out.

* Folding: one diagnosis per (job, fault, nodes, entity) while the finding keeps recurring with
  gaps shorter than ``window_s``; later copies only raise its ``count``. When the episode goes
  quiet (or at flush) a record with the SAME id and the final count is emitted again if the
  count grew, so consumers that key by id (remediation, history) upsert instead of acting twice.
* Holding: an application fault or a CUDA error waits ``hold_s`` of event time before it is
  judged, because its hardware cause (Xid 95 beside Xid 94, a lost GPU) may log in the same second.
* Suppression: a finding marked sympathetic (Xid 45, Xid 43 after 13s) is never blamed; faults
  that are the usual *consequence* of another (NCCL timeouts, a hang, a slowdown, a silent
  node after its GPU vanished) are dropped while a primary fault of the job explains them.
* Escalation: the same (job, fault, nodes, entity) coming back in a new episode, or after the
  job restarted, climbs the ladder: reattempt / restart / stop-time diagnosis → evict, and an
  eviction that did not cure it → inspect_hardware.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import msgspec

from faultlens.diagnosis.rules.base import Finding
from faultlens.events.diagnosis_record import Action, Diagnosis

log = logging.getLogger(__name__)

WINDOW_S = 300.0
# A consequence starts when its cause does: a stall's onset is the last step, an NCCL incident's
# the start of the stuck collective, a silent node's its last beat. Within this slack of the
# primary it is the primary's echo; later it is a fault of its own.
SUPPRESS_S = 60.0
# Consequences of a crash anywhere in the job: every peer waits, steps stop, the job slows.
JOB_CONSEQUENCES = frozenset({"nccl_error", "job_hang", "fail_slow"})
# Consequences of a fault on the same node: a node whose GPU or kernel died stops beating, and
# CUDA calls on a GPU that vanished or lost its memory fail.
NODE_CONSEQUENCES = frozenset({"node_silent", "cuda_error", "app_fault"})
HARDWARE = frozenset({"gpu_lost", "gpu_memory", "gpu_reset_required", "nvlink", "kernel"})
# Primaries that stop every rank of the job (a process dies, a collective breaks, steps stop):
# whatever NCCL timeouts or stalls follow anywhere in the job are their echo.
JOB_STOPPING = frozenset({"gpu_lost", "cuda_error", "nccl_error", "user_code", "host_oom", "app_fault",
                          "node_silent", "job_hang", "nan_loss"})
# Faults that often arrive together with their cause in the same second (Xid 94 beside Xid 95, a
# CUDA error beside a lost GPU; a peer's "connection closed" beside the rank that crashed): held
# this long in event time, so the cause is seen first.
HELD = frozenset({"app_fault", "cuda_error", "nccl_error"})
HOLD_S = 2.0
# Faults that never escalate to eviction: the machine is not the problem.
NO_EVICT = frozenset({"user_code", "nan_loss", "loss_spike", "unknown", "agent_blind"})
_SOFT_ACTIONS = frozenset({"reattempt", "restart", "stop_time_diagnosis", "rollback"})


def escalate(fault: str, action: str, prior: int) -> str:
    """The action for the ``prior + 1``-th episode of the same fault on the same nodes."""
    if prior <= 0 or fault in NO_EVICT or action in ("none", "capture_stacks"):
        return action
    if action in _SOFT_ACTIONS:
        return "evict"
    if action in ("evict", "evict_reset_gpu"):
        return "inspect_hardware"
    return action


@dataclass(slots=True)
class _Episode:
    diagnosis: Diagnosis
    last_ts: float
    count: int
    emitted_count: int
    generation: int
    evidence: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Primary:
    onset: float
    ts: float
    nodes: frozenset[str]
    fault: str


class Dedup:
    def __init__(self, window_s: float = WINDOW_S, suppress_s: float = SUPPRESS_S,
                 job_size: Callable[[str], int] | None = None, hold_s: float = HOLD_S) -> None:
        self.hold_s = hold_s
        self.job_size = job_size  # nodes in a job (from the topology), to tell "one node" from "everyone"
        self.window_s = window_s
        self.suppress_s = suppress_s
        self._open: dict[tuple, _Episode] = {}
        self._episodes: Counter = Counter()
        self._generation: Counter = Counter()
        self._primaries: dict[str, list[_Primary]] = {}
        self._restarts: dict[str, list[float]] = {}
        self._held: list[Finding] = []
        self.stats: Counter = Counter()

    # --- inputs -----------------------------------------------------------------------------
    def restarted(self, job: str, ts: float | None = None) -> None:
        """The job was restarted: a fault seen before that shows up again is a repeat, and what
        went wrong before the restart explains nothing that starts after it."""
        self._generation[job] += 1
        if ts is not None:
            self._restarts.setdefault(job, []).append(ts)

    def admit_diagnosis(self, diagnosis: Diagnosis) -> list[Diagnosis]:
        """Another detector's finished diagnosis (hang, fail-slow blame): folded and suppressed like a
        finding, but emitted with its own id so requests and answers stay linked."""
        if diagnosis.action == "capture_stacks" and diagnosis.confidence < 0.5:
            return [diagnosis]  # a request for evidence, not a finding: never folded away
        finding = Finding(
            job=diagnosis.job, ts=diagnosis.ts, onset=diagnosis.onset, fault=diagnosis.fault,
            action=diagnosis.action, nodes=diagnosis.nodes, ranks=diagnosis.ranks, group=diagnosis.group,
            entity=f"{diagnosis.group or ''}:{diagnosis.action}", confidence=diagnosis.confidence,
            evidence=diagnosis.evidence, detail=diagnosis.detail,
        )
        return self.admit(finding, diagnosis)

    def admit(self, finding: Finding, original: Diagnosis | None = None) -> list[Diagnosis]:
        if finding.sympathetic:
            self.stats["sympathetic"] += 1
            return []
        if original is None and (finding.hold_s > 0 or (finding.fault in HELD and self.hold_s > 0)):
            self._held.append(finding)  # decided on the next tick, once its cause may have arrived
            return []
        return self._admit(finding, original)

    def _admit(self, finding: Finding, original: Diagnosis | None = None) -> list[Diagnosis]:
        if finding.sympathetic:
            self.stats["sympathetic"] += 1
            return []
        if self._explained(finding):
            self.stats["consequence"] += 1
            return []
        key = (finding.job, finding.fault, finding.nodes, finding.entity)
        gen = self._generation[finding.job]
        ep = self._open.get(key)
        if ep is not None and ep.generation == gen and finding.ts - ep.last_ts <= self.window_s:
            ep.count += 1
            ep.last_ts = max(ep.last_ts, finding.ts)
            if len(ep.evidence) < 32:
                ep.evidence.extend(finding.evidence[: 32 - len(ep.evidence)])
            self.stats["folded"] += 1
            return []
        prior = self._episodes[key]
        action = escalate(finding.fault, finding.action, prior)
        detail = finding.detail
        if action != finding.action:
            detail = f"{detail} [episode {prior + 1} of this fault here: {finding.action} → {action}]"
        if original is not None:
            diag = msgspec.structs.replace(original, action=Action(action), detail=detail)
        else:
            diag = finding.to_diagnosis(action=action, detail=detail)
        out = self._close(key, ep) if ep is not None else []
        self._open[key] = _Episode(diag, finding.ts, 1, 1, gen, list(finding.evidence))
        self._episodes[key] += 1
        self._primary(diag.job, diag.onset, diag.ts, diag.nodes, diag.fault, diag.action, diag.confidence)
        self.stats["emitted"] += 1
        out.append(diag)
        return out

    def _primary(self, job: str, onset: float, ts: float, nodes: tuple[str, ...], fault: str, action: str,
                 confidence: float = 1.0) -> None:
        if action not in ("none", "alert") and fault != "fail_slow" and not (
                action == "capture_stacks" and confidence < 0.5):
            self._primaries.setdefault(job, []).append(_Primary(onset, ts, frozenset(nodes), fault))

    def note_held(self, f: Finding) -> None:
        """A finding another stage holds before it is judged (a wave candidate, diagnosis/engine/waves.py)
        explains its consequences from its own time on, as it would have if judged at once: a node
        that stops beating after its GPU's NVLink failed is that failure's echo, wave or not."""
        if not f.sympathetic:
            self._primary(f.job, f.onset if f.onset is not None else f.ts, f.ts, f.nodes, str(f.fault), str(f.action),
                          f.confidence)

    def _explained(self, f: Finding) -> bool:
        """Is this finding the usual consequence of a primary fault already diagnosed in the job?

        A job-wide consequence (NCCL errors, a hang, a slowdown) is explained by a crash-type
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
            overlap = specific and bool(p.nodes) and (not size or len(p.nodes) * 2 <= size) \
                and bool(p.nodes.intersection(f.nodes))
            if f.fault in JOB_CONSEQUENCES:
                # A crash stops steps (a hang, NCCL timeouts); it does not make one node slower.
                if overlap or (p.fault in JOB_STOPPING and f.fault != "fail_slow"):
                    return True
            elif overlap and (f.fault == "node_silent" or p.fault in HARDWARE):
                return True
        return False

    # --- time -------------------------------------------------------------------------------
    def _release(self, now: float | None) -> list[Diagnosis]:
        out: list[Diagnosis] = []
        if not self._held:
            return out
        due: list[Finding] = []
        keep: list[Finding] = []
        for f in self._held:
            (due if now is None or now - f.ts >= max(self.hold_s, f.hold_s) else keep).append(f)
        # A job-wide consequence (an NCCL error) waits while a possible cause in its job is still
        # held: the survivor's "connection closed by peer" can log before the dying rank's CUDA
        # error is due, and must not be judged first.
        pending_causes = {f.job for f in keep if f.fault not in JOB_CONSEQUENCES}
        keep += [f for f in due if f.fault in JOB_CONSEQUENCES and f.job in pending_causes]
        due = [f for f in due if not (f.fault in JOB_CONSEQUENCES and f.job in pending_causes)]
        # Causes before consequences, so _explained sees the primary already admitted.
        due.sort(key=lambda f: f.fault in JOB_CONSEQUENCES)
        for f in due:
            # Decided now, not when first seen: the hold is part of the detection latency.
            onset = f.onset if f.onset is not None else f.ts
            out.extend(self._admit(dataclasses.replace(f, ts=now, onset=onset) if now is not None else f))
        self._held = keep
        return out

    def tick(self, now: float) -> list[Diagnosis]:
        out: list[Diagnosis] = self._release(now)
        for key in [k for k, ep in self._open.items() if now - ep.last_ts > self.window_s]:
            out.extend(self._close(key, self._open.pop(key)))
        horizon = now - self.suppress_s - self.window_s
        for job, prims in self._primaries.items():
            if prims and prims[0].ts < horizon:
                self._primaries[job] = [p for p in prims if p.ts >= horizon]
        for job, restarts in self._restarts.items():
            if restarts and restarts[0] < horizon - self.window_s:
                self._restarts[job] = [r for r in restarts if r >= horizon - self.window_s]
        return out

    def flush(self) -> list[Diagnosis]:
        out: list[Diagnosis] = self._release(None)
        for key in list(self._open):
            out.extend(self._close(key, self._open.pop(key)))
        return out

    def _close(self, key: tuple, ep: _Episode) -> list[Diagnosis]:
        if ep.count <= ep.emitted_count:
            return []
        ep.emitted_count = ep.count
        return [msgspec.structs.replace(ep.diagnosis, count=ep.count, evidence=tuple(ep.evidence))]
