"""An Xid that another program relays in its own log (issue 54, round 15): the Kubernetes device
plugin's ``XidCriticalError: Xid=69 on Device=GPU-..., the device will go unhealthy.``, a health
check's ``Found XID errors: 63``. The number is NVIDIA's, so the Xid's verdict (parsing.xid_verdict)
gives the class; the action is at most ``alert``: the relay is the program's reading of the kernel's
record, which is the evidence an eviction waits for (the kernel parser reads it on the node itself).
"""

from __future__ import annotations

import re
from typing import Any

from faultlens.parsing.line import common
from faultlens.parsing.xid_verdict import xid_verdict

# "Xid=69", "Xid 79", "XID errors: 63": the word, then the number (not NVML's event type's name,
# "nvmlEventTypeXidCriticalError", which the device plugin logs when it skips other events); (round 27) gpud's
# "XID 79(GPU has fallen off the bus) detected on PCI:0000:ae:00", the number and the table's words glued; (round 31)
# the kernel's own "NVRM: Xid (PCI:0000:9b:00): 119, pid=..." quoted whole by another program (gpud's "[XID found]").
_RELAYED = re.compile(r"(?<![\w])(?:Xid(?:=| )|XID errors?: |XID (?=\d{1,3}\()|Xid \(PCI:[0-9a-fA-F:.]+\): )(?P<code>\d{1,3})\b")
_CEILING = {"evict", "evict_reset_gpu", "restart", "reattempt", "rollback", "stop_time_diagnosis", "inspect_hardware"}


def relayed_xid(msg: str, raw: str, rank: int | None, extra: dict[str, Any]) -> list[tuple[str, dict[str, Any]]] | None:
    """A ``cuda_error`` event for an Xid another program names in ``msg``, or None."""
    m = _RELAYED.search(msg)
    if m is None:
        return None
    code = int(m.group("code"))
    v = xid_verdict(code, msg[m.end():])
    if not v.known:
        return None
    action = "alert" if v.action in _CEILING else v.action
    return [("cuda_error", common(raw, v.fault, action, v.severity, rank=rank, xid=code, error=f"Xid {code} ({v.mnemonic})",
                                  relayed=True, **extra))]  # fmt: skip
