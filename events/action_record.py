"""What the remediation consumer did to the cluster through its actuator, and how it went.

One record per operation (take a node out, requeue the job, bring a node back), on the
``actions`` topic keyed by job, stored by the history (table ``actions``). The outcome is
``ok``, ``error`` (``detail`` says why) or ``skipped`` (observe-only, dry run, or no actuator:
``detail`` says which, so the record still shows what would have been done).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Mapping

import orjson

from faultlens.events.envelope import InvalidEvent, loads, require_fields

# take_out: drain (Slurm) / cordon + taint (Kubernetes); requeue: requeue or signal the job so the
# scheduler restarts it elsewhere; bring_back: resume / uncordon a machine that passed its checks.
OPERATIONS = ("take_out", "requeue", "bring_back")
OUTCOMES = ("ok", "error", "skipped")
# The fault a lemon's drain is filed under (remediation.lemon): a machine out for good, waiting for
# hardware inspection. Its take-out is a second one beside the eviction of the same diagnosis.
HARDWARE_INSPECTION = "hardware_inspection"


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionRecord:
    ts: float
    job: str
    op: str
    actuator: str
    nodes: tuple[str, ...] = ()
    diagnosis_id: str = ""
    fault: str = ""
    reason: str = ""
    mode: str = ""  # the remediation mode of the job: observe, dry_run or act
    outcome: str = "ok"
    detail: str = ""
    duration_s: float = 0.0
    # Derived from what was asked (not when or how it went): a redelivered decision that acts again
    # makes the same id, so the history keeps the first outcome and does not double the row.
    # An operation done by hand (no diagnosis id) is its own event each time (its ts counts).
    id: str = ""

    def __post_init__(self) -> None:
        if self.op not in OPERATIONS:
            raise InvalidEvent("op", f"unknown operation {self.op!r} (one of {', '.join(OPERATIONS)})")
        if self.outcome not in OUTCOMES:
            raise InvalidEvent("outcome", f"unknown outcome {self.outcome!r} (one of {', '.join(OUTCOMES)})")
        if not isinstance(self.job, str) or not self.job:
            raise InvalidEvent("job", "must be a non-empty string")
        for name in ("ts", "duration_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise InvalidEvent(name, f"must be a finite number, got {v!r}")
        if not self.id:
            # One done by hand (no diagnosis) is its own event each time it is done.
            when = [] if self.diagnosis_id else [self.ts]
            mark = [self.fault] if self.fault == HARDWARE_INSPECTION else []
            basis = orjson.dumps([self.job, self.op, self.actuator, list(self.nodes), self.diagnosis_id, *when, *mark])
            object.__setattr__(self, "id", hashlib.blake2b(basis, digest_size=16).hexdigest())

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "ts": self.ts, "job": self.job, "op": self.op, "actuator": self.actuator,
                "nodes": list(self.nodes), "diagnosis_id": self.diagnosis_id, "fault": self.fault,
                "reason": self.reason, "mode": self.mode, "outcome": self.outcome, "detail": self.detail,
                "duration_s": self.duration_s}

    def encode(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> "ActionRecord":
        obj = require_fields(obj, ("id", "ts", "job", "op", "actuator", "outcome"), "an action record")
        nodes = obj.get("nodes") or []
        if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
            raise InvalidEvent("nodes", f"must be a list of strings, got {nodes!r}")
        text = {}
        for name in ("id", "actuator", "diagnosis_id", "fault", "reason", "mode", "detail"):
            v = obj.get(name, "")
            if not isinstance(v, str):
                raise InvalidEvent(name, f"must be a string, got {type(v).__name__}")
            text[name] = v
        return cls(ts=obj["ts"], job=obj["job"], op=obj["op"], outcome=obj["outcome"], nodes=tuple(nodes),
                   duration_s=obj.get("duration_s", 0.0), **text)

    @classmethod
    def decode(cls, raw: bytes | str | None) -> "ActionRecord":
        return cls.from_dict(loads(raw))
