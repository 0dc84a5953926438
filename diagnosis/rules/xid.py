"""Xid codes: one finding per Xid, with what one line cannot know of it.

What one Xid means is parsing.xid_verdict's to say (the one owner of that verdict): the kernel-log
parser and the NVML event reader put it on their events, and XidRule takes the event's fault and
action as its producer gave them. The rest of the verdict (an echo? about memory?) it asks the same
function from the fields docs/events.md documents (``xid``, ``text``), so an event of any producer
is judged as the parser's is. What the rule adds is whether the Xid is the echo of an earlier one
(45 after any Xid, 43 after a burst of 13, the same Xid from the other source), and a hold on a
contained memory error until the NVML samples show whether the memory itself is failing
(gpu_memory.py judges those).
"""

from __future__ import annotations

from faultlens.diagnosis.rules.base import Finding, gpu_of, line_of, missing, parsed_fault
from faultlens.events.envelope import Envelope
from faultlens.events.payloads import typed
from faultlens.events.payloads_node import GpuXid, KernelXid
from faultlens.parsing.xid_verdict import APP_XIDS, xid_verdict

# Xid 43 within this long after Xid 13 on the same node is the reset that the 13 caused.
APP_BURST_S = 120.0
# The kernel log and NVML's event API report one Xid within this many seconds of each other.
CROSS_SOURCE_S = 10.0
# Long enough for an NVML sample or two (samples come every 1-10 s).
MEMORY_HOLD_S = 25.0


def _folded_note(payload: KernelXid | GpuXid) -> str:
    """A folded event (collectors/flood_fold.py) stands for ``count`` repeats of its line: said, as
    one finding, never as ``count`` of them (NVML's event API folds nothing)."""
    if not isinstance(payload, KernelXid) or not payload.folded or payload.count is None:
        return ""
    return f" (and {payload.count} more identical line(s) folded by the agent)"


class XidRule:
    sources = frozenset({"kernel", "gpu"})

    def __init__(self) -> None:
        self._last_app_xid: dict[str, float] = {}
        self._last_any_xid: dict[str, float] = {}
        self._last_by_source: dict[tuple[str, str, int], tuple[float, str]] = {}

    def observe(self, event: Envelope) -> list[Finding]:
        if event.kind != "xid":
            return []
        payload = typed(event, (KernelXid, GpuXid))  # read once by the payload check (events/payloads.py)
        code = payload.xid
        if code is None:
            raise missing("xid", event)
        node = event.node
        gpu = gpu_of(payload.gpu, payload.pci if isinstance(payload, KernelXid) else None)
        # Back into parsing.xid_verdict (the parser asked it for this line already), for two reasons:
        # an event carries the verdict's fault and action, not all of it (memory; an echo? is read
        # off the table for every producer, as a trace written from docs/events.md has it), and Xid
        # 43 is an echo only after the 13 / 31 that caused it on this node, which no line can know.
        after_app = event.ts - self._last_app_xid.get(node, -1e18) <= APP_BURST_S if code == 43 else None
        text = payload.text if isinstance(payload, KernelXid) else None  # NVML's event API gives none
        verdict = xid_verdict(code, str(text or ""), after_app_xid=after_app)
        if code == 43:
            fault, action = verdict.fault, verdict.action
        else:
            fault, action = parsed_fault(event, verdict.fault, verdict.action)
        if event.data.get("boot") is True:
            # Logged while the machine booted (parsing/kernel_quiet.py): the machine's record, no
            # action against a job, whatever the code's own reading (Xid 43 re-derives it above).
            action = "none"
        sympathetic = verdict.sympathetic
        if code in APP_XIDS:
            self._last_app_xid[node] = event.ts
        self._last_any_xid[node] = event.ts
        mnemonic = payload.mnemonic or verdict.mnemonic
        # A contained memory error (Xid 94) is the application's problem unless the GPU's ECC / remap
        # counters show the memory failing: wait for the next NVML samples before blaming the app.
        hold = MEMORY_HOLD_S if action == "reattempt" and verdict.memory else 0.0
        # The kernel log and NVML's event API both report an Xid, naming the GPU differently (PCI
        # address vs index): the second report of the same code on the node moments later is an echo.
        seen = self._last_by_source.get((event.job, node, code))
        if seen is not None and seen[1] != event.source and event.ts - seen[0] <= CROSS_SOURCE_S:
            sympathetic = True
        else:
            self._last_by_source[(event.job, node, code)] = (event.ts, event.source)
        return [Finding(
            job=event.job, ts=event.ts, fault=fault, action=action, nodes=(node,), hold_s=hold, rule=f"xid.{code}",
            entity="gpu_lost" if fault == "gpu_lost" else f"gpu:{gpu}", evidence=(event.id,), sympathetic=sympathetic,
            detail=f"Xid {code} {mnemonic} on GPU {gpu}: {line_of(event)}".strip() + _folded_note(payload),
        )]

    def tick(self, now: float) -> list[Finding]:
        return []
