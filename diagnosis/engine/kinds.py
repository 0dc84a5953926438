"""What each source may send (docs/events.md): the first check every consumer makes of an event,
before its payload is read. Anything else is a dead letter naming the kind."""

from __future__ import annotations

from faultlens.events.envelope import Envelope

KNOWN_KINDS = {
    "gpu": {"sample", "xid", "lost", "unresponsive", "responsive"},
    "kernel": {"xid", "gpu_lost", "sxid", "link_down", "link_up", "nic_error", "pcie_aer", "mce", "edac",
               "soft_lockup", "hung_task", "panic", "oom_kill", "segfault", "line"},
    "nccl": {"nccl_warn", "nccl_timeout", "nccl_error", "cuda_error", "exception", "nan", "line"},
    "train": {"step", "eval", "checkpoint", "command_ack"},
    "heartbeat": {"beat"},
    "stack": {"stack_dump", "recorder_dump"},
    "host": {"sample"},
    "net": {"sample"},
    "job": {"topology", "restart", "end"},
    "summary": {"window", "finding", "watermark", "clock"},
}


def known_kind(event: Envelope) -> bool:
    """A kind docs/events.md lists, or one a line-catalogue rule made (parsing/rules.toml or a
    user's --rules file: its events name their rule, and diagnosis.rules.catalogue reads them)."""
    kinds = KNOWN_KINDS.get(event.source)
    if kinds is None or event.kind in kinds:
        return True
    # data, not typed(): this decides whether the event has a Struct at all (payload_type_of).
    return event.source in ("kernel", "nccl") and isinstance(event.data, dict) and isinstance(event.data.get("rule"), str)
