"""What a rule change would have done (`faultlens rules diff`): the engine with today's rules and
thresholds and with a changed set, side by side over the same events (a trace or a DuckDB
history), compared per rule (Diagnosis.rule: a catalogue rule id, an Xid table entry, a
detector's name; a wave is its first member's rule): findings gained and lost, actions that
changed, machines each would evict, and, with ground truth (labels, or `faultlens check`'s expect
file), which of those machines were healthy, and which rule would have evicted them."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import orjson

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.engine.offline import analyze
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope

# Actions that take a machine out (a diagnosis's first action, docs/design.md §9).
EVICTING = frozenset({"evict", "evict_reset_gpu", "inspect_hardware"})


def _key(d: Diagnosis) -> tuple:
    """The same finding in both runs: job, class, machines and what it names (its group)."""
    return (d.job, str(d.fault), tuple(sorted(d.nodes)), d.group or "")


def rule_of(d: Diagnosis) -> str:
    """The rule a diagnosis is counted under: its own (Diagnosis.rule), else its fault class (a
    detector that names none: hang, fail-slow, a recorded diagnosis from before rules were named)."""
    return d.rule or str(d.fault)


def evicted(found: Iterable[Diagnosis]) -> set[tuple[str, str]]:
    """(job, machine) of every machine a diagnosis asks to take out."""
    return {(d.job, n) for d in found if d.action in EVICTING for n in d.nodes}


@dataclass
class RuleDiff:
    rule: str
    current: int = 0
    changed: int = 0
    gained: list[Diagnosis] = field(default_factory=list)
    lost: list[Diagnosis] = field(default_factory=list)
    action_changed: list[tuple[Diagnosis, Diagnosis]] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return not (self.gained or self.lost or self.action_changed)


@dataclass
class RulesDiff:
    rules: dict[str, RuleDiff]
    evicted_current: set[tuple[str, str]]
    evicted_changed: set[tuple[str, str]]
    culprits: set[tuple[str, str]] | None  # machines ground truth blames; None: no ground truth
    # (job, machine) → the rules whose diagnoses would evict it with the change
    evicted_by: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    @property
    def healthy_evicted(self) -> set[tuple[str, str]]:
        """Machines the changed set evicts that ground truth does not blame."""
        return set() if self.culprits is None else self.evicted_changed - self.culprits

    @property
    def healthy_evicted_now(self) -> set[tuple[str, str]]:
        return set() if self.culprits is None else self.evicted_current - self.culprits

    def healthy_evicted_by(self, rule: str) -> set[tuple[str, str]]:
        """The healthy machines ``rule``'s diagnoses would evict with the change."""
        return {m for m in self.healthy_evicted if rule in self.evicted_by.get(m, ())}

    def to_dict(self) -> dict[str, Any]:
        def pairs(s: set[tuple[str, str]]) -> list[list[str]]:
            return [list(p) for p in sorted(s)]

        return {
            "rules": {r.rule: {"current": r.current, "changed": r.changed,
                               "gained": [_brief(d) for d in r.gained], "lost": [_brief(d) for d in r.lost],
                               "action_changed": [{"from": _brief(a), "to": _brief(b)} for a, b in r.action_changed],
                               "healthy_evicted": pairs(self.healthy_evicted_by(r.rule))}
                      for r in self.rules.values() if not r.same or r.current or r.changed},
            "evicted_current": pairs(self.evicted_current), "evicted_changed": pairs(self.evicted_changed),
            "newly_evicted": pairs(self.evicted_changed - self.evicted_current),
            "no_longer_evicted": pairs(self.evicted_current - self.evicted_changed),
            "ground_truth": self.culprits is not None,
            "healthy_evicted": pairs(self.healthy_evicted), "healthy_evicted_current": pairs(self.healthy_evicted_now),
        }


def _brief(d: Diagnosis) -> dict[str, Any]:
    return {"job": d.job, "rule": rule_of(d), "fault": str(d.fault), "action": str(d.action), "nodes": list(d.nodes),
            "group": d.group, "onset": d.onset, "count": d.count}


def compare(current: list[Diagnosis], changed: list[Diagnosis],
            culprits: set[tuple[str, str]] | None = None) -> RulesDiff:
    """Per rule: a finding (job, class, machines, group) in one run and not the other is gained or
    lost under its own rule; one in both whose action differs changed under the changed run's rule."""
    rules: dict[str, RuleDiff] = {}

    def of(d: Diagnosis) -> RuleDiff:
        rule = rule_of(d)
        return rules.setdefault(rule, RuleDiff(rule))

    before = {_key(d): d for d in current}
    after = {_key(d): d for d in changed}
    for d in current:
        of(d).current += 1
    for d in changed:
        of(d).changed += 1
    for key, d in after.items():
        if key not in before:
            of(d).gained.append(d)
        elif before[key].action != d.action:
            of(d).action_changed.append((before[key], d))
    for key, d in before.items():
        if key not in after:
            of(d).lost.append(d)
    for r in rules.values():
        r.gained.sort(key=_key)
        r.lost.sort(key=_key)
        r.action_changed.sort(key=lambda pair: _key(pair[0]))
    by: dict[tuple[str, str], set[str]] = {}
    for d in changed:
        if d.action in EVICTING:
            for n in d.nodes:
                by.setdefault((d.job, n), set()).add(rule_of(d))
    return RulesDiff(dict(sorted(rules.items())), evicted(current), evicted(changed), culprits, by)


def run_both(events: Callable[[], Iterable[Envelope]], current: EngineConfig, changed: EngineConfig,
             culprits: set[tuple[str, str]] | None = None) -> RulesDiff:
    """The engine over ``events()`` twice (a fresh iterator each), with each config."""
    return compare(analyze(events(), Engine(current)), analyze(events(), Engine(changed)), culprits)


# --- where the events and the ground truth come from --------------------------------------------

def trace_events(path: str | os.PathLike[str]) -> Callable[[], Iterator[Envelope]]:
    from faultlens.events.trace import iter_trace

    return lambda: iter_trace(path)


def history_events(db: str | os.PathLike[str]) -> Callable[[], Iterator[Envelope]]:
    """The events a DuckDB history kept (all, or the sample of high-rate samples it was told to keep)."""
    import duckdb

    def events() -> Iterator[Envelope]:
        conn = duckdb.connect(str(db), read_only=True)
        try:
            cur = conn.execute("SELECT id, ts, job, node, source, kind, data FROM events ORDER BY ts, id")
            while rows := cur.fetchmany(4096):
                for id_, ts, job, node, source, kind, data in rows:
                    yield Envelope(ts=ts, job=job, node=node, source=source, kind=kind,
                                   data=orjson.loads(data) if data else {}, id=id_)
        finally:
            conn.close()

    return events


def culprits_from_labels(labels: Iterable[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(str(label.get("job")), str(n)) for label in labels for n in label.get("nodes") or ()}


def trace_culprits(path: str | os.PathLike[str], source: str) -> set[tuple[str, str]]:
    """Ground truth beside a trace: ``labels`` (TRACE.labels.jsonl) or ``expect`` (the machines its
    expect file's verdicts evict, `faultlens check`)."""
    if source == "labels":
        from faultlens.events.trace import read_labels

        return culprits_from_labels(read_labels(path))
    from faultlens.diagnosis.replay.expect import expect_path, read_expect

    return {(v.job, n) for v in read_expect(expect_path(path)) if v.action in EVICTING for n in v.nodes}


def history_culprits(db: str | os.PathLike[str]) -> set[tuple[str, str]]:
    import duckdb

    conn = duckdb.connect(str(db), read_only=True)
    try:
        rows = conn.execute("SELECT job, nodes FROM labels").fetchall()
    finally:
        conn.close()
    return culprits_from_labels({"job": job, "nodes": nodes} for job, nodes in rows)


# --- words --------------------------------------------------------------------------------------

def _d(d: Diagnosis) -> str:
    """One diagnosis in a line: what it asks of which machines, and the start of its detail (which
    names the rule or the Xid that made it)."""
    nodes = " ".join(d.nodes) if d.nodes else (d.group or "no machine")
    detail = d.detail if len(d.detail) <= 80 else d.detail[:79] + "…"
    return (f"{d.job} {d.fault} {d.action} [{nodes}]" + (f" ×{d.count}" if d.count > 1 else "")
            + (f": {detail}" if detail else ""))


def render(diff: RulesDiff, *, limit: int = 10) -> str:
    lines = []
    for c in diff.rules.values():
        mark = "=" if c.same else "~"
        # A finding is a diagnosis's job, class, machines and group: two GPUs of a machine are two
        # diagnoses and one finding.
        healthy = diff.healthy_evicted_by(c.rule)
        lines.append(f"{mark} {c.rule}: {c.current} → {c.changed} diagnoses; findings gained {len(c.gained)}, "
                     f"lost {len(c.lost)}, action changed {len(c.action_changed)}"
                     + (f"; would evict {len(healthy)} healthy machine(s)" if healthy else ""))
        lines += [f"    + {_d(d)}" for d in c.gained[:limit]]
        lines += [f"    - {_d(d)}" for d in c.lost[:limit]]
        lines += [f"    ~ {a.job} [{' '.join(a.nodes) or a.group}] {a.action} → {b.action}: {_d(b).split(': ', 1)[-1]}"
                  for a, b in c.action_changed[:limit]]
        more = max(0, len(c.gained) - limit) + max(0, len(c.lost) - limit) + max(0, len(c.action_changed) - limit)
        if more:
            lines.append(f"    … and {more} more (--json lists all)")
    new = sorted(diff.evicted_changed - diff.evicted_current)
    gone = sorted(diff.evicted_current - diff.evicted_changed)
    lines.append(f"machines evicted: {len(diff.evicted_current)} now, {len(diff.evicted_changed)} with the change "
                 f"(+{len(new)} -{len(gone)})")
    lines += [f"  + {job} {node}" for job, node in new[:limit]]
    lines += [f"  - {job} {node}" for job, node in gone[:limit]]
    if diff.culprits is None:
        lines.append("no ground truth (labels or expect file): which evicted machines were healthy is not known")
    else:
        counts = Counter(job for job, _ in diff.healthy_evicted)
        lines.append(f"healthy machines evicted: {len(diff.healthy_evicted_now)} now, {len(diff.healthy_evicted)} "
                     f"with the change" + (f" ({', '.join(f'{j}: {n}' for j, n in sorted(counts.items()))})" if counts else ""))
        lines += [f"  ! {job} {node} (by {', '.join(sorted(diff.evicted_by.get((job, node), ())))})"
                  for job, node in sorted(diff.healthy_evicted)[:limit]]
    return "\n".join(lines)


def exists(path: str | os.PathLike[str]) -> bool:
    return Path(path).exists()
