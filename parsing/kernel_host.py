"""The host's own kernel records (parsing.kernel_log hands them here): segfaults, OOM kills, CPU
stalls and panics, PCIe AER errors, machine checks. Each folds its echo lines (an OOM report's
victim and summary, an AER notice's detail, a machine check's register dump) through the parser's
fold memory (parsing.kernel_echoes).
"""

from __future__ import annotations

import re
from typing import Any

from faultlens.parsing.kernel_echoes import Echoes
from faultlens.parsing.kernel_gpu import norm_pci
from faultlens.parsing.line import common
from faultlens.parsing.rules import OOM_HEAD_KEY, OOPS_KEY

Found = list[tuple[str, dict[str, Any]]] | None  # events of one line; [] folded; None not ours

_PCI = r"[0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"

_SEGV = re.compile(
    r"(?:(?:traps: )?(?P<proc>[^\s\[\]]+)\[(?P<pid>\d+)\]:? )?(?P<what>segfault at [0-9a-fA-F]+|general protection(?: fault)?(?= ip:| \d|$|,)|trap [\w ]+?)\b"
)
_SEGV_LIB = re.compile(r" in (?P<lib>[^\[\s]+)(?:\[|$)")

_OOM_KILLED = re.compile(r"(?P<memcg>Memory cgroup out of memory|Out of memory)[^:]*: Kill(?:ed)? process (?P<pid>\d+) \((?P<proc>[^)]*)\)")
# mm/oom_kill.c dump_oom_summary's "oom-kill:constraint=...,task=...,pid=..."; some distribution kernels print "oom kill:"
_OOM_SUMMARY = re.compile(r"oom[- ]kill:.*?\btask=(?P<proc>[^,]*),pid=(?P<pid>\d+)")
# The victim line alone (older kernels print it on its own line, RHEL adds the UID).
_OOM_VICTIM = re.compile(r"Killed process (?P<pid>\d+)(?:,? UID \d+,)? \((?P<proc>[^)]*)\)")
_OOM_REAPED = re.compile(r"oom_reaper: reaped process (?P<pid>\d+)")

_SOFT_LOCKUP = re.compile(r"soft lockup - CPU#(?P<cpu>\d+) stuck for (?P<secs>\d+)s!(?: \[(?P<proc>.+?):(?P<pid>\d+)\])?")
_RCU_STALL = re.compile(r"rcu: INFO: rcu_\w+ (?:self-)?detected stalls? on CPUs?")
_HUNG = re.compile(r"INFO: task (?P<proc>.+?):(?P<pid>\d+) blocked for more than (?P<secs>\d+) seconds")
_PANIC = re.compile(r"Kernel [Pp]anic - (?:not )?syncing:?\s*(?P<text>.*)")
# mm/oom_kill.c's panics for want of memory: check_panic_on_oom's "Out of memory: system-wide|compulsory panic_on_oom is
# enabled" (2.6's "out of memory. panic_on_oom is selected"), out_of_memory's "Out of memory and no killable processes..."
# (before 4.x) and "System is deadlocked on memory" (after): the machine goes down (evict), host memory is the cause.
_OOM_PANIC = re.compile(r"^(?:[Oo]ut of memory\b|System is deadlocked on memory)")

_AER = re.compile(
    r"(?P<reporter>" + _PCI + r"): AER: (?:Multiple )?(?P<type>Corrected|Uncorrected \((?:Non-)?Fatal\)|Uncorrected|Uncorrectable)"
    r" errors? received:\s*(?P<pci>" + _PCI + r")?"
)
# Kernels before 4.x word the header without "severity=": "PCIe Bus Error: Uncorrectable (Non-Fatal), type=...".
# (round 15) newer kernels put "AER: " after the device, whichever driver owns it ("igen6_edac 0000:ed:01.0: AER: PCIe Bus Error:")
_PCIE_BUS = re.compile(r"(?P<pci>" + _PCI + r"): (?:AER: )?PCIe Bus Error: (?:severity=)?(?P<type>Correct(?:ed|able)|Uncorrect(?:ed|able)(?: \((?:Non-)?Fatal\))?)")
# (round 19) aer_print_error's attribution line ("  Error of this Agent(0018) is reported first", newer kernels
# without the id, behind whichever driver owns the device): which device reported, under the record's header, which
# states the severity; alone it names no error.
_AER_AGENT = re.compile(_PCI + r": (?:AER: )?\s*Error of this Agent(?:\([0-9a-f]+\))? is reported first")

# The EDAC core's record of host memory errors: edac_mc.c's "%d %s error(s) on ..." with its count and, (round 44) in
# kernels before 3.x, one error a line with no count (edac_mc_handle_ce/ue's "CE page 0x.., offset ..", the FB-DIMM form
# "CE row 3, channel 0, label ...", "UE - no information available: ..."). CE or UE is the record's own word whatever the
# driver's message after it says ("memory read on FATAL area" names sb_edac's area type, not the error's severity).
_EDAC = re.compile(r"EDAC (?:\w+ )?MC\d+: (?:(?P<count>\d+) (?P<ce>CE|UE) |(?P<legacy>CE|UE) (?=page 0x|row \d|- no information))(?P<text>.*)")
# mce's lines: its own prefix, or the kernel's HW_ERR tag ("[Hardware Error]: ") before a machine check after
# another module's prefix ("core: [Hardware Error]: Machine check: Processor context corrupt", the x86 mce core
# built without mce's pr_fmt, fresh27); GHES's "{1}[Hardware Error]: " records are the firmware's, read elsewhere.
_MCE = re.compile(r"mce: (?:\[Hardware Error\]: )?(?P<text>.*)|(?<!\})\[Hardware Error\]: (?P<hw>(?:CPU \d+: )?Machine [Cc]heck(?! events logged).*)")
# (round 32) An EDAC driver's own print of the machine check it decodes ("EDAC sbridge MC0: CPU 0: Machine Check Event: 0
# Bank 7: cc00050000010092", sb_edac.c / skx_common.c: MCG status, bank, MCi_STATUS): the bank's status register says
# whether the error was corrected (bit 61, UC, clear), not a word of the line.
_EDAC_MCE_EVENT = re.compile(r"\bMachine Check Event: (?:0x)?[0-9a-fA-F]+ Bank (?P<bank>\d+): (?:0x)?(?P<status>[0-9a-fA-F]{1,16})\b")
_MCI_STATUS_UC = 1 << 61
_MCE_EVENT = re.compile(r"Machine [Cc]heck|Uncorrected|[Ff]atal|hardware memory error")
_MCE_UNCORRECTED = re.compile(r"Uncorrected|[Ff]atal|Exception|PCC|[Cc]ontext corrupt")


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def fault_of_library(lib: str | None) -> str | None:
    """The class a crash inside ``lib`` belongs to: NCCL's, CUDA's / the driver's; None for another."""
    name = (lib or "").lower()
    if "nccl" in name:
        return "nccl_error"
    if any(k in name for k in ("cuda", "nvidia", "cublas", "cudnn", "nvrtc", "cupti", "nvjitlink")):
        return "cuda_error"
    return None


def segfault(msg: str, raw: str) -> Found:
    """A user process's crash as the kernel reports it (show_signal_msg: ``comm[pid]: segfault at``,
    ``traps: comm[pid] general protection`` / ``trap divide error``). Inside NCCL or CUDA it is
    theirs, with a stop-time check; in any other code it is the application's own fault
    (``app_fault``), recorded: the kernel names a process, not the job, and the trainer's own report
    of its end is what acts (issue 54 round 14; parsing/rules.toml ``app.*`` reads the OS's other
    records of a crash the same way)."""
    m = _SEGV.search(msg)
    if not m:
        return None
    lm = _SEGV_LIB.search(msg, m.end())
    lib = lm.group("lib") if lm else None
    fault = fault_of_library(lib)
    action = "stop_time_diagnosis" if fault else "none"
    return [("segfault", common(raw, fault or "app_fault", action, "error", process=m.group("proc"), pid=_int(m.group("pid")), lib=lib,
                                text=m.group("what")))]  # fmt: skip


def oom(msg: str, raw: str, echoes: Echoes) -> Found:
    m = _OOM_KILLED.search(msg) or _OOM_SUMMARY.search(msg) or _OOM_VICTIM.search(msg)
    if m:
        pid = int(m.group("pid"))
        head = echoes.recently(OOM_HEAD_KEY)
        echoes.forget(OOM_HEAD_KEY)  # one head, one victim: the next OOM is news
        if echoes.seen(("oom", pid)) or head:
            return []  # an echo, or the victim of the "invoked oom-killer" report just emitted
        cgroup = "Memory cgroup" in msg or "CONSTRAINT_MEMCG" in msg
        return [("oom_kill", common(raw, "host_oom", "restart", "error", pid=pid, process=m.group("proc"), cgroup=cgroup))]
    m = _OOM_REAPED.search(msg)
    if m and echoes.fired(("oom", int(m.group("pid")))):
        return []
    return None


def stall(msg: str, raw: str, echoes: Echoes) -> Found:
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
        if echoes.seen(OOPS_KEY):
            return []  # the end of the oops just emitted
        fault = "host_oom" if _OOM_PANIC.match(m.group("text")) else "kernel"
        return [("panic", common(raw, fault, "evict", "fatal", text=m.group("text")))]
    m = _RCU_STALL.search(msg)
    if m:
        return [("soft_lockup", common(raw, "kernel", "restart", "error", text=m.group(0)))]
    return None


def aer(msg: str, raw: str, echoes: Echoes) -> Found:
    m = _AER.search(msg)
    if m:
        pci = norm_pci(m.group("pci") or m.group("reporter"))
        echoes.seen(("aer", pci))
        return [("pcie_aer", _aer_data(raw, pci, m.group("type")))]
    m = _PCIE_BUS.search(msg)
    if m:
        pci = norm_pci(m.group("pci"))
        if echoes.seen(("aer", pci)):
            return []  # the detail line of the AER notice just emitted
        return [("pcie_aer", _aer_data(raw, pci, m.group("type")))]
    if _AER_AGENT.search(msg):
        return []
    return None


def machine_check(msg: str, raw: str, echoes: Echoes) -> Found:
    m = _EDAC.search(msg)
    if m:
        corrected = (m.group("ce") or m.group("legacy")) == "CE"
        return [("edac", _hw_data(raw, m.group("text"), corrected, count=int(m.group("count") or 1)))]
    m = _EDAC_MCE_EVENT.search(msg) if "Machine Check Event" in msg else None
    if m:
        echoes.seen(("mce", 0))
        corrected = not int(m.group("status"), 16) & _MCI_STATUS_UC
        return [("mce", _hw_data(raw, msg[m.start() :], corrected, bank=int(m.group("bank"))))]
    m = _MCE.search(msg)
    if not m:
        return [] if "EDAC" in msg and echoes.fired(("mce", 0)) else None
    text = m.group("text") or m.group("hw")
    if not _MCE_EVENT.search(text):
        # Register dumps (TSC, ADDR, PROCESSOR ...) that follow the event line.
        return [] if echoes.seen(("mce", 0)) else None
    echoes.seen(("mce", 0))
    corrected = not _MCE_UNCORRECTED.search(text)
    return [("mce", _hw_data(raw, text, corrected))]


def _aer_data(raw: str, pci: str, kind: str) -> dict[str, Any]:
    kind = kind.lower()
    if kind in ("corrected", "correctable"):  # older kernels: "severity=Correctable"
        return common(raw, "kernel", "none", "info", pci=pci, error_type="corrected")
    if "non-fatal" in kind:
        return common(raw, "kernel", "none", "warn", pci=pci, error_type="non_fatal")
    return common(raw, "kernel", "evict", "fatal", pci=pci, error_type="fatal")


def _hw_data(raw: str, text: str, corrected: bool, **extra: Any) -> dict[str, Any]:
    if corrected:
        return common(raw, "kernel", "none", "info", text=text, corrected=True, **extra)
    return common(raw, "kernel", "evict", "fatal", text=text, corrected=False, **extra)
