"""What the remediation consumer did to the cluster through its actuator, and how it went.

One record per operation (take a node out, requeue the job, bring a node back), on the
``actions`` topic keyed by job, stored by the history (table ``actions``). The outcome is
``ok``, ``error`` (``detail`` says why) or ``skipped`` (observe-only, dry run, or no actuator:
``detail`` says which, so the record still shows what would have been done).
"""

from __future__ import annotations

import hashlib
import math

import msgspec
import orjson

from faultlens.events.envelope import InvalidEvent
from faultlens.events.record import Record, Seconds

# take_out: drain (Slurm) / cordon + taint (Kubernetes); requeue: requeue or signal the job so the
# scheduler restarts it elsewhere; bring_back: resume / uncordon a machine that passed its checks.
OPERATIONS = ("take_out", "requeue", "bring_back")
OUTCOMES = ("ok", "error", "skipped")
# The fault a lemon's drain is filed under (remediation.lemon): a machine out for good, waiting for
# hardware inspection. Its take-out is a second one beside the eviction of the same diagnosis.
HARDWARE_INSPECTION = "hardware_inspection"


class ActionRecord(Record, frozen=True, kw_only=True):
    """One operation, its fields in the order they go on the bus."""

    REQUIRED = ("id", "ts", "job", "op", "actuator", "outcome")
    WHAT = "an action record"

    # Derived from what was asked (not when or how it went): a redelivered decision that acts again
    # makes the same id, so the history keeps the first outcome and does not double the row.
    # An operation done by hand (no diagnosis id) is its own event each time (its ts counts).
    id: str = ""
    ts: Seconds
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
    duration_s: Seconds = 0.0

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
        if type(self.nodes) is not tuple:
            msgspec.structs.force_setattr(self, "nodes", tuple(self.nodes))
        if not self.id:
            # One done by hand (no diagnosis) is its own event each time it is done.
            when = [] if self.diagnosis_id else [self.ts]
            mark = [self.fault] if self.fault == HARDWARE_INSPECTION else []
            basis = orjson.dumps([self.job, self.op, self.actuator, list(self.nodes), self.diagnosis_id, *when, *mark])
            msgspec.structs.force_setattr(self, "id", hashlib.blake2b(basis, digest_size=16).hexdigest())
