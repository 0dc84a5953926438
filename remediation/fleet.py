"""The fleet memory (issue 33): every machine's record across jobs, and the lemons it makes.

The Policy (remediation.policy) tells it what happened — a diagnosis, stop-time check results,
an eviction, a machine brought back — and gets back the machines that have just become lemons, to
drain through the actuator. Records live in memory and, with a store (remediation.fleet_log: the
compacted ``fleet`` topic), outlive a restart and are shared by every remediation member; a
person's ``faultlens nodes resume`` lands there too and is taken in at the next :meth:`refresh`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.fleet_record import MachineRecord
from faultlens.remediation.lemon import LemonConfig, LemonVerdict, classify, judge

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lemon:
    """A machine that has just become a lemon, and the diagnosis (of ``job``) that tipped it."""

    node: str
    job: str
    diagnosis_id: str
    verdict: LemonVerdict


class Fleet:
    def __init__(self, config: LemonConfig | None = None, store: Any = None):
        self.config = config or LemonConfig()
        self.store = store
        self.records: dict[str, MachineRecord] = {}
        if store is not None:
            self.records = dict(store.load())
            log.info("fleet record %s: %d machine(s), %d lemon(s)", store.path, len(self.records), len(self.lemons()))

    # --- reading ---------------------------------------------------------------------------------
    def record(self, node: str) -> MachineRecord:
        return self.records.setdefault(node, MachineRecord(node))

    def lemons(self) -> frozenset[str]:
        return frozenset(n for n, r in self.records.items() if r.lemon is not None)

    def refresh(self, now: float | None = None, mode_of: Callable[[str], str] = lambda job: "act") -> list[Lemon]:
        """Take in what other members and people wrote since, and judge the machines it told us
        new failures of: two members each deciding one job of a machine see only their own
        failure at first; whichever reads the other's first makes the verdict (``mode_of``: a
        job's remediation mode). The machines that became lemons."""
        if self.store is None:
            return []
        now = time.time() if now is None else now
        behind, out = [], []
        for node, theirs in self.store.refresh().items():
            record = self.record(node)
            known = {(f["diagnosis_id"], f["ts"]) for f in record.faults} | {
                (c.get("diagnosis_id"), c["ts"]) for c in record.checks}
            record.merge(theirs)
            new = [f for f in [*theirs.faults, *theirs.checks] if (f.get("counts") or f.get("failed"))
                   and (f.get("diagnosis_id"), f["ts"]) not in known]
            for fact in sorted(new, key=lambda f: f["ts"]):
                if (lemon := self._verdict(node, fact["job"], fact.get("diagnosis_id", ""), now, fact["ts"],
                                           mode_of(fact["job"]))) is not None:
                    out.append(lemon)
                    break
            if record.to_dict() != theirs.to_dict():
                behind.append(node)  # the topic's newest lacks what we know: publish the union
        self._save(behind)
        return out

    # --- what happened ---------------------------------------------------------------------------
    def observe_diagnosis(self, d: Diagnosis, now: float, mode: str = "act") -> list[Lemon]:
        """Record ``d`` against each machine it names; the machines it made lemons (``mode``: the
        remediation mode of its job, kept with a verdict: observe-only drains nothing)."""
        counted = classify(self.config, fault=d.fault, action=d.action, nodes=d.nodes, confidence=d.confidence)
        if len(d.nodes) != 1:
            # A group blame or a stack request names many machines, none of them alone: nothing
            # to hold against any (an eviction it leads to is recorded as one), and one message per
            # machine per stack round of a 1,000-machine job is noise on the topic.
            return []
        changed = []
        for node in d.nodes:
            entry = {"ts": d.ts, "job": d.job, "fault": d.fault, "diagnosis_id": d.id, "action": d.action,
                     "counts": counted.kind, "why": counted.why, "detail": d.detail[:200]}
            if self.record(node).add("faults", entry):
                changed.append(node)
        return self._judged(changed, d.job, d.id, now, d.ts, counted.kind != "", mode)

    def observe_checks(self, job: str, diagnosis_id: str, results: Mapping[str, Mapping[str, Any]],
                       now: float, mode: str = "act") -> list[Lemon]:
        """Stop-time check results (remediation.stop_checks): a failure counts only when a check
        ran and failed; one that could not run (or a refusal) is recorded, not counted."""
        changed, counts, at = [], False, now
        for node, r in results.items():
            conclusive = list(r.get("conclusive", r.get("failed", [])))
            failed = not r.get("passed", False) and bool(conclusive)
            ts = float(r.get("ts", now))
            entry = {"ts": ts, "job": job, "diagnosis_id": diagnosis_id, "failed": failed,
                     "passed": bool(r.get("passed", False)), "checks": conclusive or list(r.get("failed", [])),
                     "detail": str(r.get("detail", ""))[:200]}
            if self.record(node).add("checks", entry):
                changed.append(node)
                counts |= failed
                at = ts if failed else at
        return self._judged(changed, job, diagnosis_id, now, at, counts, mode)

    def evicted(self, job: str, nodes: Iterable[str], diagnosis_id: str, fault: str, now: float) -> None:
        changed = [n for n in nodes if self.record(n).add(
            "evictions", {"ts": now, "job": job, "diagnosis_id": diagnosis_id, "fault": fault, "back_ts": None})]
        self._save(changed)

    def brought_back(self, nodes: Iterable[str], now: float) -> None:
        changed = []
        for n in nodes:
            out = [e for e in self.record(n).evictions if e.get("back_ts") is None]
            for e in out:
                e["back_ts"] = now
            if out:
                self.record(n).updated = max(self.record(n).updated, now)
                changed.append(n)
        self._save(changed)

    def resumed(self, node: str, now: float, by: str, reason: str) -> MachineRecord:
        """A person brought ``node`` back (`faultlens nodes resume`): the lemon verdict is lifted and
        what came before is forgiven (a new lemon needs new failures)."""
        record = self.record(node)
        known = [e["ts"] for name in ("faults", "checks", "lemons", "evictions") for e in getattr(record, name)]
        record.add("resumes", {"ts": now, "by": by, "reason": reason, "lifts": [e["ts"] for e in record.lemons],
                               "forgives": max([now, *known])})
        for e in record.evictions:
            if e.get("back_ts") is None:
                e["back_ts"] = now
        self._save([node])
        return record

    # --- judging ---------------------------------------------------------------------------------
    def _judged(self, changed: list[str], job: str, diagnosis_id: str, now: float, at: float, counts: bool,
                mode: str) -> list[Lemon]:
        """Judge the machines a fact of time ``at`` changed (``now``: the decision's time, the verdict's)."""
        out = [lemon for node in (changed if counts else ())
               if (lemon := self._verdict(node, job, diagnosis_id, now, at, mode)) is not None]
        self._save(changed)
        return out

    def _verdict(self, node: str, job: str, diagnosis_id: str, now: float, at: float, mode: str) -> Lemon | None:
        record = self.record(node)
        if record.lemon is not None:
            return None  # already out; a second verdict would drain it again
        verdict = judge(node, record.faults, record.checks, record.last_resume, at, self.config)
        if verdict is None:
            return None
        record.add("lemons", {"ts": now, "job": job, "diagnosis_id": diagnosis_id, "mode": mode, **verdict.to_dict()})
        log.warning("machine %s is a lemon (%s): %s", node, verdict.rule, verdict.reason)
        return Lemon(node, job, diagnosis_id, verdict)

    def _save(self, nodes: Iterable[str]) -> None:
        nodes = list(dict.fromkeys(nodes))
        if self.store is None or not nodes:
            return
        try:
            self.store.save({n: self.records[n] for n in nodes})
        except OSError as exc:
            # The decision stands; the record is kept in memory and published with the next change.
            log.error("could not publish the fleet record of %s: %s", ",".join(nodes), exc)
