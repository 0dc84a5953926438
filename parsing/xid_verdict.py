"""The verdict on one Xid: its code and message text -> fault class, action, severity, whether it is
an echo of another error, whether it is about the GPU's memory. The one owner of that decision.

Who asks: the kernel-log parser (parsing.kernel_gpu) puts the verdict on the ``xid`` event it
makes; the NVML event reader (collectors/gpu_sample.py) on its ``gpu``/``xid`` event; diagnosis
(diagnosis/rules/xid.py) reads the event's fault and action and asks here, from the fields
docs/events.md documents (``xid``, ``text``), for the rest, so an event written by another
producer is judged as ours is. Xid 43 alone needs what came before on the node (an Xid 13 / 31
moments earlier makes it that error's echo): the caller that knows the node's history
(diagnosis) passes ``after_app_xid``; a single line cannot, and gets the catalogue's reading.

The table itself (NVIDIA's catalogue and the NVLink5 decode) is parsing.xid_table's; the policy
on top of it (Xid 154's recovery action, Xid 43 alone, the NVLink5 fields of the message) is here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from faultlens.parsing.xid_table import XidInfo, lookup

# Xid 144-150 name the NVLink5 unit, IntrInfo and error status in the message:
# "NETIR_LINK_EVT Fatal XC0 i0 Link 12 (0x004505c6 0x00000000 ...)".
_NVLINK5 = re.compile(r"^(?P<unit>[A-Z][A-Z0-9_]+)\b.*?\((?P<intr>0x[0-9a-fA-F]+)\s+(?P<status>0x[0-9a-fA-F]+)")
# Xid 154: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"; drivers
# name the same codes differently ("0x1 (PF FLR)", "0x2 (OS Reboot)").
_RECOVERY = re.compile(r"\bto (?P<code>0x[0-9a-fA-F]+)(?: \((?P<action>[^)]*)\))?")
# The codes as NVML numbers them (nvmlDeviceGetGpuRecoveryAction): none, GPU reset, node reboot,
# drain P2P, drain and reset. A code the driver names in no words we know is read by its number.
_RECOVERY_CODES = {0: "none", 1: "reset", 2: "reboot", 3: "drain", 4: "drain"}
NVLINK5_XIDS = range(144, 151)
# Xids the application causes (a bad kernel, an MMU fault from user memory); a 43 right after one
# is the reset it caused.
APP_XIDS = frozenset({13, 31})


@dataclass(frozen=True, slots=True)
class XidVerdict:
    """What one Xid means and what faultlens does about it (docs/design.md §3)."""

    code: int
    fault: str  # docs/design.md §9 fault class
    action: str  # events.diagnosis_record.ACTIONS
    severity: str  # fatal, error, warn, info
    sympathetic: bool  # an echo of another error: never blamed on its own
    memory: bool  # ECC / row remapping / page retirement: the GPU's memory counters confirm or clear it
    mnemonic: str
    nvidia_action: str  # NVIDIA's immediate-action bucket (RESTART_APP, RESET_GPU, ...)
    known: bool = True  # in NVIDIA's catalogue
    subcode: str | None = None  # the NVLink5 unit (Xid 144-150)
    intrinfo: int | None = None  # Xid 144-150: the decoded IntrInfo and error status
    error_status: int | None = None


def xid_verdict(code: int, text: str = "", *, after_app_xid: bool | None = None) -> XidVerdict:
    """The verdict on Xid ``code`` whose message (after the ``pid=, name=,`` fields) is ``text``.

    ``after_app_xid`` (Xid 43 only): whether an Xid 13 / 31 came moments before on the node; None
    when the caller cannot know (one line alone), which leaves NVIDIA's reading of 43, an echo."""
    intrinfo = status = unit = None
    if code in NVLINK5_XIDS:
        m = _NVLINK5.search(text)
        if m:
            unit, intrinfo, status = m.group("unit"), int(m.group("intr"), 16), int(m.group("status"), 16)
    info = lookup(code, intrinfo, error_status=status, unit=unit)
    fault, action, severity, sympathetic = info.fault, info.action, info.severity, info.sympathetic
    if code == 154:
        fault, action, severity, sympathetic = _recovery_action(text, info)
    elif code == 43 and after_app_xid is not None:
        # Alone, 43 is an application fault on that GPU (docs/design.md §3: reattempt, evict if it
        # repeats); after the 13 / 31 that caused it, that error's echo.
        fault, action, sympathetic = "app_fault", "reattempt", after_app_xid
    return XidVerdict(
        code=info.code, fault=fault, action=action, severity=severity, sympathetic=sympathetic, memory=info.memory,
        mnemonic=info.mnemonic, nvidia_action=info.nvidia_action, known=info.known, subcode=info.subcode,
        intrinfo=intrinfo, error_status=status,
    )  # fmt: skip


def _recovery_action(text: str, info: XidInfo) -> tuple[str, str, str, bool]:
    """Xid 154 names the recovery the driver now wants; that, not the code, is the action."""
    m = _RECOVERY.search(text)
    if not m:
        return info.fault, info.action, info.severity, info.sympathetic
    wanted = (m.group("action") or "").lower()
    if "reboot" in wanted or "restart" in wanted:
        kind = "reboot"
    elif "reset" in wanted or "flr" in wanted or "drain" in wanted:
        kind = "reset"  # a PF FLR is a function-level reset of the GPU; a drain ends in a reset
    elif wanted.strip() == "none":
        kind = "none"
    else:
        code = int(m.group("code"), 16)
        kind = _RECOVERY_CODES.get(code, "unknown" if code else "none")
    if kind == "reboot":
        return "gpu_reset_required", "evict", "fatal", False
    if kind in ("reset", "drain"):
        return "gpu_reset_required", "evict_reset_gpu", "fatal", False
    if kind == "unknown":
        # A recovery the driver asks for in words and a number we do not know: a person looks.
        return "gpu_reset_required", "alert", "error", False
    return info.fault, info.action, info.severity, info.sympathetic
