"""What a rule emits and the small helpers every rule family shares.

A rule turns events into :class:`Finding` values: a would-be diagnosis plus the entity it is about
(a GPU, a port, a rank) and whether it is only a consequence of another fault. Findings are cheap
(no id, no record) because a node can log hundreds of thousands of identical lines; the dedup
stage (diagnosis/engine/dedup.py) folds them and turns the survivors into :class:`Diagnosis` records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, TypeVar

from faultlens.events.diagnosis_record import ACTIONS, FAULT_CLASSES, Action, Diagnosis, FaultClass
from faultlens.events.envelope import Envelope, InvalidEvent, as_float
from faultlens.events.payloads import typed
from faultlens.events.payloads_log import ParsedLog
from faultlens.events.payloads_node import GpuLost, GpuXid
from faultlens.events.payloads_stage import SummaryFinding


@dataclass(frozen=True, slots=True)
class Finding:
    job: str
    ts: float
    fault: str
    action: str
    nodes: tuple[str, ...] = ()
    entity: str = ""
    ranks: tuple[int, ...] = ()
    group: str | None = None
    confidence: float = 1.0
    evidence: tuple[str, ...] = ()
    detail: str = ""
    onset: float | None = None
    # A consequence of another fault (Xid 45, a peer that only waited): never blamed on its own.
    sympathetic: bool = False
    # Event seconds to wait before judging it, for a cause that shows up later (an NVML sample).
    hold_s: float = 0.0
    # The rule that made it, where the entity's head does not say it (an Xid's entity is its GPU):
    # see rule_id.
    rule: str = ""

    def __post_init__(self) -> None:
        if self.fault not in FAULT_CLASSES:
            raise ValueError(f"unknown fault class {self.fault!r}")
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}")

    @property
    def rule_id(self) -> str:
        """The rule a diagnosis names (Diagnosis.rule; `faultlens rules diff` groups by it): the one
        set, else the head of the entity, which is the line catalogue's rule id (``subsystem.nvme``
        of ``subsystem.nvme:nvme0``) or the detector's name (``nic``, ``net``, ``thermal``)."""
        return self.rule or self.entity.split(":", 1)[0]

    def to_event(self, event_id: str) -> Envelope:
        """The node stage's finding as a `summary/finding` record for the job stage."""
        data = {"fault": self.fault, "action": self.action, "nodes": list(self.nodes), "entity": self.entity,
                "ranks": list(self.ranks), "group": self.group, "confidence": self.confidence,
                "evidence": list(self.evidence), "detail": self.detail, "onset": self.onset,
                "sympathetic": self.sympathetic, "hold_s": self.hold_s}
        if self.rule:
            data["rule"] = self.rule
        return Envelope(ts=self.ts, job=self.job, node=self.nodes[0] if self.nodes else "-", source="summary",
                        kind="finding", data=data, id=event_id)

    @classmethod
    def from_event(cls, event: Envelope) -> "Finding":
        """A `summary/finding` back into the finding (its Struct, SummaryFinding, checked the
        types; a record without its fault or action is not a finding)."""
        d = typed(event, SummaryFinding)
        if d.fault is None or d.action is None:
            raise InvalidEvent("data", f"not a node finding: no {'fault' if d.fault is None else 'action'}")
        return cls(job=event.job, ts=event.ts, fault=str(d.fault), action=str(d.action), nodes=tuple(d.nodes or ()),
                   entity=d.entity or "", ranks=tuple(d.ranks or ()), group=d.group,
                   confidence=float(or_else(d.confidence, 1.0)), evidence=tuple(d.evidence or ()),
                   detail=d.detail or "", onset=None if d.onset is None else float(d.onset),
                   sympathetic=bool(d.sympathetic), hold_s=float(d.hold_s or 0.0), rule=d.rule or "")

    def to_diagnosis(self, *, action: str | None = None, count: int = 1, detail: str | None = None) -> Diagnosis:
        return Diagnosis(
            job=self.job,
            ts=self.ts,
            onset=self.onset if self.onset is not None else self.ts,
            fault=FaultClass(self.fault),
            action=Action(action or self.action),
            nodes=self.nodes,
            ranks=self.ranks,
            group=self.group,
            confidence=self.confidence,
            evidence=self.evidence,
            detail=self.detail if detail is None else detail,
            count=count,
            rule=self.rule_id or None,
        )


class Rule(Protocol):
    """A node-local rule: sees one node's events (any order across nodes), emits findings."""

    sources: frozenset[str]

    def observe(self, event: Envelope) -> list[Finding]: ...

    def tick(self, now: float) -> list[Finding]: ...


def missing(key: str, event: Envelope) -> InvalidEvent:
    """The dead letter's reason for a payload key a rule cannot do without, absent or null."""
    return InvalidEvent(f"data.{key}", f"missing in {event.source}/{event.kind} event {event.id}")


def need(data: Mapping[str, Any], key: str, event: Envelope) -> Any:
    """A payload key a rule cannot do without: its absence makes the event a dead letter."""
    if key not in data or data[key] is None:
        raise missing(key, event)
    return data[key]


_T = TypeVar("_T")
_D = TypeVar("_D")


def or_else(value: _T | None, default: _D) -> _T | _D:
    """A typed payload's field, or ``default`` where it was absent or null (a payload Struct's
    fields are None then: what ``data.get(key, default)`` read for an absent key)."""
    return default if value is None else value


def need_int(data: Mapping[str, Any], key: str, event: Envelope) -> int:
    value = need(data, key, event)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidEvent(f"data.{key}", f"must be an integer, got {value!r}") from None


def opt_int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def num(value) -> float | None:
    """as_float with a fast path: NVML counters are plain numbers on every sample but the odd one."""
    if type(value) is int or type(value) is float:
        return value
    return as_float(value)


def opt_float(data: Mapping[str, Any], key: str) -> float | None:
    return as_float(data.get(key))


def parsed_fault(event: Envelope, default_fault: str, default_action: str) -> tuple[str, str]:
    """The parser's fault class and action where it gave them, else the rule's defaults (the
    intake refused any other: the fields are the FaultClass / Action enums). A parsed log event,
    or NVML's Xid (gpu/xid), which carries the Xid table's verdict as a kernel Xid does."""
    payload = typed(event, (ParsedLog, GpuXid))
    fault, action = payload.fault, payload.action
    return (
        default_fault if fault is None else str(fault),
        default_action if action is None else str(action),
    )


def line_of(event: Envelope) -> str:
    """The parsed event's log line (or its text), for a finding's detail: a parsed log event's, or
    NVML's Xid or lost GPU's (the rules that quote a line read no other kind)."""
    payload = typed(event, (ParsedLog, GpuXid, GpuLost))
    if isinstance(payload, ParsedLog):
        return (payload.line or payload.text or "")[:200]
    # An NVML event (gpu/xid, gpu/lost): its Struct has no line; a producer may still have put
    # one beside the documented keys, and the detail has always shown it.
    text = event.data.get("line") or event.data.get("text") or ""
    return str(text)[:200]


def gpu_of(gpu: object, pci: object) -> object:
    """The GPU as the event names it: NVML's index, else the kernel's PCI address ("" for neither)."""
    return gpu if gpu is not None else "" if pci is None else pci
