"""Host rules: OS kernel faults (panic, soft lockup, hung task, fatal MCE) and the OOM killer.

The first occurrence restarts the job in place (a leak or a one-off stall); the dedup stage turns
a repeat on the same node into an eviction (docs/design.md §3: restart / evict by repetition).
"""

from __future__ import annotations

from faultlens.diagnosis.rules.base import Finding, line_of, or_else, parsed_fault
from faultlens.events.envelope import Envelope
from faultlens.events.payloads import typed
from faultlens.events.payloads_log import KernelOom
from faultlens.events.payloads_node import KernelMachineCheck

# A panic takes the machine down: nothing to restart in place.
_KERNEL_KINDS = {"panic": "evict", "soft_lockup": "restart", "hung_task": "restart"}


def _uncorrected(event: Envelope) -> bool:
    return typed(event, KernelMachineCheck).corrected is False


class KernelRule:
    sources = frozenset({"kernel"})

    def observe(self, event: Envelope) -> list[Finding]:
        kind = event.kind
        if kind in _KERNEL_KINDS:
            fault, action = parsed_fault(event, "kernel", _KERNEL_KINDS[kind])
            if fault != "kernel" and not (kind == "panic" and fault == "host_oom"):
                fault = "kernel"  # a panic for want of memory keeps host_oom (parsing/kernel_host.py)
            return [self._finding(event, fault, action, kind)]
        if kind == "oom_kill":
            _, action = parsed_fault(event, "host_oom", "restart")
            oom = typed(event, KernelOom)
            what = oom.process or "?"
            return [self._finding(event, "host_oom", action, f"oom_kill of {what} (pid {or_else(oom.pid, '?')})")]
        if kind == "mce" and _uncorrected(event):
            return [self._finding(event, "kernel", "evict", "uncorrected machine check")]
        return []

    @staticmethod
    def _finding(event: Envelope, fault: str, action: str, what: str) -> Finding:
        return Finding(
            job=event.job, ts=event.ts, fault=fault, action=action, nodes=(event.node,), entity=fault,
            evidence=(event.id,), detail=f"{what}: {line_of(event)}",
        )

    def tick(self, now: float) -> list[Finding]:
        return []
