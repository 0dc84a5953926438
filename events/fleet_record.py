"""One machine's record across jobs (the fleet memory of issue 33): the faults diagnosed on it
(with their diagnosis ids and whether they count), its stop-time check outcomes, its evictions
and how they ended, the lemon verdicts and a person's resumes.

Pure data: (de)serialised as one JSON object per machine, the value of the compacted ``fleet``
topic keyed by machine. Two remediation members may each add to a machine's record (its jobs ran
on both): :meth:`MachineRecord.merge` takes the union, so neither member's facts are lost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from faultlens.events.action_record import HARDWARE_INSPECTION as LEMON_STATE
from faultlens.events.envelope import loads

VERSION = 1
# A record keeps this many entries of each list (the newest): a machine logging faults for years
# stays one small message; the lemon rules look at days.
KEEP_ENTRIES = 200
IN_SERVICE, TAKEN_OUT = "in_service", "taken_out"
STATES = (IN_SERVICE, TAKEN_OUT, LEMON_STATE)

# Each list and the fields that identify one of its entries (a redelivered fact is kept once).
_KEYS = {"faults": ("diagnosis_id",), "checks": ("diagnosis_id", "ts"), "evictions": ("diagnosis_id",),
         "lemons": ("ts", "rule"), "resumes": ("ts",)}


def _key(name: str, entry: Mapping[str, Any]) -> tuple:
    return tuple(entry.get(k) for k in _KEYS[name])


@dataclass
class MachineRecord:
    node: str
    faults: list[dict[str, Any]] = field(default_factory=list)  # ts, job, fault, diagnosis_id, counts, why
    checks: list[dict[str, Any]] = field(default_factory=list)  # ts, job, diagnosis_id, failed, detail
    evictions: list[dict[str, Any]] = field(default_factory=list)  # ts, job, diagnosis_id, fault, back_ts
    lemons: list[dict[str, Any]] = field(default_factory=list)  # ts, job, rule, reason, diagnosis_ids, mode
    # ts, by, reason, lifts (the ts of the lemon verdicts it lifted), forgives (what it forgave:
    # facts up to then no longer count). Both are taken from the record as the person saw it, so
    # a clock that differs from remediation's neither voids the resume nor forgives later faults.
    resumes: list[dict[str, Any]] = field(default_factory=list)
    updated: float = 0.0

    # --- derived ---------------------------------------------------------------------------------
    @property
    def last_resume(self) -> float:
        """Facts up to this time were forgiven by a person's resume."""
        return max((r.get("forgives", r["ts"]) for r in self.resumes), default=float("-inf"))

    @property
    def lemon(self) -> dict[str, Any] | None:
        """The lemon verdict in force: the newest, unless a person's resume lifted it."""
        lifted = {t for r in self.resumes for t in r.get("lifts", ())}
        newest = max(self.lemons, key=lambda e: e["ts"], default=None)
        return newest if newest is not None and newest["ts"] not in lifted else None

    def state(self) -> str:
        if self.lemon is not None:
            return LEMON_STATE
        last = max(self.evictions, key=lambda e: e["ts"], default=None)
        if last is not None and last.get("back_ts") is None and last["ts"] > self.last_resume:
            return TAKEN_OUT
        return IN_SERVICE

    def eviction_outcomes(self, now: float, clean_s: float) -> list[dict[str, Any]]:
        """Each eviction with how it ended: ``out`` (not back yet), ``failed_again`` (a counted
        fault after it came back), ``ran_clean`` (back ``clean_s`` without one) or ``back``."""
        out = []
        back_at = [*(e.get("back_ts") for e in self.evictions), *(r["ts"] for r in self.resumes)]
        for e in sorted(self.evictions, key=lambda e: e["ts"]):
            back = e.get("back_ts")
            if back is None:  # a person's resume after it brings it back too
                back = min((t for t in back_at if t is not None and t > e["ts"]), default=None)
            later = [f for f in self.faults if f.get("counts") and back is not None and f["ts"] > back]
            outcome = ("out" if back is None else "failed_again" if later
                       else "ran_clean" if now - back >= clean_s else "back")
            out.append({**e, "back_ts": back, "outcome": outcome})
        return out

    def counted(self) -> list[dict[str, Any]]:
        return [f for f in self.faults if f.get("counts")]

    # --- changing --------------------------------------------------------------------------------
    def add(self, name: str, entry: dict[str, Any]) -> bool:
        """Append ``entry`` to list ``name`` unless it is there already; whether it was new."""
        entries = getattr(self, name)
        if any(_key(name, e) == _key(name, entry) for e in entries):
            return False
        entries.append(entry)
        entries.sort(key=lambda e: e["ts"])
        del entries[:-KEEP_ENTRIES]
        self.updated = max(self.updated, entry["ts"])
        return True

    def merge(self, other: "MachineRecord") -> bool:
        """Take in what ``other`` (the same machine, written by another member) knows; whether
        anything was new. A return noted on either side (``back_ts``) is kept."""
        changed = False
        for name in _KEYS:
            mine = {_key(name, e): e for e in getattr(self, name)}
            for entry in getattr(other, name):
                here = mine.get(_key(name, entry))
                if here is None:
                    changed |= self.add(name, dict(entry))
                elif name == "evictions" and here.get("back_ts") is None and entry.get("back_ts") is not None:
                    here["back_ts"] = entry["back_ts"]
                    changed = True
        self.updated = max(self.updated, other.updated)
        return changed

    # --- (de)serialising -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"version": VERSION, "node": self.node, "updated": self.updated, "state": self.state(),
                **{name: [dict(e) for e in getattr(self, name)] for name in _KEYS}}

    def encode(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes | str | None) -> "MachineRecord":
        """One message of the ``fleet`` topic; ValueError (InvalidEvent) for anything else."""
        return cls.from_dict(loads(raw))

    @classmethod
    def from_dict(cls, data: Any) -> "MachineRecord":
        """Raises ValueError for anything :meth:`to_dict` does not write."""
        if not isinstance(data, Mapping) or data.get("version") != VERSION:
            raise ValueError(f"not a version-{VERSION} fleet record")
        node = data.get("node")
        if not isinstance(node, str) or not node:
            raise ValueError(f"fleet record 'node' must be a non-empty string, got {node!r}")
        lists = {}
        for name in _KEYS:
            value = data.get(name, [])
            if not isinstance(value, list) or not all(
                    isinstance(e, Mapping) and isinstance(e.get("ts"), (int, float)) and not isinstance(e.get("ts"), bool)
                    for e in value):
                raise ValueError(f"fleet record {node}: {name!r} must be a list of objects with a numeric ts")
            lists[name] = [dict(e) for e in value]
        updated = data.get("updated", 0.0)
        if not isinstance(updated, (int, float)) or isinstance(updated, bool):
            raise ValueError(f"fleet record {node}: 'updated' must be a number")
        return cls(node, updated=float(updated), **lists)
