"""NCCL's own lines and the ProcessGroupNCCL watchdog's (parsing.trainer_log hands them here): a
collective timeout with its work (sequence number, op, sizes, how long it ran), the watchdog's
last enqueued / completed work, a stuck watchdog, and ``NCCL WARN`` lines (an IB completion
error's code and peer, a CUDA failure NCCL reports).

Pure functions of one line; the trainer parser adds the rank and folds echoes.
"""

from __future__ import annotations

import re
from typing import Any

from faultlens.parsing.alarm import looks_alarming
from faultlens.parsing.cuda_errors import classify_cuda
from faultlens.parsing.errors import classify_nccl, nccl_fault
from faultlens.parsing.line import common


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


# Older torch and cut log lines end at the WorkNCCL(...) arguments, without "ran for N milliseconds".
_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout: (?:WorkNCCL\((?P<args>.*?)\) ran for (?P<elapsed>\d+) milliseconds|WorkNCCL\((?P<cut>.*)\))"
)
_SEQ = re.compile(r"SeqNum=(\d+)")
_OP = re.compile(r"OpType=(\w+)")
_TIMEOUT = re.compile(r"Timeout\(ms\)=(\d+)")
_NUMEL = re.compile(r"Numel(In|Out)=(\d+)")
# torch 2.11 (tests/fixtures/real_gpu/gpu40): "failure detected by watchdog at work sequence id: 2 PG status:
# last enqueued work: 2, last completed work: 1"; older torch: "Timeout at NCCL work: 2, last enqueued NCCL work: ...".
_LAST_WORK = re.compile(
    r"(?:detected by watchdog at work(?: sequence id)?|Timeout at NCCL work): (?P<work>-?\d+),? (?:PG status: )?"
    r"last enqueued (?:NCCL )?work: (?P<enq>-?\d+), last completed (?:NCCL )?work: (?P<done>-?\d+)"
)
_WATCHDOG_STUCK = re.compile(r"watchdog got stuck for (\d+) seconds|Heartbeat monitor timed out")

# NCCL's own prefix (host:pid:tid [device]) is dropped by some collectors and reports: the
# "NCCL WARN" word alone still makes the line NCCL's warning.
NCCL_WARN = re.compile(r"(?:(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:[\w./\-]+:\d+ )?)?NCCL WARN (?P<text>.*)")
# (round 20) a network plugin's WARN in its own logger's format, printed where NCCL's logger is not handed to it
# (aws-ofi-nccl before 1.0: "WARN: Function: find_ofi_provider Line: 543: NET/OFI Couldn't find any optimal provider",
# behind pdsh's host): read as NCCL's WARN of a plugin is (the groups NCCL's prefix has stay empty)
PLUGIN_OWN_WARN = re.compile(r"(?:(?P<host>[\w.\-]+): )?(?P<pid>)(?P<tid>)(?P<dev>)\bWARN: Function: \w+ Line: \d+: (?P<text>NET/\w+ .*)")
# (round 23) NCCL's CUDACHECK text alone, its "NCCL WARN" prefix left out by whoever quoted it ("Cuda failure 1 'invalid
# argument'": checks.h's 'Cuda failure %d \'%s\'', older without the number): the whole line, read as NCCL's WARN of it
BARE_CUDACHECK = re.compile(r"^(?:(?P<host>[\w.\-]+): )?(?P<pid>)(?P<tid>)(?P<dev>)(?P<text>Cuda failure (?:\d+ )?'[^']+')\s*$")
# An IB work completion that failed, as NCCL's IB transports print it: "with error 12, opcode 0"
# (older), "with status=12 opcode=1 len=0 vendor err 129" (newer, NET/IB and NET/IBP).
_IB_COMPLETION = re.compile(
    r"Got completion (?:from peer (?P<peer>\S+) )?with (?:status=(?P<status>\d+)[ ,]*)?(?:error (?P<err>\d+))?"
    r"(?:,? opcode[ =](?P<op>\d+))?"
)


def watchdog(msg: str, raw: str, rank: int | None, extra: dict[str, Any]) -> list[tuple[str, dict[str, Any]]] | None:
    """An ``nccl_timeout`` of the watchdog's line (a timed-out collective, its last work, a stuck watchdog), or None."""
    m = _WATCHDOG.search(msg)
    if m:
        args = m.group("args") if m.group("args") is not None else m.group("cut")
        seq, op, timeout = _SEQ.search(args), _OP.search(args), _TIMEOUT.search(args)
        numel = dict(_NUMEL.findall(args))
        data = common(
            raw, "nccl_error", "reattempt", "error", rank=rank,
            seq=int(seq.group(1)) if seq else None, op=op.group(1) if op else None,
            timeout_ms=int(timeout.group(1)) if timeout else None, elapsed_ms=_int(m.group("elapsed")),
            numel_in=int(numel["In"]) if "In" in numel else None, numel_out=int(numel["Out"]) if "Out" in numel else None, **extra,
        )  # fmt: skip
        return [("nccl_timeout", data)]
    m = _LAST_WORK.search(msg)
    if m:
        return [("nccl_timeout", common(raw, "nccl_error", "reattempt", "error", rank=rank, seq=int(m.group("work")),
                                        last_enqueued=int(m.group("enq")), last_completed=int(m.group("done")), **extra))]  # fmt: skip
    m = _WATCHDOG_STUCK.search(msg)
    if m:
        return [("nccl_timeout", common(raw, "nccl_error", "capture_stacks", "error", rank=rank, seq=None, op=None,
                                        timeout_ms=int(m.group(1)) * 1000 if m.group(1) else None, text=msg.strip()[:512],
                                        **extra))]  # fmt: skip
    return None


# Where a WARN was printed: "file.cc:N" (NCCL's own tree: init.cc, misc/socket.cc, transport/net_ib.cc)
# or a network plugin's file or function, which logs through NCCL's logger under the same WARN word:
# aws-ofi-nccl's nccl_ofi_*.cpp / nccl_net_ofi_*() (aws/aws-ofi-nccl src/), Google's net_fastsocket.cc
# (google/nccl-fastsocket), Mellanox's ib_plugin.c / p2p_plugin.c / ucx_plugin.c
# (Mellanox/nccl-rdma-sharp-plugins src/). NCCL's own net transports sit under transport/.
_WARN_ORIGIN = re.compile(r"(?:^|[\s\]])(?P<file>[\w./\-]+):\d+ NCCL WARN ")
# Words of a plugin's WARN that a set-up it needs is wrong, beyond the alarm words: kept as errors.
_PLUGIN_TROUBLE = re.compile(r"\b(?:wrong|mismatch\w*|invalid|missing|not found|no such|(?:could ?n[o\'’]t|cannot|unable to) find)\b", re.IGNORECASE)
_PLUGIN_FILE = re.compile(r"^(?:net_\w+\.\w+|\w*_plugin(?:\.\w+)?|nccl_(?:net_)?ofi\w*(?:\.\w+)?)$")


# An IB async event is judged by its type (rdma-core libibverbs/enum_strs.c ibv_event_type_str): these say
# a port or a queue pair changed state as it should (a port came up, the subnet manager or a GID or LID
# changed, a connection was established, a queue drained), and NCCL's async thread prints every event at
# WARN (NVIDIA/nccl src/transport/net_ib: ncclIbAsyncThreadMain). The errors (port error, catastrophic,
# work queue and CQ errors) are the nic rules' in parsing/rules.toml.
_INFO_ASYNC_EVENT = re.compile(
    r"\basync event ?: ?(?:port active|LID change|P_Key change|SM change|client reregistration|GID table change|"
    r"communication established|send queue drained|last WQE reached|SRQ limit reached|path migrated)\b", re.IGNORECASE)


# A WARN that advises on a set-up rather than reports a failure: it names what the set-up "can lead
# to" (RCCL's init checks, ROCm/rccl src/init.cc: WARN("Missing \"iommu=pt\" from kernel command line
# which can lead to system instablity or hang!"), also HSA_FORCE_FINE_GRAIN_PCIE and amd_iommu=on,
# printed at every start of a job that then runs). A possibility is no fault; a WARN that also says
# something failed, timed out or could not be done is judged as before.
_ADVICE = re.compile(r"\b(?:can|could|may|might|will) (?:lead to|cause|result in)\b", re.IGNORECASE)
# (round 20) a lookup under a setting the environment leaves unset, its value printed as "(null)" (misc/cudawrap.cc:
# "Failed to find CUDA library in (null) (NCCL_CUDA_PATH=(null))"): the override was not given, NCCL goes on with its
# default search; a lookup that fails under a setting someone gave names its value and still acts.
_UNSET_SETTING = re.compile(r"\b[A-Z][A-Z0-9_]*=\(null\)")
# (round 21) a WARN that says what NCCL does instead ("graph/search.cc: Could not find a path for pattern 1, falling back
# to simple order"): the search or set-up it names found another way and the job goes on; a WARN that names an error
# (a CUDA or NCCL result, an IB call) is judged as before.
_FALLS_BACK = re.compile(r"\bfall(?:s|ing)? back to\b", re.IGNORECASE)
_FAILED = re.compile(r"\b(?:fail\w*|timed out|timeout|abort\w*|unable|cannot|could not|refused|lost)\b", re.IGNORECASE)


def _from_plugin(msg: str) -> bool:
    """Was this WARN printed by a network plugin rather than by NCCL itself (its file names it)?"""
    m = _WARN_ORIGIN.search(msg)
    return m is not None and "/" not in m.group("file") and bool(_PLUGIN_FILE.match(m.group("file")))


def nccl_warn(m: re.Match[str], raw: str, rank: int | None, extra: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The ``nccl_warn`` event of an ``NCCL WARN`` line (``m``: its NCCL_WARN match). NCCL itself
    prints WARN where a call fails (its only level above INFO), so its WARN is the collective's error.
    A network plugin prints its own diagnostics under the same word ("Cannot get incoming CPU.",
    "Maximum retry reached for accept 3." before "Connected after 1000 retries"): a plugin's WARN that
    names no failure is recorded; NCCL's own WARN follows if the transfer does fail."""
    text = m.group("text").strip()
    cuda = classify_cuda(text) if "Cuda failure" in text or "CUDA" in text else None
    named = None if cuda else classify_nccl(text)
    fault, action = (cuda[1], cuda[2]) if cuda else nccl_fault(named) if named else ("nccl_error", "reattempt")
    ib = _ib_failed(text)
    serious = cuda or named or ib or "error" in text.lower()
    quiet = None
    if not serious and not looks_alarming(text) and not _PLUGIN_TROUBLE.search(text) and (m.re is PLUGIN_OWN_WARN or _from_plugin(m.string)):
        action, quiet = "none", "a network plugin's warning that names no failure"
    elif not cuda and _INFO_ASYNC_EVENT.search(text):
        action, quiet = "none", "an IB async event that reports a state change, not an error"
    elif not serious and _ADVICE.search(text) and not _FAILED.search(text):
        action, quiet = "none", "advice on the set-up (what it can lead to), not a failure"
    elif not serious and _UNSET_SETTING.search(text):
        action, quiet = "none", "a lookup under a setting left unset: the default applies"
    elif not serious and _FALLS_BACK.search(text):
        action, quiet = "none", "it falls back to another way and goes on"
    data = common(raw, fault, action, "error" if serious else "warn", rank=rank, text=text,
                  device=int(m.group("dev")) if m.group("dev") else None, host=m.group("host"),
                  pid=int(m.group("pid")) if m.group("pid") else None, **extra)  # fmt: skip
    if quiet:
        data["quiet"] = quiet
    if ib:
        _ib_data(data, ib)
    return "nccl_warn", data


def ib_completion(msg: str, raw: str, rank: int | None, extra: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """An IB work completion that failed, on a line without NCCL's WARN word (a transport plugin's
    own print, ``NET/IBP:Got completion ...``): the same ``nccl_warn`` reading, or None."""
    ib = _ib_failed(msg)
    if ib is None:
        return None
    data = common(raw, "nccl_error", "reattempt", "error", rank=rank, text=msg.strip()[:512], **extra)
    _ib_data(data, ib)
    return "nccl_warn", data


def _ib_failed(text: str) -> re.Match[str] | None:
    m = _IB_COMPLETION.search(text)
    return m if m and (m.group("err") or m.group("status")) and int(m.group("err") or m.group("status")) != 0 else None


def _ib_data(data: dict[str, Any], ib: re.Match[str]) -> None:
    data["ib_error"] = int(ib.group("err") or ib.group("status"))
    if ib.group("op"):
        data["ib_opcode"] = int(ib.group("op"))
    if ib.group("peer"):
        data["peer"] = ib.group("peer")


# NCCL's trace of a failing call, printed at INFO as the error climbs the stack ("bootstrap.cc:701 -> 6",
# "group.cc:75 -> 6 [Async thread]"): the number is the ncclResult_t. 7 (ncclInProgress) is no error.
_TRACE = re.compile(r"\b[\w/.\-]+\.(?:cc|cu|cpp|h):\d+ -> (?P<rc>[1-6])\b(?!\[)")
_RESULTS = {1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError", 4: "ncclInvalidArgument",
            5: "ncclInvalidUsage", 6: "ncclRemoteError"}


def failing_call(msg: str) -> str | None:
    """The ncclResult_t name of an NCCL INFO line that traces a failing call, or None."""
    m = _TRACE.search(msg)
    return _RESULTS[int(m.group("rc"))] if m else None

