"""The NVIDIA driver's kernel lines (parsing.kernel_log hands them here): Xid records, a GPU fallen
off the bus (a three-line notice, or a bare line, folded with its Xid 79), NVSwitch SXids.

Stateful where the driver spreads one fault over lines: the NVRM header lines (``GPU at PCI:...``,
``Board Serial Number``, the notice's first and middle lines) are kept for the fall-off record that
follows. What an Xid means is parsing.xid_verdict's to say; this module reads the line.
"""

from __future__ import annotations

import re
from typing import Any

from faultlens.parsing.kernel_echoes import Echoes
from faultlens.parsing.line import common
from faultlens.parsing.xid_verdict import xid_verdict

Found = list[tuple[str, dict[str, Any]]] | None  # events of one line; [] folded; None not ours

# NVRM header lines that may precede a fall-off record.
CONTEXT_LINES = 16

_PCI = r"[0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"

# The designator in the parenthesis is the GPU's PCI address, and on a MIG GPU also its GPU and
# compute instance ("PCI:0000:01:00 GPU-I:05 GPU-CI:02"); a report may elide it ("PCI:..."). The
# code after it is the record: read whatever the parenthesis holds.
_XID = re.compile(r"NVRM: Xid \((?P<designator>[^)]{0,80})\):\s*(?P<code>\d{1,5})\b,?\s*(?P<rest>.*)")
# The driver's Xid loggers dump a record over many lines, each opening with the logger's name
# ("NVRM: _kgspLogXid119: ... GSP Timeout ..."): lines of Xid 119, whose own Xid line names the GPU.
_LOGGER_XID = re.compile(r"NVRM: _?\w*?LogXid(?P<code>\d{1,3}):\s*(?P<rest>.*)")
# (round 32) The driver's robust-channel recovery after an Xid ("krcRcAndNotifyAllChannels_IMPL: RC all channels for
# critical error 79.", kernel_rc_notify.c): its number is the Xid's, as a logger's line is; a journal may drop the NVRM tag.
_RC_ALL = re.compile(r"\bRC all channels for critical error (?P<code>\d{1,3})\b\.?\s*(?P<rest>.*)")
_DESIGNATOR_PCI = re.compile(r"^(?:PCI:)?(?P<pci>" + _PCI + r")\b")
_MIG = re.compile(r"\bGPU-I:\s*(?P<gi>\d+)(?:\s+GPU-CI:\s*(?P<ci>\d+))?")
_PID = re.compile(r"pid=(?:'?<unknown>'?|(?P<pid>\d+))\s*,\s*")
_NAME = re.compile(r"name=(?P<name>[^,]*),\s*")
_GPU_AT = re.compile(r"NVRM: GPU at (?:PCI:)?(?P<pci>" + _PCI + r"):\s*(?P<uuid>GPU-[0-9a-fA-F\-]+)?")
# The first line of the driver's three-line fall-off notice; the third names no PCI address.
_THE_GPU = re.compile(r"NVRM: The NVIDIA GPU (?:PCI:)?(?P<pci>" + _PCI + r")")
_SERIAL = re.compile(r"NVRM: GPU Board Serial Number:\s*(?P<serial>\S*)")
_ANY_PCI = re.compile(r"(?:PCI:)?(" + _PCI + r")")

# SXids NVIDIA's NVSwitch catalogue treats as fatal whatever the line's own word (issue 37 names
# 12028 and the SOE errors 26006-26008); the rest go by the line's "Fatal" / "Non-fatal".
FATAL_SXIDS = frozenset({12028, 26006, 26007, 26008})
_SXID = re.compile(r"(?P<dev>nvidia-nvswitch\d+): SXid \((?:PCI:)?(?P<pci>" + _PCI + r")\):\s*(?P<code>\d+),\s*(?P<rest>.*)")

# Lowered, one of these is on every NVRM line GpuLines.nvrm reads (the tests of its `in` checks);
# the kernel parser's pre-filter holds these rather than "nvrm", which the driver prints on every
# line it writes, most of them news of nothing (module loaded, firmware, persistence).
NVRM_LITERALS = ("xid", "logxid", "gpu at", "the nvidia gpu", "serial", "fallen off the bus", "installed in this system", "rc all channels")


def norm_pci(pci: str) -> str:
    """Xid lines name domain:bus:device, other lines add ``.function``: compare without it."""
    pci = pci.lower()
    return pci.rsplit(".", 1)[0] if "." in pci else pci


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


class GpuLines:
    """The driver's lines of one node's kernel log; ``echoes`` is the parser's fold memory."""

    def __init__(self, echoes: Echoes) -> None:
        self._echoes = echoes
        self._context: dict[str, tuple[int, list[str], dict[str, str]]] = {}
        self._context_pci: str | None = None

    def clear(self) -> None:
        self._context.clear()
        self._context_pci = None

    def nvrm(self, msg: str, raw: str) -> Found:
        n = self._echoes.n
        # Each search only on a line holding its literal (most NVRM lines are none of these).
        m = _XID.search(msg) if "Xid" in msg else None
        if m:
            return self._xid(m, raw)
        m = _LOGGER_XID.search(msg) if "LogXid" in msg else None
        if m:
            return self._logger_line(m, raw)
        m = _RC_ALL.search(msg) if "RC all channels" in msg else None
        if m:
            return self._logger_line(m, raw)
        m = _GPU_AT.search(msg) if "GPU at" in msg else None
        if m:
            pci = norm_pci(m.group("pci"))
            self._context[pci] = (n, [raw], {"uuid": m.group("uuid")} if m.group("uuid") else {})
            self._context_pci = pci
            return None  # a header says nothing wrong by itself
        m = _THE_GPU.search(msg) if "The NVIDIA GPU" in msg else None
        if m:
            pci = norm_pci(m.group("pci"))
            self._context[pci] = (n, [raw], {})
            self._context_pci = pci
            return None
        m = _SERIAL.search(msg) if "Serial" in msg else None
        if m and self._context_pci in self._context:
            at, lines, extra = self._context[self._context_pci]
            lines.append(raw)
            extra["serial"] = m.group("serial")
            return None
        if "fallen off the bus" in msg:
            pm = _ANY_PCI.search(msg.split("NVRM:", 1)[-1])
            if pm:
                return self.gpu_lost(raw, norm_pci(pm.group(1)), None)
            ctx = self._context.get(self._context_pci or "")
            recent = ctx is not None and n - ctx[0] <= CONTEXT_LINES
            return self.gpu_lost(raw, self._context_pci if recent and self._context_pci else "unknown", None)
        if self._context_pci in self._context and "installed in this system" in msg:
            self._context[self._context_pci][1].append(raw)  # the middle line of the notice
            return None
        return None

    def fallen(self, msg: str, raw: str) -> Found:
        """"GPU has fallen off the bus" on a line without the driver's NVRM tag."""
        m = _ANY_PCI.search(msg)
        return self.gpu_lost(raw, norm_pci(m.group(1)) if m else "unknown", None)

    def _xid(self, m: re.Match[str], raw: str) -> Found:
        designator = m.group("designator").strip()
        dm = _DESIGNATOR_PCI.match(designator)
        pci = norm_pci(dm.group("pci")) if dm else "unknown"
        mig = _MIG.search(designator)
        code = int(m.group("code"))
        rest = m.group("rest")
        pid = process = None
        pm = _PID.match(rest)
        if pm:
            pid = _int(pm.group("pid"))
            rest = rest[pm.end():]
        nm = _NAME.match(rest)
        if nm:
            name = nm.group("name").strip().strip("'")
            process = None if name in ("<unknown>", "") else name
            rest = rest[nm.end():]
        text = rest.strip()
        self._echoes.seen(("xid", code))  # the logger's dump lines that follow fold into this record
        if code == 79:
            return self.gpu_lost(raw, pci, 79, pid=pid, process=process, text=text)
        v = xid_verdict(code, text)
        data = common(
            raw, v.fault, v.action, v.severity,
            xid=code, pci=pci, pid=pid, process=process, text=text, mnemonic=v.mnemonic,
            nvidia_action=v.nvidia_action, sympathetic=v.sympathetic,
        )  # fmt: skip
        if mig:
            data["gpu_instance"] = int(mig.group("gi"))
            if mig.group("ci") is not None:
                data["compute_instance"] = int(mig.group("ci"))
        if v.subcode:
            data["subcode"] = v.subcode
        if v.intrinfo is not None:
            data["intrinfo"] = f"0x{v.intrinfo:08x}"
            data["error_status"] = f"0x{v.error_status:08x}"
        return [("xid", data)]

    def _logger_line(self, m: re.Match[str], raw: str) -> Found:
        """A line of an Xid logger's dump (or the channel recovery that follows an Xid): the echo of
        that Xid's record; alone (its Xid line lost), an event of that Xid on a GPU it does not name.
        One event per dump."""
        code = int(m.group("code"))
        if self._echoes.recently(("xid", code)) or self._echoes.seen(("xid_dump", code)):
            return []
        v = xid_verdict(code, m.group("rest"))
        return [("xid", common(raw, v.fault, v.action, v.severity, xid=code, pci="unknown", text=m.group("rest").strip(),
                               mnemonic=v.mnemonic, nvidia_action=v.nvidia_action, sympathetic=v.sympathetic))]  # fmt: skip

    def gpu_lost(self, raw: str, pci: str, xid: int | None, **extra: Any) -> Found:
        if self._echoes.seen(("gpu_lost", pci)):
            return []  # the Xid 79 and the "fallen off the bus" text of one loss
        lines, more = [raw], {}
        ctx = self._context.pop(pci, None)
        if ctx and self._echoes.n - ctx[0] <= CONTEXT_LINES:
            lines = ctx[1] + [raw]
            more = ctx[2]
        # The fall-off text without its Xid line is Xid 79 all the same (NVIDIA's catalogue, and
        # peers such as gpud read it so); xid_inferred says no Xid line was seen.
        v = xid_verdict(79)
        data = common("\n".join(lines), v.fault, v.action, v.severity, pci=pci, **more, **extra)
        data["xid"] = 79 if xid is None else xid
        if xid is None:
            data["xid_inferred"] = True
        return [("gpu_lost", data)]

    def sxid(self, msg: str, raw: str) -> Found:
        m = _SXID.search(msg)
        if not m:
            return None
        rest = m.group("rest").strip()
        key = ("sxid", m.group("dev"), m.group("code"))
        if rest.startswith(("Severity", "Data {", "Data:")):
            if self._echoes.seen(key):
                return []  # detail lines of the SXid just emitted
            # A detail line whose head was lost (rotated, rate-limited): still an SXid of that code.
            code = int(m.group("code"))
            fatal = code in FATAL_SXIDS
            return [("sxid", common(raw, "nvlink", "evict" if fatal else "none", "fatal" if fatal else "warn", sxid=code,
                                    device=m.group("dev"), pci=norm_pci(m.group("pci")), text=rest))]  # fmt: skip
        self._echoes.seen(key)
        fatal = rest.lower().startswith("fatal") or int(m.group("code")) in FATAL_SXIDS
        return [("sxid", common(raw, "nvlink", "evict" if fatal else "none", "fatal" if fatal else "warn",
                                sxid=int(m.group("code")), device=m.group("dev"), pci=norm_pci(m.group("pci")), text=rest))]  # fmt: skip
