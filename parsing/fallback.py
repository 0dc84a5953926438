"""What a parser does with a line its code and its catalogue did not take: the subsystem that wrote
it and how bad it says it is (kernel lines), then the learned model (any line that looks alarming).

Events made here carry ``basis`` (``subsystem`` or ``model``) and a ``finding`` that says how the
line was classified; their action is at most ``alert`` (docs/design.md §1, evidence before
eviction: one generic error line of a disk or a NIC is a suspicion; a repeat or a second signal
is diagnosis's to weigh). Lines neither takes stay unrecognised: counted, mined and shown.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from faultlens.parsing import line_model
from faultlens.parsing import rules as catalogue
from faultlens.parsing.line import common
from faultlens.parsing.needles import NeedleScan, scan
from faultlens.parsing.severity import ERR, WARNING, Severity, says_retrying, severity_of, trainer_level
from faultlens.parsing.subsystems import Attribution, attribute, by_program
from faultlens.parsing.timestamps import program_of

Found = list[tuple[str, dict[str, Any]]]
# The most a line classified by its subsystem or by the model may ask.
CEILING = "alert"
# The model's confidence an error line of a driver the subsystem table names without a class needs (kernel_line).
DRIVER_WITHOUT_CLASS = 0.7
# Levels a program prints before its words: read as a tag by the line's shape, they name no driver.
_LEVEL_WORDS = frozenset(("error", "err", "warning", "warn", "fatal", "critical", "crit", "alert", "emerg", "notice", "info", "debug"))

# (round 27, whole logs) What a guess needs of the line it reads. A login program's connection words are a login's
# (klogind 'Authentication failed from ...: Software caused connection abort', sshd "connection lost: 'Connection
# closed.'", read storage), whatever their tag's host column; a GPU's temperature is a GPU's (a gige switch's
# 'temperature 1 critical' read gpu_thermal); a register's value printed alone is a dump's line, not a statement
# (BGL's 'RAS KERNEL FATAL fpr29=0xffffffff ffffffff ...' read kernel).
_LOGIN_PROGRAM = re.compile(r"(?:^|\s)(?:sshd|klogind|kshd|rlogind|telnetd|login|su|sudo|krb5kdc|kadmind)(?:\[\d+\])?: ")
_NAMES_A_GPU = re.compile(r"(?i)\bgpu|nvidia|\bnvml\b|\bdcgm")
# (round 29) A program probing sysfs' description of the CPUs (ROCm's and hwloc's topology reads of
# /sys/devices/system/node/node0/cpu7/cache/index0/coherency_line_size) fails on a VM or container that hides it:
# an inventory of the host's caches, no device of the job's and nothing failing in the run.
_CPU_TOPOLOGY_PROBE = re.compile(r"/sys/devices/system/(?:cpu|node)/\S*/(?:cache|topology)/")
_REGISTER_ALONE = re.compile(r"(?i)(?:^|\s)[a-z]{1,4}\d{1,2}=0x[0-9a-f]{8,}(?: [0-9a-f]{8,})*\s*$")
# (round 30) A status report's count of none ('ceph -s': '    0 osds down', '0 hosts (0 osds) down'): the program says
# nothing is in that state; the guess read the noun and the state word (nic, then storage).
# (round 34) A storage daemon's words that an operation on its data failed, the subject of its failure (not its own
# set-up: multipathd's 'failed to increase buffer size', a healthy fresh52 row): an I/O errno, or a read, write,
# lookup, fetch, open, list, download, upload or mount that failed, either order ('lookup failed', 'Failed to read',
# 'list_blobs_hierarchical failed').
_DATA_OP_FAILED = re.compile(r"(?i)\bEIO\b|\bInput/output error\b|\bI/O error\b"
                             r"|\b(?:read|write|lookup|fetch|open|list|download|upload|mount|stat)\w* (?:failed|error)\b"
                             r"|\bfail(?:ed|s)? to (?:read|write|lookup|look up|fetch|open|list|download|upload|mount|stat)\b")
_ZERO_COUNT = re.compile(r"^\s*0 [a-z]+(?: \(0 [a-z]+\))? (?:down|failed|degraded|missing|unfound|lost)\s*$")


def _guess_unfounded(fault: str, msg: str, raw: str) -> bool:
    """Whether the line cannot be about the guessed class: a login program's, a GPU class naming no GPU, a register dump, a CPU topology probe, a count of none."""
    if _LOGIN_PROGRAM.search(raw) or _REGISTER_ALONE.search(msg) or _CPU_TOPOLOGY_PROBE.search(msg) or _ZERO_COUNT.match(msg):
        return True
    return fault == "gpu_thermal" and not _NAMES_A_GPU.search(raw)


def kernel_line(msg: str, raw: str, sev: Severity | None = None) -> tuple[Found | None, str]:
    """(events, basis) of an unclaimed kernel line: its subsystem's class when the line is an error
    of a subsystem with a class; the model's guess for another error line; (None, '') otherwise."""
    sev = sev if sev is not None else severity_of(msg, raw)
    if not sev.is_error:
        return None, ""
    att = attribute(msg)
    if att is None or att.fault is None:
        # A daemon's line names no kernel subsystem: the syslog tag of the program that wrote it
        # does (chronyd, ptp4l, rpc.mountd, beegfs-client, ...), when the table knows that program.
        att = by_program(program_of(raw)) or att
    if att is not None and att.fault is not None:
        return [("subsystem_error", _subsystem_data(raw, att, sev))], "subsystem"
    # A driver the table names without a class (radeon, jffs2, rpc.nfsd, a tag read by the line's shape): its error
    # line is guessed on the model's firmer word only, and not where a rule has words for its form (issue 54:
    # tools/fallback_backtest.py, pairs fresh29-56 as met unread: 3 right, 0 wrong, 1 of 1,347 healthy look-alikes fired
    # on the design half, 2 right, 0 wrong, 0 of 567 on the validation half; at the model's 0.6, 3 wrong, 6 fired in design).
    if att is not None and (not names_a_driver(att) or catalogue_knows(msg)):
        return None, ""
    found = model_line(msg, raw, "kernel", severity=sev, threshold=DRIVER_WITHOUT_CLASS if att is not None else line_model.THRESHOLD,
                       subsystem=att.subsystem if att is not None else None)  # fmt: skip
    return found, ("model" if found else "")


def catalogue_knows(msg: str) -> bool:
    """Whether the line holds one of the shipped kernel rules' needles: the catalogue has words for its form,
    and its rule, which left the line, decides what of that form is a fault (libsas's 'Enter
    sas_scsi_recover_host busy: 0 failed: 0' is no guess's)."""
    return _kernel_needles().pattern.search(msg) is not None


@lru_cache(maxsize=1)
def _kernel_needles() -> NeedleScan:
    return scan(frozenset(n for r in catalogue.shipped() if r.applies_to("kernel") for n in r.needles))


def names_a_driver(att: Attribution) -> bool:
    """Whether an attribution's tag can be a driver's: not a level word a program prints first ('error: Munge decode
    failed: Invalid credential'), nor a host label ('local@tbird-admin1 ntpd[1815]: time reset +0.18 s', Thunderbird's
    facility@host before the program, which it hides)."""
    return "@" not in att.tag and att.tag.lower() not in _LEVEL_WORDS


def _subsystem_data(raw: str, att: Attribution, sev: Severity) -> dict[str, Any]:
    how = "known subsystem" if att.known else "driver named by the line's shape, class by its device"
    if att.fault == "unknown":
        how = "known subsystem outside the job's: recorded for the machine's record"
    action = att.action if att.action in ("none", CEILING) else CEILING
    data = common(raw, att.fault or "unknown", action, "error" if action != "none" else "info",
                  rule=f"subsystem.{att.subsystem}", subsystem=att.subsystem, tag=att.tag, basis="subsystem",
                  finding=f"classified by subsystem {att.subsystem} ({how}) and severity ({sev.why()})")  # fmt: skip
    if att.device:
        data["device"] = att.device
    if sev.priority is not None:
        data["priority"] = sev.priority
    return data


def daemon_line(msg: str, raw: str, daemon: Attribution) -> Found | None:
    """A known daemon's line in a job's stream: its subsystem's event when the table gives it a class and the line
    states an error level of its own ('[ERROR]'), or, for a storage daemon, says that an operation on its data failed
    (an I/O errno, 'lookup failed', 'failed to read'); else None (no guess is taken for it)."""
    if daemon.fault in (None, "unknown"):
        return None
    sev = severity_of(msg, raw)
    level = trainer_level(msg)
    if not ((level is not None and level <= ERR) or (daemon.fault == "storage" and sev.is_error and _DATA_OP_FAILED.search(msg))):
        return None
    return [("subsystem_error", _subsystem_data(raw, daemon, sev))]


def model_line(msg: str, raw: str, source: str, *, subsystem: str | None = None, severity: Severity | None = None,
               threshold: float = line_model.THRESHOLD, **extra: Any) -> Found | None:
    """A ``suspect_line`` event when the model names a fault class with confidence, else None."""
    model = line_model.current()
    if model is None:
        return None
    # A guess is the weakest reading: it never outranks the line's own word (issue 54, round 15). A
    # program's line its logger printed at warning, or one that says it will try again, is counted
    # and mined, not alerted on a guess (torchelastic's "[WARNING] Unable to shutdown process ... via
    # SIGTERM", "command failed, retrying after 5 seconds"). Not the kernel's warning level: its
    # drivers print I/O failures at warning ("REISERFS warning (device loop0): ... reading failed").
    if says_retrying(msg) or (source != "kernel" and trainer_level(msg) == WARNING):
        return None
    # (round 21) A daemon's journal line in the job's stream (its syslog tag names a program the subsystem table
    # knows: ceph-osd, beegfs-client, chronyd) is that daemon's, whose class the table gives where the kernel stream
    # reads it; a guess from the job's own lines is not taken for it (the model read ceph-osd's '-1 bluefs
    # _allocate failed' user_code). (round 34) Where the table gives the daemon a class, its error line (by the same
    # severity reading as the kernel stream's, kernel_line) is that class's here too, at most an alert: a FUSE
    # storage client's 'cvmfs2[N]: ... EIO (01): lookup failed' is the storage's, as the kernel stream would class it.
    if source != "kernel" and (daemon := by_program(program_of(raw))) is not None:
        return daemon_line(msg, raw, daemon)
    guess = model.guess(msg, source)
    # A firmer bar than the model's own is read off its confidence (as the guess reports it, to 3 digits).
    if guess is None or guess.confidence < threshold or _guess_unfounded(guess.fault, msg, raw):
        return None
    data = common(raw, guess.fault, CEILING, "warn", rule="model", basis="model", confidence=guess.confidence,
                  finding=f"the line model reads {guess.fault} with confidence {guess.confidence:.2f}; no rule or subsystem took the line"
                  + (f" (driver {subsystem}: no class in the subsystem table)" if subsystem and source == "kernel" else ""),
                  **extra)  # fmt: skip
    if subsystem:
        data["subsystem"] = subsystem
    if severity is not None and severity.priority is not None:
        data["priority"] = severity.priority
    return [("suspect_line", data)]
