"""The lemon policy (pure): which faults count against a machine across jobs, and when a machine
that keeps failing is taken out for good (state ``hardware_inspection``) until a person resumes it.

Defaults, and where they come from:

* (one) the same hardware class twice on one machine within 7 days: ByteRobust sends a machine rebooted
  twice for the same Xid to hardware inspection (docs/design.md §3); the 7-day window is issue 33's;
* (two) two failed stop-time checks within the window (a check that could not run is no evidence);
* (three) the only culprit of 2 incidents in different jobs within the window (cuda / NCCL / silent /
  hang / fail-slow blames that named this machine alone): a machine that breaks whichever job
  it joins. Meta's research clusters cut the failure rate of 512+-GPU jobs from 14 % to 4 % by
  finding such "lemon" nodes (Kokolis et al., HPCA 2025).

Per class (``--lemon-rules``): ``repeat`` classes count towards rule one and three, ``culprit``
classes towards rule three only, ``off`` classes never; a counted incident of either kind is an
incident of rule three, so a class's own count does not lift the cross-job rule.

What never counts: a diagnosis that names more than one machine (a parallel group over-evicted
for a hang: its healthy members would become lemons), one below the confidence floor, one that
only records or asks for evidence (``none``, ``alert``, ``capture_stacks``), and the classes of
user code and of the job rather than the machine (``user_code``, ``app_fault`` — Xid 13/31/43,
also Xid 43 after 13 —, ``nan_loss``, ``loss_spike``, ``host_oom``, ...). Sympathetic errors
(Xid 45, NCCL ranks that only waited on a failed peer) are suppressed in diagnosis and never
reach here; were one to, naming several machines or an off class keeps it out all the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Iterable, Mapping, Sequence

from faultlens.events.action_record import HARDWARE_INSPECTION
from faultlens.events.diagnosis_record import FAULT_CLASSES

# The state of a lemon (docs/design.md §9: added, never renamed): drained, waiting for a person.
LEMON_STATE = HARDWARE_INSPECTION
DAY_S = 86400.0

HARDWARE_CLASSES = ("gpu_lost", "gpu_memory", "nvlink", "gpu_thermal", "gpu_reset_required", "nic", "kernel",
                    "storage")
CULPRIT_CLASSES = ("cuda_error", "nccl_error", "node_silent", "job_hang", "fail_slow")
# Rules a class can have: ``repeat`` (N of this class on one machine in the window, and also a
# culprit incident), ``culprit`` (counts only towards incidents in different jobs), ``off``.
MODES = ("repeat", "culprit", "off")
RECORD_ONLY_ACTIONS = frozenset({"none", "alert", "capture_stacks"})


@dataclass(frozen=True)
class ClassRule:
    mode: str = "off"
    count: int = 2  # repeat: this many in window_s
    window_s: float = 7 * DAY_S

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"lemon rule mode {self.mode!r}: one of {', '.join(MODES)}")
        if self.count < 1 or not math.isfinite(self.window_s) or self.window_s <= 0:
            raise ValueError(f"lemon rule needs count >= 1 and a window > 0, got {self.count}, {self.window_s}")


def default_rules(window_s: float = 7 * DAY_S) -> dict[str, ClassRule]:
    rules = {c: ClassRule("off", 2, window_s) for c in FAULT_CLASSES}
    rules.update({c: ClassRule("repeat", 2, window_s) for c in HARDWARE_CLASSES})
    rules.update({c: ClassRule("culprit", 2, window_s) for c in CULPRIT_CLASSES})
    return rules


@dataclass(frozen=True)
class LemonConfig:
    enabled: bool = True
    window_s: float = 7 * DAY_S
    rules: Mapping[str, ClassRule] = field(default_factory=default_rules)
    failed_checks: int = 2  # failed stop-time checks in window_s (0: never)
    culprit_jobs: int = 2  # incidents as the only culprit, each in a different job, in window_s (0: never)
    min_confidence: float = 0.5
    # Two counted diagnoses of one class, one job and one machine this close are one incident (a
    # restart that failed again at once, an echo from a second source): counted once.
    same_incident_s: float = 3600.0
    clean_s: float = DAY_S  # back this long without a counted fault: the eviction "ran clean"

    def rule(self, fault: str) -> ClassRule:
        return self.rules.get(fault, ClassRule("off", 2, self.window_s))


def parse_rules(text: str, window_s: float = 7 * DAY_S) -> dict[str, ClassRule]:
    """``CLASS=N[/DAYS]``, ``CLASS=culprit`` or ``CLASS=off``, comma-separated, over the defaults.
    Raises ValueError naming the bad item."""
    rules = default_rules(window_s)
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or name not in FAULT_CLASSES:
            raise ValueError(f"lemon rule {item!r}: want CLASS=N[/DAYS], CLASS=culprit or CLASS=off "
                             f"with a fault class of docs/design.md §9")
        if value in ("off", "culprit"):
            rules[name] = ClassRule(value, 2, window_s)
            continue
        count, _, days = value.partition("/")
        try:
            rules[name] = ClassRule("repeat", int(count), float(days) * DAY_S if days else window_s)
        except ValueError as exc:
            raise ValueError(f"lemon rule {item!r}: {exc}") from None
    return rules


@dataclass(frozen=True)
class Counted:
    """How one diagnosis counts against one machine: ``kind`` repeat / culprit, or "" with why not."""

    kind: str
    why: str


def classify(config: LemonConfig, *, fault: str, action: str, nodes: Iterable[str], confidence: float) -> Counted:
    nodes = tuple(nodes)
    rule = config.rule(fault)
    if rule.mode == "off":
        return Counted("", f"{fault} is not the machine's fault (class off)")
    if action in RECORD_ONLY_ACTIONS:
        return Counted("", f"action {action}: recorded only, no evidence of a failure")
    if len(nodes) != 1:
        return Counted("", f"{len(nodes)} machines blamed together: no single culprit")
    if confidence < config.min_confidence:
        return Counted("", f"confidence {confidence:.2f} below {config.min_confidence:.2f}")
    return Counted(rule.mode, "")


@dataclass(frozen=True)
class LemonVerdict:
    rule: str  # repeat:<class>, failed_checks, culprit_jobs
    reason: str
    diagnosis_ids: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "reason": self.reason, "diagnosis_ids": list(self.diagnosis_ids)}


def _incidents(faults: list[Mapping[str, Any]], same_s: float) -> list[Mapping[str, Any]]:
    """One entry per incident: counted faults of one job and class closer than ``same_s`` fold."""
    out: list[Mapping[str, Any]] = []
    last: dict[tuple[str, str], float] = {}
    for f in sorted(faults, key=lambda f: f["ts"]):
        key = (f["job"], f["fault"])
        if key in last and f["ts"] - last[key] < same_s:
            last[key] = f["ts"]
            continue
        last[key] = f["ts"]
        out.append(f)
    return out


def _span(facts: list[Mapping[str, Any]], at: float, window_s: float,
          enough: Callable[[list[Mapping[str, Any]]], bool]) -> list[Mapping[str, Any]] | None:
    """The facts of a span of ``window_s`` that holds time ``at`` (the fact just added) and is
    ``enough``, or None. Anchored on the new fact, not on the wall clock: a replayed trace or a
    consumer far behind judges its diagnoses by their own times, and facts decided out of order
    (two jobs on two partitions) count as they happened."""
    near = sorted((f for f in facts if abs(f["ts"] - at) <= window_s), key=lambda f: f["ts"])
    for first in near:
        if first["ts"] > at:
            break
        inside = [f for f in near if first["ts"] <= f["ts"] <= first["ts"] + window_s]
        if first["ts"] + window_s >= at and enough(inside):
            return inside
    return None


def _at_least(need: int, facts: list[Mapping[str, Any]]) -> bool:
    return len(facts) >= need


def judge(node: str, faults: Sequence[Mapping[str, Any]], checks: Sequence[Mapping[str, Any]], since: float, at: float,
          config: LemonConfig) -> LemonVerdict | None:
    """Whether ``node`` is a lemon once the fact of time ``at`` is added, from its counted faults
    and checks after ``since`` (its last resume by a person: what came before was forgiven)."""
    if not config.enabled:
        return None
    counted = _incidents([f for f in faults if f.get("counts") and f["ts"] > since], config.same_incident_s)
    by_class: dict[str, list[Mapping[str, Any]]] = {}
    for f in counted:
        if f["counts"] == "repeat":
            by_class.setdefault(f["fault"], []).append(f)
    for fault, seen in sorted(by_class.items()):
        rule = config.rule(fault)
        hit = _span(seen, at, rule.window_s, partial(_at_least, rule.count))
        if rule.mode == "repeat" and hit:
            ids = tuple(f["diagnosis_id"] for f in hit)
            jobs = sorted({f["job"] for f in hit})
            return LemonVerdict(f"repeat:{fault}", f"{fault} {len(hit)} times in {rule.window_s / DAY_S:g} days "
                                f"(jobs {', '.join(jobs)}; diagnoses {', '.join(ids)})", ids)
    failed = [c for c in checks if c["ts"] > since and c.get("failed")]
    hit = _span(failed, at, config.window_s, partial(_at_least, config.failed_checks)) if config.failed_checks else None
    if hit:
        ids = tuple(c.get("diagnosis_id", "") for c in hit)
        return LemonVerdict("failed_checks", f"stop-time checks failed {len(hit)} times in "
                            f"{config.window_s / DAY_S:g} days ({'; '.join(str(c.get('detail', ''))[:80] for c in hit)})", ids)
    hit = _span(counted, at, config.window_s,
                lambda fs: len({f["job"] for f in fs}) >= config.culprit_jobs) if config.culprit_jobs else None
    if hit:
        first_by_job: dict[str, Mapping[str, Any]] = {}
        for f in hit:
            first_by_job.setdefault(f["job"], f)
        seen = list(first_by_job.values())
        ids = tuple(f["diagnosis_id"] for f in seen)
        return LemonVerdict("culprit_jobs", f"the only culprit in {len(seen)} different jobs in "
                            f"{config.window_s / DAY_S:g} days ("
                            + "; ".join(f"{f['job']}: {f['fault']} {f['diagnosis_id']}" for f in seen) + ")", ids)
    return None
