"""Findings from parsed log events no other rule family reads: the line catalogue's
(parsing/rules.toml and users' --rules files, ``data.rule`` set) and the code's records that had
no reader (an NVSwitch SXid, a fatal PCIe AER error, an uncorrected EDAC error, a segfault in
libnccl / libcuda).

The parser's fault class and first action are trusted, so a user who adds a line to the catalogue
gets diagnoses without code. Kinds another rule family already reads (an OOM kill, a link down, a
NaN ...) are left to that family, which keeps its own logic (flap tolerance, rank attribution).
"""

from __future__ import annotations

from faultlens.diagnosis.rules.base import Finding, line_of, parsed_fault
from faultlens.events.envelope import Envelope
from faultlens.events.payloads import typed
from faultlens.events.payloads_log import ParsedLog

# (source, kind) pairs read by KernelRule, GpuLostRule, NicRule and TrainingRule.
_HANDLED = frozenset(
    [("kernel", k) for k in ("panic", "soft_lockup", "hung_task", "oom_kill", "mce", "gpu_lost", "link_up", "link_down", "nic_error", "xid")]
    + [("nccl", k) for k in ("nan", "exception", "cuda_error", "nccl_error", "nccl_timeout")]
)


# Lines classified by their subsystem or by the line model (parsing/fallback.py) are suspicions:
# whatever the event says, they may ask for no more than an alert (docs/design.md §1, evidence
# before eviction). The parser already caps them; this holds for any producer of such events.
SUSPICION_BASES = frozenset({"subsystem", "model"})
SUSPICION_CEILING = ("none", "alert")

# Code records with no rule family of their own.
_UNREAD = frozenset({("kernel", "sxid"), ("kernel", "pcie_aer"), ("kernel", "edac"), ("kernel", "segfault")})


class CatalogueRule:
    sources = frozenset({"kernel", "nccl"})

    def observe(self, event: Envelope) -> list[Finding]:
        key = (event.source, event.kind)
        if key in _HANDLED:
            return []
        payload = typed(event, ParsedLog)
        rule = payload.rule or (event.kind if key in _UNREAD else None)
        if not rule:
            return []
        fault, action = parsed_fault(event, "unknown", "none")
        # basis / device / server / pci stay keys of data: a kind's Struct has those its shipped
        # rules fill, and a user's rule (read as ParsedLog) may name any group (payloads_log.py).
        if event.data.get("basis") in SUSPICION_BASES and action not in SUSPICION_CEILING:
            action = "alert"
        if action == "none":
            return []  # record only (an NFS server back, a healthy state change)
        if fault == "unknown" and key in _UNREAD:
            return []  # a segfault of some process outside NCCL / CUDA: not the training's fault
        # What the rule is about on this node: the device / server it names, else the rule itself.
        thing = event.data.get("device") or event.data.get("server") or event.data.get("pci") or ""
        entity = f"{rule}:{thing}" if thing else str(rule)
        if payload.scope == "job":
            # The job's fault, not this machine's (an NFS server every node mounts): one finding per
            # job and thing, naming no node, so nobody is evicted and the nodes' echoes fold into it.
            return [Finding(job=event.job, ts=event.ts, fault=fault, action=action, nodes=(), entity=entity,
                            evidence=(event.id,), detail=f"{event.kind} ({rule}) seen on {event.node}: {line_of(event)}")]
        return [Finding(job=event.job, ts=event.ts, fault=fault, action=action, nodes=(event.node,), entity=entity,
                        evidence=(event.id,), detail=f"{event.kind} ({rule}): {line_of(event)}")]

    def tick(self, now: float) -> list[Finding]:
        return []
