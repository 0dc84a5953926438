"""Replay tests for users: a trace's expected verdicts (``TRACE.expect.jsonl``) and how today's
diagnoses differ from them.

A verdict is what a person reviewing an incident cares about: which job, which fault class,
which machines, what the first action is, and roughly when it began (an onset window, so a
detector that finds the first evidence a second earlier is not a regression). Only acting
diagnoses are verdicts: record-only ones (action ``none``) and requests for stacks
(``capture_stacks``, whose follow-up only exists live) are not; an ``alert`` for a person is.

Pure functions over :class:`~events.diagnosis_record.Diagnosis` records; reading and writing the
file are the two small edges at the bottom.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import orjson

from faultlens.diagnosis.replay.scoring import EVICTING
from faultlens.events.diagnosis_record import ACTIONS, FAULT_CLASSES, Diagnosis
from faultlens.events.jsonl import json_lines

EXPECT_SUFFIX = ".expect.jsonl"
NOT_VERDICTS = frozenset({"none", "capture_stacks"})
ONSET_SLACK_S = 60.0
FORMAT_VERSION = 1
VERDICT_KEYS = ("job", "fault", "nodes", "action", "onset_from", "onset_to")


class ExpectError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Verdict:
    job: str
    fault: str
    nodes: tuple[str, ...]
    action: str
    onset_from: float
    onset_to: float

    def holds_onset(self, onset: float) -> bool:
        return self.onset_from <= onset <= self.onset_to

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "fault": self.fault, "nodes": list(self.nodes), "action": self.action,
                "onset_from": round(self.onset_from, 3), "onset_to": round(self.onset_to, 3)}


@dataclass(frozen=True, slots=True)
class Change:
    expected: Verdict
    found: Diagnosis
    what: tuple[str, ...]  # "nodes", "action", "onset"

    def to_dict(self) -> dict[str, Any]:
        return {"expected": self.expected.to_dict(), "found": found_dict(self.found), "changed": list(self.what)}


@dataclass(frozen=True)
class CheckResult:
    expected: tuple[Verdict, ...]
    matched: tuple[tuple[Verdict, Diagnosis], ...] = ()
    missing: tuple[Verdict, ...] = ()
    extra: tuple[Diagnosis, ...] = ()
    changed: tuple[Change, ...] = ()
    # (job, node) pairs an evicting diagnosis named that no expected evicting verdict of the job names:
    # the worst outcome, so it is listed on its own even though it is also an extra or a change.
    healthy_evicted: tuple[tuple[str, str], ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.changed)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "expected": len(self.expected), "matched": len(self.matched),
                "missing": [v.to_dict() for v in self.missing], "extra": [found_dict(d) for d in self.extra],
                "changed": [c.to_dict() for c in self.changed],
                "healthy_evicted": [{"job": j, "node": n} for j, n in self.healthy_evicted]}


def is_verdict(d: Diagnosis) -> bool:
    return d.action not in NOT_VERDICTS


def found_dict(d: Diagnosis) -> dict[str, Any]:
    return {"job": d.job, "fault": d.fault, "nodes": sorted(d.nodes), "action": d.action, "onset": round(d.onset, 3),
            "decided": round(d.ts, 3), "confidence": d.confidence, "detail": d.detail, "id": d.id}


def verdicts_of(found: Iterable[Diagnosis], *, slack_s: float = ONSET_SLACK_S) -> list[Verdict]:
    """Today's acting diagnoses as verdicts, each onset widened by ``slack_s`` either side."""
    out = [Verdict(d.job, d.fault, tuple(sorted(d.nodes)), d.action, d.onset - slack_s, d.onset + slack_s)
           for d in found if is_verdict(d)]
    return sorted(out, key=lambda v: (v.job, v.onset_from, v.fault, v.nodes))


def compare(expected: Iterable[Verdict], found: Iterable[Diagnosis]) -> CheckResult:
    """Pair expected verdicts with today's acting diagnoses, most alike first.

    Three passes, each over what the last left: the same in every respect; the same job and class
    with the onset in the window (a change of nodes or action); the same job, class, nodes and
    action with the onset moved (a change of onset). What is left over is missing or extra.
    """
    expected = tuple(expected)
    left = [d for d in found if is_verdict(d)]
    todo = list(expected)
    matched: list[tuple[Verdict, Diagnosis]] = []
    changed: list[Change] = []

    def take(v: Verdict, pred) -> Diagnosis | None:
        candidates = [d for d in left if d.job == v.job and d.fault == v.fault and pred(v, d)]
        if not candidates:
            return None
        mid = (v.onset_from + v.onset_to) / 2
        best = min(candidates, key=lambda d: abs(d.onset - mid))
        left.remove(best)
        return best

    def same(v: Verdict, d: Diagnosis) -> bool:
        return v.holds_onset(d.onset) and tuple(sorted(d.nodes)) == v.nodes and d.action == v.action

    def in_window(v: Verdict, d: Diagnosis) -> bool:
        return v.holds_onset(d.onset)

    def moved(v: Verdict, d: Diagnosis) -> bool:
        return tuple(sorted(d.nodes)) == v.nodes and d.action == v.action

    for pred in (same, in_window, moved):
        still = []
        for v in todo:
            d = take(v, pred)
            if d is None:
                still.append(v)
            elif pred is same:
                matched.append((v, d))
            else:
                what = tuple(k for k, differs in (("nodes", tuple(sorted(d.nodes)) != v.nodes),
                                                  ("action", d.action != v.action),
                                                  ("onset", not v.holds_onset(d.onset))) if differs)
                changed.append(Change(v, d, what))
        todo = still

    expected_evicted: dict[str, set[str]] = {}
    for v in expected:
        if v.action in EVICTING:
            expected_evicted.setdefault(v.job, set()).update(v.nodes)
    healthy = sorted({(d.job, n) for d in [*left, *(c.found for c in changed)] if d.action in EVICTING
                      for n in d.nodes if n not in expected_evicted.get(d.job, set())})
    return CheckResult(expected=expected, matched=tuple(matched), missing=tuple(todo),
                       extra=tuple(sorted(left, key=lambda d: (d.job, d.onset))), changed=tuple(changed),
                       healthy_evicted=tuple(healthy))


# --- the file ---------------------------------------------------------------------------------------

def expect_path(trace: str | os.PathLike[str]) -> Path:
    """``TRACE.expect.jsonl``: the literal trace path with ``.expect.jsonl`` appended (as labels are)."""
    return Path(str(trace) + EXPECT_SUFFIX)


def trace_of(expect: str | os.PathLike[str]) -> Path:
    text = str(expect)
    if not text.endswith(EXPECT_SUFFIX):
        raise ExpectError(f"{expect}: an expect file's name ends in {EXPECT_SUFFIX}")
    return Path(text[: -len(EXPECT_SUFFIX)])


def _verdict(obj: Any, where: str) -> Verdict:
    if not isinstance(obj, dict) or any(k not in obj for k in VERDICT_KEYS):
        raise ExpectError(f"{where}: a verdict needs {', '.join(VERDICT_KEYS)}")
    if obj["fault"] not in FAULT_CLASSES:
        raise ExpectError(f"{where}: unknown fault class {obj['fault']!r}")
    if obj["action"] not in ACTIONS:
        raise ExpectError(f"{where}: unknown action {obj['action']!r}")
    nodes = obj["nodes"]
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        raise ExpectError(f"{where}: nodes must be a list of node names")
    try:
        lo, hi = float(obj["onset_from"]), float(obj["onset_to"])
    except (TypeError, ValueError):
        raise ExpectError(f"{where}: onset_from and onset_to must be numbers (seconds since the epoch)") from None
    if lo > hi:
        raise ExpectError(f"{where}: onset_from is after onset_to")
    return Verdict(str(obj["job"]), obj["fault"], tuple(sorted(nodes)), obj["action"], lo, hi)


def read_expect(path: str | os.PathLike[str]) -> list[Verdict]:
    """The verdicts of an expect file; its header line (``{"faultlens_expect": 1, ...}``) is skipped."""
    return [_verdict(obj, where) for where, obj in json_lines(path, ExpectError)
            if not (isinstance(obj, dict) and "faultlens_expect" in obj)]


def write_expect(path: str | os.PathLike[str], verdicts: Iterable[Verdict], *, trace: str,
                 slack_s: float = ONSET_SLACK_S) -> Path:
    """One header line (what wrote it and how to read it), then one verdict per line."""
    header = {"faultlens_expect": FORMAT_VERSION, "trace": trace, "onset_slack_s": slack_s,
              "note": "each further line is a verdict the trace must give (`faultlens check`); review, then commit. "
                      "With none, nothing may be evicted, restarted or alerted on this trace"}
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(orjson.dumps(header) + b"\n")
        for v in verdicts:
            fh.write(orjson.dumps(v.to_dict()) + b"\n")
    tmp.replace(path)
    return path
