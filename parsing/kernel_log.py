"""Kernel log (dmesg, /dev/kmsg, syslog, journald) -> parsed events (docs/events.md, source ``kernel``).

One parser per node's kernel stream. It is stateful only where the kernel spreads one fault over
several lines: the NVRM header lines (``GPU at PCI:...``, ``Board Serial Number``) are kept for the
fall-off-the-bus record that follows, and the echoes of one fault (Xid 79 then "GPU has fallen
off the bus", an OOM "Killed process" then its ``oom-kill:`` summary, an AER notice then its
``PCIe Bus Error`` detail, SXid detail lines) are folded into the first event, which is emitted at
once: a lost GPU should not wait for the next line. The NIC drivers' lines are read by
parsing.kernel_nic.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from faultlens.parsing import fallback
from faultlens.parsing.alarm import ALARM_PRIORITY, kernel_priority
from faultlens.parsing.alarm import QUICK as ALARM_QUICK
from faultlens.parsing.benign import for_source as benign_for
from faultlens.parsing.kernel_nic import netdev_watchdog_events, nic_events
from faultlens.parsing.line import OnUnrecognised, ParsedLine, ParserStats, any_of, clean_line, common
from faultlens.parsing.rules import OOM_HEAD_KEY, OOPS_KEY, LineRule, RuleSet
from faultlens.parsing.severity import QUICK as SEVERITY_QUICK
from faultlens.parsing.severity import Severity, severity_of
from faultlens.parsing.subsystems import subsystem_of
from faultlens.parsing.timestamps import split_timestamp
from faultlens.parsing.xid_table import lookup

# Echoes of one fault arrive within a few lines and seconds; further apart they are a new occurrence.
FOLD_LINES = 64
FOLD_S = 10.0
# NVRM header lines that may precede a fall-off record.
CONTEXT_LINES = 16

_PCI = r"[0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>" + _PCI + r")\):\s*(?P<code>\d{1,5})\b,?\s*(?P<rest>.*)")
_PID = re.compile(r"pid=(?:'?<unknown>'?|(?P<pid>\d+))\s*,\s*")
_NAME = re.compile(r"name=(?P<name>[^,]*),\s*")
_NVLINK5 = re.compile(r"^(?P<unit>[A-Z][A-Z0-9_]+)\b.*?\((?P<intr>0x[0-9a-fA-F]+)\s+(?P<status>0x[0-9a-fA-F]+)")
_RECOVERY = re.compile(r"to 0x[0-9a-fA-F]+ \((?P<action>[^)]*)\)")
_GPU_AT = re.compile(r"NVRM: GPU at (?:PCI:)?(?P<pci>" + _PCI + r"):\s*(?P<uuid>GPU-[0-9a-fA-F\-]+)?")
# The first line of the driver's three-line fall-off notice; the third names no PCI address.
_THE_GPU = re.compile(r"NVRM: The NVIDIA GPU (?:PCI:)?(?P<pci>" + _PCI + r")")
_SERIAL = re.compile(r"NVRM: GPU Board Serial Number:\s*(?P<serial>\S*)")
_ANY_PCI = re.compile(r"(?:PCI:)?(" + _PCI + r")")

# SXids NVIDIA's NVSwitch catalogue treats as fatal whatever the line's own word (issue 37 names
# 12028 and the SOE errors 26006-26008); the rest go by the line's "Fatal" / "Non-fatal".
FATAL_SXIDS = frozenset({12028, 26006, 26007, 26008})
_SXID = re.compile(r"(?P<dev>nvidia-nvswitch\d+): SXid \((?:PCI:)?(?P<pci>" + _PCI + r")\):\s*(?P<code>\d+),\s*(?P<rest>.*)")

_SEGV = re.compile(
    r"(?:(?:traps: )?(?P<proc>[^\s\[\]]+)\[(?P<pid>\d+)\]:? )?(?P<what>segfault at [0-9a-fA-F]+|general protection fault|trap [\w ]+?)\b"
)
_SEGV_LIB = re.compile(r" in (?P<lib>[^\[\s]+)(?:\[|$)")

_OOM_KILLED = re.compile(r"(?P<memcg>Memory cgroup out of memory|Out of memory)[^:]*: Kill(?:ed)? process (?P<pid>\d+) \((?P<proc>[^)]*)\)")
_OOM_SUMMARY = re.compile(r"oom-kill:.*?\btask=(?P<proc>[^,]*),pid=(?P<pid>\d+)")
# The victim line alone (older kernels print it on its own line, RHEL adds the UID).
_OOM_VICTIM = re.compile(r"Killed process (?P<pid>\d+)(?:,? UID \d+,)? \((?P<proc>[^)]*)\)")
_OOM_REAPED = re.compile(r"oom_reaper: reaped process (?P<pid>\d+)")

_SOFT_LOCKUP = re.compile(r"soft lockup - CPU#(?P<cpu>\d+) stuck for (?P<secs>\d+)s!(?: \[(?P<proc>.+?):(?P<pid>\d+)\])?")
_RCU_STALL = re.compile(r"rcu: INFO: rcu_\w+ (?:self-)?detected stalls? on CPUs?")
_HUNG = re.compile(r"INFO: task (?P<proc>.+?):(?P<pid>\d+) blocked for more than (?P<secs>\d+) seconds")
_PANIC = re.compile(r"Kernel [Pp]anic - (?:not )?syncing:?\s*(?P<text>.*)")

_AER = re.compile(
    r"(?P<reporter>" + _PCI + r"): AER: (?:Multiple )?(?P<type>Corrected|Uncorrected \((?:Non-)?Fatal\)|Uncorrected|Uncorrectable)"
    r" errors? received:\s*(?P<pci>" + _PCI + r")?"
)
_PCIE_BUS = re.compile(r"(?P<pci>" + _PCI + r"): PCIe Bus Error: severity=(?P<type>Corrected|Uncorrected \((?:Non-)?Fatal\)|Uncorrected|Uncorrectable)")

_EDAC = re.compile(r"EDAC (?:\w+ )?MC\d+: (?P<count>\d+) (?P<ce>CE|UE) (?P<text>.*)")
_MCE = re.compile(r"mce: (?:\[Hardware Error\]: )?(?P<text>.*)")
_MCE_EVENT = re.compile(r"Machine [Cc]heck|Uncorrected|[Ff]atal|hardware memory error")


# Every literal _code below dispatches on, lowered: with the rules' and the benign table's needles
# and the error and alarm words, a line holding none of them (most of a real log) is settled by one
# scan (KernelLogParser.feed). Keep in step with _code: a test checks each of its literals is here.
CODE_LITERALS = ("kernel panic", "nvrm", "fallen off the bus", "sxid", "segfault at", "traps: ", "out of memory",
                 "oom-kill:", "oom_reaper", "killed process", "lockup", "blocked for more than", "rcu: info", "aer",
                 "pcie bus error", "edac", "mce:", "netdev watchdog", "mlx", "link", "port")


def _prefilter(rules: Sequence[LineRule], benign_needles: Sequence[str]) -> re.Pattern[str] | None:
    """One trie regex (on the lowered message) that every line some part of the parser could take
    matches; None when a rule has no needles (then no line can be ruled out)."""
    if any(not r.needles for r in rules):
        return None
    words = {*CODE_LITERALS, *SEVERITY_QUICK, *ALARM_QUICK, *(n for r in rules for n in r.needles), *benign_needles}
    return any_of({w.lower() for w in words})


def _norm_pci(pci: str) -> str:
    """Xid lines name domain:bus:device, other lines add ``.function``: compare without it."""
    pci = pci.lower()
    return pci.rsplit(".", 1)[0] if "." in pci else pci


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


class KernelLogParser:
    source = "kernel"

    def __init__(self, *, now: float | None = None, rules: Sequence[LineRule] | None = None,
                 on_unrecognised: OnUnrecognised | None = None):
        self.stats = ParserStats()
        self.on_unrecognised = on_unrecognised
        self._now = now
        self._rules = RuleSet.for_source(self.source, rules)
        self._benign = benign_for(self.source)
        self._prefilter = _prefilter(self._rules.rules, self._benign.needles)
        self._n = 0
        self._context: dict[str, tuple[int, list[str], dict[str, str]]] = {}
        self._context_pci: str | None = None
        self._recent: dict[tuple[str, Any], tuple[int, tuple[str, float] | None]] = {}
        self._clock: tuple[str, float] | None = None  # this line's time: its boot clock, wall clock or the caller's

    def feed(self, line: str, *, ts: float | None = None) -> list[ParsedLine]:
        """One raw line; ``ts`` is when it was read (the event's time), used when the line has no clock."""
        self.stats.lines += 1
        self._n += 1
        text = clean_line(line)
        if text is None:
            self.stats.garbled += 1
            return []
        if self._prefilter is not None and not self._prefilter.search(text.lower()):
            # No code literal, needle, benign needle or error word in the line (so none in its message,
            # a suffix of it): only a level of err or worse (the fallback reads it) can still make
            # something of it. Its clock is not read: only a line that fires or folds uses it.
            prio = kernel_priority(text)
            if prio is None or prio > ALARM_PRIORITY:
                self.stats.skipped += 1
                return []
        stamped = split_timestamp(text, now=self._now)
        if stamped.mono is not None:
            self._clock = ("mono", stamped.mono)
        elif stamped.ts is not None or ts is not None:
            self._clock = ("wall", stamped.ts if stamped.ts is not None else ts)
        else:
            self._clock = None
        msg = stamped.message
        if self._benign.match(msg) is not None:
            self.stats.recognised += 1
            self.stats.benign += 1
            return []  # known noise (parsing/benign.toml): no rule may act on it
        found = self._classify(msg, text)
        if found is None:
            sev = severity_of(msg, text)
            found, basis = fallback.kernel_line(msg, text, sev)
            if basis == "subsystem":
                self.stats.by_subsystem += 1
            elif basis == "model":
                self.stats.by_model += 1
            if found is None:
                self.stats.skipped += 1
                self._unrecognised(msg, sev)
                return []
        self.stats.recognised += 1
        self.stats.events += len(found)
        return [ParsedLine(self.source, kind, data, stamped.ts, stamped.mono) for kind, data in found]

    def _unrecognised(self, msg: str, sev: Severity) -> None:
        if sev.alarming or (sev.priority is not None and sev.priority <= ALARM_PRIORITY):
            self.stats.alarming += 1
            if self.on_unrecognised is not None:
                self.on_unrecognised(msg)

    def flush(self) -> list[ParsedLine]:
        """Nothing waits in this parser (records are emitted on their first line); forget context."""
        self._context.clear()
        self._recent.clear()
        self._context_pci = None
        return []

    # -- folding -----------------------------------------------------------------------------
    def _seen(self, key: tuple[str, Any]) -> bool:
        """True when ``key`` fired within FOLD_LINES and FOLD_S; marks it as fired now either way."""
        recent = self._recently(key)
        self._recent[key] = (self._n, self._clock)
        if len(self._recent) > 4096:
            self._recent = {k: v for k, v in self._recent.items() if self._n - v[0] <= FOLD_LINES}
        return recent

    def _recently(self, key: tuple[str, Any]) -> bool:
        """True when ``key`` fired within FOLD_LINES and FOLD_S (marks nothing)."""
        last = self._recent.get(key)
        if last is None or self._n - last[0] > FOLD_LINES:
            return False
        then, now = last[1], self._clock
        # Lines hours apart (the same fault after a restart) are two faults, however few lines lie between.
        return then is None or now is None or then[0] != now[0] or abs(now[1] - then[1]) <= FOLD_S

    # -- dispatch ----------------------------------------------------------------------------
    def _classify(self, msg: str, raw: str) -> list[tuple[str, dict[str, Any]]] | None:
        """Events of one line; [] when the line belongs to a record already emitted; None: not ours.

        The code's records first (they fold over several lines), then the catalogue (parsing/rules.toml
        and the user's --rules files) for the lines the code left."""
        found = self._code(msg, raw)
        return found if found is not None else self._rules.for_subsystem(subsystem_of(msg)).match(msg, raw, self._seen)

    def _code(self, msg: str, raw: str) -> list[tuple[str, dict[str, Any]]] | None:
        if "Kernel panic" in msg or "Kernel Panic" in msg:
            # Before the OOM branch: "Kernel panic - not syncing: Out of memory ..." is a panic.
            return self._stall(msg, raw)
        if "NVRM" in msg:
            return self._nvrm(msg, raw)
        if "fallen off the bus" in msg:
            m = _ANY_PCI.search(msg)
            return self._gpu_lost(raw, _norm_pci(m.group(1)) if m else "unknown", None)
        if "SXid" in msg:
            return self._sxid(msg, raw)
        if "segfault at" in msg or "traps: " in msg:
            return self._segfault(msg, raw)
        if "out of memory" in msg or "Out of memory" in msg or "oom-kill:" in msg or "oom_reaper" in msg or "Killed process" in msg:
            return self._oom(msg, raw)
        if "lockup" in msg or "blocked for more than" in msg or "rcu: INFO" in msg:
            return self._stall(msg, raw)
        if "AER" in msg or "PCIe Bus Error" in msg:
            return self._aer(msg, raw)
        if "EDAC" in msg or "mce:" in msg:
            return self._machine_check(msg, raw)
        if "NETDEV WATCHDOG" in msg:
            return netdev_watchdog_events(msg, raw, self._seen)
        lower = msg.lower()
        if "mlx" in msg or "link" in lower or "port" in lower:
            return nic_events(msg, raw, self._seen)
        return None

    # -- GPU -------------------------------------------------------------------------------
    def _nvrm(self, msg: str, raw: str) -> list[tuple[str, dict[str, Any]]] | None:
        # Each search only on a line holding its literal (most NVRM lines are none of these).
        m = _XID.search(msg) if "Xid" in msg else None
        if m:
            return self._xid(m, raw)
        m = _GPU_AT.search(msg) if "GPU at" in msg else None
        if m:
            pci = _norm_pci(m.group("pci"))
            self._context[pci] = (self._n, [raw], {"uuid": m.group("uuid")} if m.group("uuid") else {})
            self._context_pci = pci
            return None  # a header says nothing wrong by itself
        m = _THE_GPU.search(msg) if "The NVIDIA GPU" in msg else None
        if m:
            pci = _norm_pci(m.group("pci"))
            self._context[pci] = (self._n, [raw], {})
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
                return self._gpu_lost(raw, _norm_pci(pm.group(1)), None)
            ctx = self._context.get(self._context_pci or "")
            recent = ctx is not None and self._n - ctx[0] <= CONTEXT_LINES
            return self._gpu_lost(raw, self._context_pci if recent else "unknown", None)
        if self._context_pci in self._context and "installed in this system" in msg:
            self._context[self._context_pci][1].append(raw)  # the middle line of the notice
            return None
        return None

    def _xid(self, m: re.Match[str], raw: str) -> list[tuple[str, dict[str, Any]]]:
        pci = _norm_pci(m.group("pci"))
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
        if code == 79:
            return self._gpu_lost(raw, pci, 79, pid=pid, process=process, text=text)
        intrinfo = status = unit = None
        if 144 <= code <= 150:
            dm = _NVLINK5.search(text)
            if dm:
                unit, intrinfo, status = dm.group("unit"), int(dm.group("intr"), 16), int(dm.group("status"), 16)
        info = lookup(code, intrinfo, error_status=status, unit=unit)
        fault, action, severity, sympathetic = info.fault, info.action, info.severity, info.sympathetic
        if code == 154:
            fault, action, severity, sympathetic = _recovery_action(text, info)
        data = common(
            raw, fault, action, severity,
            xid=code, pci=pci, pid=pid, process=process, text=text, mnemonic=info.mnemonic,
            nvidia_action=info.nvidia_action, sympathetic=sympathetic,
        )  # fmt: skip
        if info.subcode:
            data["subcode"] = info.subcode
        if intrinfo is not None:
            data["intrinfo"] = f"0x{intrinfo:08x}"
            data["error_status"] = f"0x{status:08x}"
        return [("xid", data)]

    def _gpu_lost(self, raw: str, pci: str, xid: int | None, **extra: Any) -> list[tuple[str, dict[str, Any]]]:
        if self._seen(("gpu_lost", pci)):
            return []  # the Xid 79 and the "fallen off the bus" text of one loss
        lines, more = [raw], {}
        ctx = self._context.pop(pci, None)
        if ctx and self._n - ctx[0] <= CONTEXT_LINES:
            lines = ctx[1] + [raw]
            more = ctx[2]
        data = common("\n".join(lines), "gpu_lost", "evict", "fatal", pci=pci, **more, **extra)
        # The fall-off text without its Xid line is Xid 79 all the same (NVIDIA's catalogue, and
        # peers such as gpud read it so); xid_inferred says no Xid line was seen.
        data["xid"] = 79 if xid is None else xid
        if xid is None:
            data["xid_inferred"] = True
        return [("gpu_lost", data)]

    def _sxid(self, msg: str, raw: str) -> list[tuple[str, dict[str, Any]]] | None:
        m = _SXID.search(msg)
        if not m:
            return None
        rest = m.group("rest").strip()
        key = ("sxid", m.group("dev"), m.group("code"))
        if rest.startswith(("Severity", "Data {", "Data:")):
            if self._seen(key):
                return []  # detail lines of the SXid just emitted
            # A detail line whose head was lost (rotated, rate-limited): still an SXid of that code.
            code = int(m.group("code"))
            fatal = code in FATAL_SXIDS
            return [("sxid", common(raw, "nvlink", "evict" if fatal else "none", "fatal" if fatal else "warn", sxid=code,
                                    device=m.group("dev"), pci=_norm_pci(m.group("pci")), text=rest))]  # fmt: skip
        self._seen(key)
        fatal = rest.lower().startswith("fatal") or int(m.group("code")) in FATAL_SXIDS
        return [("sxid", common(raw, "nvlink", "evict" if fatal else "none", "fatal" if fatal else "warn",
                                sxid=int(m.group("code")), device=m.group("dev"), pci=_norm_pci(m.group("pci")), text=rest))]  # fmt: skip

    # -- host --------------------------------------------------------------------------------
    def _segfault(self, msg: str, raw: str) -> list[tuple[str, dict[str, Any]]] | None:
        m = _SEGV.search(msg)
        if not m:
            return None
        lm = _SEGV_LIB.search(msg, m.end())
        lib = lm.group("lib") if lm else None
        name = (lib or "").lower()
        if "nccl" in name:
            fault = "nccl_error"
        elif any(k in name for k in ("cuda", "nvidia", "cublas", "cudnn", "nvrtc", "cupti", "nvjitlink")):
            fault = "cuda_error"
        else:
            fault = "unknown"
        return [("segfault", common(raw, fault, "stop_time_diagnosis", "error", process=m.group("proc"), pid=_int(m.group("pid")), lib=lib,
                                    text=m.group("what")))]  # fmt: skip

    def _oom(self, msg: str, raw: str) -> list[tuple[str, dict[str, Any]]] | None:
        m = _OOM_KILLED.search(msg) or _OOM_SUMMARY.search(msg) or _OOM_VICTIM.search(msg)
        if m:
            pid = int(m.group("pid"))
            head = self._recently(OOM_HEAD_KEY)
            self._recent.pop(OOM_HEAD_KEY, None)  # one head, one victim: the next OOM is news
            if self._seen(("oom", pid)) or head:
                return []  # an echo, or the victim of the "invoked oom-killer" report just emitted
            cgroup = "Memory cgroup" in msg or "CONSTRAINT_MEMCG" in msg
            return [("oom_kill", common(raw, "host_oom", "restart", "error", pid=pid, process=m.group("proc"), cgroup=cgroup))]
        m = _OOM_REAPED.search(msg)
        if m and self._recent.get(("oom", int(m.group("pid")))):
            return []
        return None

    def _stall(self, msg: str, raw: str) -> list[tuple[str, dict[str, Any]]] | None:
        m = _SOFT_LOCKUP.search(msg)
        if m:
            return [("soft_lockup", common(raw, "kernel", "restart", "error", process=m.group("proc"), pid=_int(m.group("pid")),
                                           cpu=int(m.group("cpu")), text=m.group(0)))]  # fmt: skip
        m = _HUNG.search(msg)
        if m:
            return [("hung_task", common(raw, "kernel", "restart", "error", process=m.group("proc"), pid=int(m.group("pid")),
                                         text=m.group(0)))]  # fmt: skip
        m = _PANIC.search(msg)
        if m:
            if self._seen(OOPS_KEY):
                return []  # the end of the oops just emitted
            return [("panic", common(raw, "kernel", "evict", "fatal", text=m.group("text")))]
        m = _RCU_STALL.search(msg)
        if m:
            return [("soft_lockup", common(raw, "kernel", "restart", "error", text=m.group(0)))]
        return None

    def _aer(self, msg: str, raw: str) -> list[tuple[str, dict[str, Any]]] | None:
        m = _AER.search(msg)
        if m:
            pci = _norm_pci(m.group("pci") or m.group("reporter"))
            self._seen(("aer", pci))
            return [("pcie_aer", _aer_data(raw, pci, m.group("type")))]
        m = _PCIE_BUS.search(msg)
        if m:
            pci = _norm_pci(m.group("pci"))
            if self._seen(("aer", pci)):
                return []  # the detail line of the AER notice just emitted
            return [("pcie_aer", _aer_data(raw, pci, m.group("type")))]
        return None

    def _machine_check(self, msg: str, raw: str) -> list[tuple[str, dict[str, Any]]] | None:
        m = _EDAC.search(msg)
        if m:
            corrected = m.group("ce") == "CE"
            return [("edac", _hw_data(raw, m.group("text"), corrected, count=int(m.group("count"))))]
        m = _MCE.search(msg)
        if not m:
            return [] if "EDAC" in msg and self._recent.get(("mce", 0)) else None
        text = m.group("text")
        if not _MCE_EVENT.search(text):
            # Register dumps (TSC, ADDR, PROCESSOR ...) that follow the event line.
            return [] if self._seen(("mce", 0)) else None
        self._seen(("mce", 0))
        corrected = not re.search(r"Uncorrected|[Ff]atal|Exception|PCC", text)
        return [("mce", _hw_data(raw, text, corrected))]


def _aer_data(raw: str, pci: str, kind: str) -> dict[str, Any]:
    kind = kind.lower()
    if kind == "corrected":
        return common(raw, "kernel", "none", "info", pci=pci, error_type="corrected")
    if "non-fatal" in kind:
        return common(raw, "kernel", "none", "warn", pci=pci, error_type="non_fatal")
    return common(raw, "kernel", "evict", "fatal", pci=pci, error_type="fatal")


def _hw_data(raw: str, text: str, corrected: bool, **extra: Any) -> dict[str, Any]:
    if corrected:
        return common(raw, "kernel", "none", "info", text=text, corrected=True, **extra)
    return common(raw, "kernel", "evict", "fatal", text=text, corrected=False, **extra)


def _recovery_action(text: str, info: Any) -> tuple[str, str, str, bool]:
    """Xid 154 names the recovery the driver now wants; that, not the code, is the action."""
    m = _RECOVERY.search(text)
    wanted = m.group("action").lower() if m else ""
    if "reboot" in wanted:
        return "gpu_reset_required", "evict", "fatal", False
    if "reset" in wanted or "drain" in wanted:
        return "gpu_reset_required", "evict_reset_gpu", "fatal", False
    return info.fault, info.action, info.severity, info.sympathetic
