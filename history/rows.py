"""One record → its history row and the job-timeline marks it implies (pure).

An event, a diagnosis, a command, an action record, a machine record or a ground-truth label
becomes the dict of one row of its history table (history.sink.SCHEMAS), or :class:`Unstorable`
says why it cannot (a time that is not finite, a rank out of range, a payload that is no JSON).
The marks are what the record says of its job's state (running, stalled, down, restarting,
ended), from which the report measures ETTR and recovery (docs/history.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any, Iterable, Mapping

import orjson

from faultlens.events.action_record import ActionRecord
from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.events.fleet_record import MachineRecord
from faultlens.events.topology import is_topology

# Faults during which the processes are alive but make no (or slow) progress; other faults take
# the job down until it is restarted.
STALL_FAULTS = frozenset({"job_hang", "fail_slow", "loss_spike"})
# Commands that end the current run of the job; capture_stacks/checkpoint leave it running.
RESTART_ACTIONS = frozenset({"evict", "restart", "reattempt", "rollback"})

_INT32 = 2**31 - 1
_INT64 = 2**63 - 1


class Unstorable(ValueError):
    """A record the history cannot hold (non-finite time, out-of-range rank, unknown type)."""


def _finite(name: str, value: Any) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise Unstorable(f"{name} is not a number: {value!r}") from None
    if not math.isfinite(f):
        raise Unstorable(f"{name} is not finite: {value!r}")
    return f


def _opt_int(value: Any, limit: int) -> int | None:
    """An int payload field, or None when it is missing, not an int, or out of the column's range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    v = int(value)
    return v if -limit - 1 <= v <= limit else None


def _ranks(ranks: Iterable[int]) -> list[int]:
    out = [int(r) for r in ranks]
    bad = [r for r in out if not -_INT32 - 1 <= r <= _INT32]
    if bad:
        raise Unstorable(f"rank {bad[0]} out of range")
    return out


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        # orjson refuses ints beyond 64 bits and odd types; the stdlib writes them (or their text),
        # and storing an odd payload beats losing the event.
        try:
            return json.dumps(value, default=str)
        except (TypeError, ValueError) as exc:
            raise Unstorable(f"payload is not JSON-serialisable: {exc}") from None


def event_row(e: Envelope) -> dict[str, Any]:
    data = e.data
    fault = data.get("fault")
    return {
        "id": e.id, "ts": _finite("ts", e.ts), "job": e.job, "node": e.node, "source": e.source,
        "kind": e.kind, "fault": fault if isinstance(fault, str) else None,
        "rank": _opt_int(data.get("rank"), _INT32), "step": _opt_int(data.get("step"), _INT64),
        "data": _json(dict(data)),
    }


def event_marks(e: Envelope) -> list[dict[str, Any]]:
    if e.source == "train" and e.kind == "step":
        # One running mark per job per second: the timeline needs progress, not every rank's step.
        sec = math.floor(e.ts)
        return [{"id": f"run|{e.job}|{sec}", "job": e.job, "ts": float(sec), "state": "running", "reason": "step"}]
    if e.source == "job" and e.kind == "restart":
        reason = e.data.get("reason")
        return [{"id": f"restart|{e.id}", "job": e.job, "ts": e.ts, "state": "restarting",
                 "reason": f"restart: {reason}" if reason else "restart"}]
    if e.source == "job" and e.kind == "end":
        # Until the job's next start it is not running at all: that time is no wall time of it
        # (a job resubmitted a day later did not spend the day down; queries.ettr).
        reason = e.data.get("reason")
        return [{"id": f"end|{e.id}", "job": e.job, "ts": e.ts, "state": "ended",
                 "reason": f"end: {reason}" if isinstance(reason, str) else "end"}]
    if is_topology(e):
        return [{"id": f"start|{e.id}", "job": e.job, "ts": e.ts, "state": "restarting", "reason": "job start (topology)"}]
    return []


def diagnosis_row(d: Diagnosis) -> dict[str, Any]:
    return {
        "id": d.id, "job": d.job, "ts": _finite("ts", d.ts), "onset": _finite("onset", d.onset), "fault": d.fault,
        "nodes": list(d.nodes), "ranks": _ranks(d.ranks), "group": d.group,
        "confidence": _finite("confidence", d.confidence), "action": d.action, "evidence": list(d.evidence),
        "detail": d.detail, "count": _opt_int(d.count, _INT32),
    }


def diagnosis_marks(d: Diagnosis) -> list[dict[str, Any]]:
    if d.action in ("none", "alert"):
        return []  # recorded only (Xid 63, 92) or a person is told: the job keeps running
    if d.action == "capture_stacks" and d.fault != "job_hang":
        return []  # a fail-slow stack round is asked of a job that still steps
    state = "stalled" if d.fault in STALL_FAULTS else "down"
    return [{"id": f"onset|{d.id}", "job": d.job, "ts": d.onset, "state": state, "reason": f"{d.fault} onset"}]


def command_row(c: Command) -> dict[str, Any]:
    return {
        "id": c.id, "job": c.job, "action": c.action, "nodes": list(c.nodes), "ranks": _ranks(c.ranks),
        "reason": c.reason, "diagnosis_id": c.diagnosis_id, "issued_at": _finite("issued_at", c.issued_at),
        "expires_at": _finite("expires_at", c.expires_at), "params": _json(dict(c.params)),
        "signature": c.signature,
    }


def command_marks(c: Command) -> list[dict[str, Any]]:
    if c.action in RESTART_ACTIONS:
        return [{"id": f"cmd|{c.id}", "job": c.job, "ts": c.issued_at, "state": "restarting", "reason": c.action}]
    if c.action == "stop":
        return [{"id": f"cmd|{c.id}", "job": c.job, "ts": c.issued_at, "state": "down", "reason": "stop"}]
    return []


def action_row(a: ActionRecord) -> dict[str, Any]:
    row = a.to_dict()
    row["ts"] = _finite("ts", a.ts)
    return row


def machine_row(r: MachineRecord) -> dict[str, Any]:
    lemon = r.lemon or {}
    return {"node": r.node, "updated": _finite("updated", r.updated), "state": r.state(), "faults": len(r.faults),
            "counted": len(r.counted()), "failed_checks": sum(1 for c in r.checks if c.get("failed")),
            "evictions": len(r.evictions), "resumes": len(r.resumes), "lemon_rule": lemon.get("rule"),
            "lemon_reason": lemon.get("reason"), "lemon_at": lemon.get("ts"),
            "lemon_diagnoses": [str(i) for i in lemon.get("diagnosis_ids") or []], "record": _json(r.to_dict())}


def label_row(label: Any) -> dict[str, Any]:
    """A ground-truth label (docs/design.md §8) from a dict or a dataclass; its id is a hash of its content."""
    if dataclasses.is_dataclass(label) and not isinstance(label, type):
        label = dataclasses.asdict(label)
    elif hasattr(label, "to_dict"):
        label = label.to_dict()
    if not isinstance(label, Mapping):
        raise Unstorable(f"a label must be an object, got {type(label).__name__}")
    fault = label.get("fault")
    if not isinstance(fault, str) or not fault:
        raise Unstorable("label has no fault class")
    nodes = label.get("nodes") or []
    if isinstance(nodes, str):
        nodes = [nodes]
    onset = label.get("onset")
    canonical = _json({k: label[k] for k in sorted(label, key=str)})
    extra = {k: v for k, v in label.items() if k not in ("job", "fault", "nodes", "ranks", "onset")}
    return {
        "id": hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest(),
        "job": None if label.get("job") is None else str(label["job"]),
        "fault": fault, "nodes": [str(n) for n in nodes], "ranks": _ranks(label.get("ranks") or []),
        "onset": None if onset is None else _finite("onset", onset), "extra": _json(extra),
    }
