"""Folding, sympathetic suppression and escalation: findings in, diagnosis records out.

* Folding: one diagnosis per (job, fault, nodes, entity) while the finding keeps recurring with
  gaps shorter than ``window_s``; later copies only raise its ``count``. When the episode goes
  quiet (or at flush) a record with the SAME id and the final count is emitted again if the
  count grew, so consumers that key by id (remediation, history) upsert instead of acting twice.
* Holding: an application fault or a CUDA error waits ``hold_s`` of event time before it is
  judged, because its hardware cause (Xid 95 beside Xid 94, a lost GPU) may log in the same second.
* One verdict per machine and fault: a machine's further findings of the fault it is being
  evicted for (the CUDA error and the ECC counters beside an Xid 48, another GPU's) fold into
  that verdict while it is open, whatever their entity, when they ask no more than it does;
  one that asks more (a GPU reset after a plain eviction) is a verdict of its own.
* Suppression (diagnosis/engine/dedup_causes.py): a finding marked sympathetic (Xid 45, Xid 43
  after 13s) is never blamed; faults that are the usual *consequence* of another (NCCL timeouts,
  a hang, a slowdown, a silent node after its GPU vanished) are dropped while a primary fault of
  the job explains them.
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

from faultlens.diagnosis.engine.dedup_causes import JOB_CONSEQUENCES, SUPPRESS_S, Causes
from faultlens.diagnosis.rules.base import Finding
from faultlens.events.diagnosis_record import Action, Diagnosis

log = logging.getLogger(__name__)

WINDOW_S = 300.0
# Faults that often arrive together with their cause in the same second (Xid 94 beside Xid 95, a
# CUDA error beside a lost GPU; a peer's "connection closed" beside the rank that crashed): held
# this long in event time, so the cause is seen first.
HELD = frozenset({"app_fault", "cuda_error", "nccl_error"})
HOLD_S = 2.0
# Faults that never escalate to eviction: the machine is not the problem.
NO_EVICT = frozenset({"user_code", "nan_loss", "loss_spike", "unknown", "agent_blind"})
_SOFT_ACTIONS = frozenset({"reattempt", "restart", "stop_time_diagnosis", "rollback"})
# What a machine's verdict asks of it, weakest first; anything else asks less than an eviction.
_MACHINE_STRENGTH: dict[str, int] = {Action.EVICT: 1, Action.EVICT_RESET_GPU: 2, Action.INSPECT_HARDWARE: 3}


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
    # Details of the machine's other findings folded in (other entities), shown when it closes.
    also: list[str] = field(default_factory=list)


class Dedup:
    def __init__(
        self,
        window_s: float = WINDOW_S,
        suppress_s: float = SUPPRESS_S,
        job_size: Callable[[str], int] | None = None,
        hold_s: float = HOLD_S,
    ) -> None:
        self.hold_s = hold_s
        self.window_s = window_s
        self.suppress_s = suppress_s
        self.causes = Causes(suppress_s, job_size)
        self._open: dict[tuple, _Episode] = {}
        # (job, fault, node) → the key of that machine's open eviction for the fault (an episode
        # other entities' findings of the machine fold into; it is in _open under their keys too).
        self._machine: dict[tuple[str, str, str], tuple] = {}
        self._episodes: Counter = Counter()
        self._generation: Counter = Counter()
        self._held: list[Finding] = []
        self.stats: Counter = Counter()

    # --- inputs -----------------------------------------------------------------------------
    def restarted(self, job: str, ts: float | None = None) -> None:
        """The job was restarted: a fault seen before that shows up again is a repeat, and what
        went wrong before the restart explains nothing that starts after it."""
        self._generation[job] += 1
        if ts is not None:
            self.causes.restarted(job, ts)

    def admit_diagnosis(self, diagnosis: Diagnosis) -> list[Diagnosis]:
        """Another detector's finished diagnosis (hang, fail-slow blame): folded and suppressed like a
        finding, but emitted with its own id so requests and answers stay linked."""
        if diagnosis.action == "capture_stacks" and diagnosis.confidence < 0.5:
            return [diagnosis]  # a request for evidence, not a finding: never folded away
        finding = Finding(
            job=diagnosis.job,
            ts=diagnosis.ts,
            onset=diagnosis.onset,
            fault=diagnosis.fault,
            action=diagnosis.action,
            nodes=diagnosis.nodes,
            ranks=diagnosis.ranks,
            group=diagnosis.group,
            entity=f"{diagnosis.group or ''}:{diagnosis.action}",
            confidence=diagnosis.confidence,
            evidence=diagnosis.evidence,
            detail=diagnosis.detail,
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
        if self.causes.explained(finding):
            self.stats["consequence"] += 1
            return []
        key = (finding.job, finding.fault, finding.nodes, finding.entity)
        gen = self._generation[finding.job]
        ep = self._open.get(key)
        if ep is not None and ep.generation == gen and finding.ts - ep.last_ts <= self.window_s:
            self._fold(ep, finding)
            return []
        prior = self._episodes[key]
        action = escalate(finding.fault, finding.action, prior)
        out = self._close(key, ep) if ep is not None else []  # its last episode, ended: its final count
        if original is None and self._fold_machine(finding, key, action, gen):
            return out
        detail = finding.detail
        if action != finding.action:
            detail = f"{detail} [episode {prior + 1} of this fault here: {finding.action} → {action}]"
        if original is not None:
            diag = msgspec.structs.replace(original, action=Action(action), detail=detail)
        else:
            diag = finding.to_diagnosis(action=action, detail=detail)
        self._open[key] = _Episode(diag, finding.ts, 1, 1, gen, list(finding.evidence))
        self._episodes[key] += 1
        if original is None and len(diag.nodes) == 1 and action in _MACHINE_STRENGTH:
            self._machine[(diag.job, str(diag.fault), diag.nodes[0])] = key
        self.causes.add(diag.job, diag.onset, diag.ts, diag.nodes, diag.fault, diag.action, diag.confidence)
        self.stats["emitted"] += 1
        out.append(diag)
        return out

    def _fold(self, ep: _Episode, finding: Finding) -> None:
        ep.count += 1
        ep.last_ts = max(ep.last_ts, finding.ts)
        if len(ep.evidence) < 32:
            ep.evidence.extend(finding.evidence[: 32 - len(ep.evidence)])
        self.stats["folded"] += 1

    def _fold_machine(self, finding: Finding, key: tuple, action: str, gen: int) -> bool:
        """Fold a finding about one machine into the eviction its machine has open for the same
        fault (another GPU, the CUDA line or the counters of one ECC error: one verdict), when it
        asks no more of the machine. Its own entity counts an episode, so it escalates as before."""
        if len(finding.nodes) != 1:
            return False
        mkey = self._machine.get((finding.job, finding.fault, finding.nodes[0]))
        ep = self._open.get(mkey) if mkey is not None else None
        if ep is None or ep.generation != gen or finding.ts - ep.last_ts > self.window_s:
            return False
        open_strength = _MACHINE_STRENGTH.get(ep.diagnosis.action, 0)
        if not open_strength or _MACHINE_STRENGTH.get(action, 0) > open_strength:
            return False
        self._fold(ep, finding)
        if len(ep.also) < 4 and finding.detail and finding.detail not in ep.also:
            ep.also.append(finding.detail)
        self._open[key] = ep
        self._episodes[key] += 1
        self.stats["folded_machine"] += 1
        return True

    def note_held(self, f: Finding) -> None:
        """A finding another stage holds before it is judged (a wave candidate, diagnosis/engine/waves.py)
        explains its consequences from its own time on, as it would have if judged at once: a node
        that stops beating after its GPU's NVLink failed is that failure's echo, and a port down
        for good stops the job's collectives, wave or not (a wave is one cause: what it stops is
        its echo too)."""
        if not f.sympathetic:
            self.causes.add(
                f.job, f.onset if f.onset is not None else f.ts, f.ts, f.nodes, str(f.fault), str(f.action), f.confidence
            )

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
        # Causes before consequences, so Causes.explained sees the primary already admitted.
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
        self._machine = {m: k for m, k in self._machine.items() if k in self._open}
        horizon = now - self.suppress_s - self.window_s
        self.causes.prune(horizon, horizon - self.window_s)
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
        final = msgspec.structs.replace(ep.diagnosis, count=ep.count, evidence=tuple(ep.evidence))
        if ep.also:
            final = msgspec.structs.replace(final, detail=f"{final.detail}; on this machine too: {'; '.join(ep.also)}")
        return [final]
