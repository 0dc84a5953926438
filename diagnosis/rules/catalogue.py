"""Findings from the line catalogue's events (parsing/rules.toml and users' --rules files).

A catalogue event carries its rule in ``data.rule`` and the rule's fault class and first action;
this rule trusts them, so a user who adds a line to the catalogue gets diagnoses without code.
Kinds another rule family already reads (an OOM kill, a link down, a NaN ...) are left to that
family, which keeps its own logic (flap tolerance, rank attribution) for them.
"""

from __future__ import annotations

from diagnosis.rules.base import Finding, line_of, parsed_fault
from streams.events import Envelope

# (source, kind) pairs read by KernelRule, GpuLostRule, NicRule and TrainingRule.
_HANDLED = frozenset(
    [("kernel", k) for k in ("panic", "soft_lockup", "hung_task", "oom_kill", "mce", "gpu_lost", "link_up", "link_down", "nic_error", "xid")]
    + [("nccl", k) for k in ("nan", "exception", "cuda_error", "nccl_error", "nccl_timeout")]
)


class CatalogueRule:
    sources = frozenset({"kernel", "nccl"})

    def observe(self, event: Envelope) -> list[Finding]:
        rule = event.data.get("rule")
        if not rule or (event.source, event.kind) in _HANDLED:
            return []
        fault, action = parsed_fault(event, "unknown", "none")
        if action == "none":
            return []  # record only (an NFS server back, a healthy state change)
        # What the rule is about on this node: the device / server it names, else the rule itself.
        thing = event.data.get("device") or event.data.get("server") or event.data.get("pci") or ""
        entity = f"{rule}:{thing}" if thing else str(rule)
        if event.data.get("scope") == "job":
            # The job's fault, not this machine's (an NFS server every node mounts): one finding per
            # job and thing, naming no node, so nobody is evicted and the nodes' echoes fold into it.
            return [Finding(job=event.job, ts=event.ts, fault=fault, action=action, nodes=(), entity=entity,
                            evidence=(event.id,), detail=f"{event.kind} ({rule}) seen on {event.node}: {line_of(event)}")]
        return [Finding(job=event.job, ts=event.ts, fault=fault, action=action, nodes=(event.node,), entity=entity,
                        evidence=(event.id,), detail=f"{event.kind} ({rule}): {line_of(event)}")]

    def tick(self, now: float) -> list[Finding]:
        return []
