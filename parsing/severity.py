"""How bad a kernel line says it is: the priority its own format carries, else its words.

The kernel states a level with every record (``/dev/kmsg``'s ``3,123,456,-;`` header, printk's
``<3>``, ``dmesg -x``'s ``kern :err :``); the node agent's kmsg follower keeps that header on the
line (collectors/kernel_follower.py), so the level is read here, not guessed. Lines read from a
file or ``dmesg`` without ``-x`` carry none: then the words decide (error, fail, timeout, abort,
corruption, medium error, lost, reset, unrecoverable, ...), with the phrases that say the opposite
(``no errors``, the mount option ``errors=remount-ro``) taken out first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from faultlens.parsing.alarm import QUICK as ALARM_QUICK
from faultlens.parsing.alarm import kernel_priority, looks_alarming
from faultlens.parsing.line import any_of

# Syslog levels: 0 emerg, 1 alert, 2 crit, 3 err, 4 warning, 5 notice, 6 info, 7 debug.
ERR = 3
WARNING = 4
NOTICE = 5
_LEVELS = {"emerg": 0, "alert": 1, "crit": 2, "critical": 2, "err": 3, "error": 3, "warn": 4, "warning": 4,
           "notice": 5, "info": 6, "debug": 7}
# The level a line states in words where its format carries no number: a subsystem's own level
# after its tag ("BTRFS info (device sdb1):", "EXT4-fs warning (device sda1):", "ACPI Error:"),
# syslog's facility.level ("kern.info"), a daemon's "[INFO]" or "level=info" near the start.
# Not a leading "INFO:": the hung-task and RCU-stall reports start so at err.
_LEVEL_WORD = re.compile(
    r"^(?:kernel: )?[\w.\-/]+ (?P<tagged>emerg|alert|crit|critical|err|error|warn|warning|notice|info|debug)(?= \(|:)"
    r"|^.{0,40}?\bkern(?:el)?\.(?P<fac>emerg|alert|crit|err|warn|warning|notice|info|debug)\b"
    r"|^.{0,40}?(?:\[\s*(?P<br>EMERG|ALERT|CRIT|CRITICAL|ERR|ERROR|WARN|WARNING|NOTICE|INFO|DEBUG)\s*\]|\blevel=(?P<kv>\w+))"
    # Lustre's and LNet's tag is their level: CERROR / CNETERR print "LustreError:" / "LNetError:"
    # (libcfs_debug_msg: D_ERROR -> "Error"), CWARN "Lustre:" (no level word, the words decide)
    r"|^(?:kernel: )?(?:Lustre|LNet)(?P<lus>Error):"
    # A daemon's one-letter level in brackets opening its message, as GPFS's mmfsd writes it to syslog
    # ("mmfs[4242]: [E] Unable to contact any quorum nodes", IBM Spectrum Scale's message severity tags:
    # A alert, X critical, E error, W warning, N notice, I info, D debug); upper case only
    r"|^(?-i:\[(?P<letter>[AXEWNID])(?::\d+)?\] )"
    # (round 35) a daemon's Go logger that writes its program, pid and level in angle brackets after the clock
    # ("2022/01/04 10:00:23.245840 juicefs[7] <ERROR>: flush 580362 timeout ...", JuiceFS's and its embedded badger's
    # format, utils/logger.go): the bracketed word is the level, upper case only
    r"|^.{0,48}?[\w.\-]\[\d+\] (?-i:<(?P<ang>EMERG|ALERT|CRIT|CRITICAL|ERR|ERROR|WARN|WARNING|NOTICE|INFO|DEBUG|TRACE|FATAL|PANIC)>):"
    # (round 36) libqb's syslog format, which pacemaker and corosync's daemons print through: the program's tag, then its
    # level in lower case and a colon ("pacemaker-controld[3730]:  notice: Node node1 state is now lost", older "crmd:
    # notice: crm_update_peer_state_iter: ...", or the message alone once the tag is taken off as the line's prefix).
    # Only the levels under a warning: its warning and error keep the words' reading, as UCX's and TensorFlow's letters do
    r"|^(?:.{0,80}?(?<![\w.\-])[A-Za-z][\w.\-]*(?:\[\d+\])?: +| *)(?-i:(?P<qb>notice|info|debug)): "
    # (round 43) a firmware error record's own severity field, as the kernel prints a CPER record (GHES, drivers/firmware/efi
    # cper.c: "{1}[Hardware Error]: event severity: info", a section's "Error 0, type: info"): cper_severity_str's "info" is
    # the record's informational severity (CPER_SEV_INFORMATIONAL), the record's own level word. Only that one: its
    # recoverable and fatal keep the words' reading, its corrected is the reassured word's
    r"|\[Hardware Error\]: +(?:event severity|Error \d+, type): (?P<cper>info)\b",
    re.IGNORECASE,
)
_ANGLE_LEVELS = {**_LEVELS, "trace": 7, "fatal": 2, "panic": 0}
_LETTERS = {"A": 1, "X": 2, "E": 3, "W": 4, "N": 5, "I": 6, "D": 7}
# Words by which a line says its trouble is over or none: "read error corrected", "recovered",
# "Successfully unregistered ...", "no action required". Taken back by a negation before them
# ("not recovered", "failed to recover", "could not be corrected").
# "fixed up" is btrfs's word for a bad copy rewritten from a good one; "succeeded" ends a reset.
# (round 15) So do the words by which a program says what it does instead, the failure handled: "falling back to
# bit banging", "rebuilding it now" (btrfs's free-space cache), "Manually zeroing." (WRITE SAME refused), a feature
# it turned off ("DCB init failed -63, disabled", GHES's "..., disabled."), "Using default config": in the corpus
# every line with them is healthy; "continuing anyway" is not among them (a NaN norm's warning says it).
# (round 19) "successful" closing a clause states an outcome ("Firmware reset request successful.", "PTP reset
# successful", "device recovery successful"); before a noun it is a tally or a subject ("7 successful", "successful
# NUMA node read ... had negative value") and says nothing of the line's outcome.
_REASSURED = re.compile(r"\b(?:corrected|recovered|successfully|succeeded|fixed up|no action (?:is )?(?:required|needed))\b"
                        r"|(?<!\d )\bsuccessful(?=\s*(?:[.,;:]|$))"
                        r"|\bfall(?:s|ing)? back to\b|\bwill fallback to\b|\brebuilding it now\b|\bmanually zeroing\b|, disabled\.?\s*$"
                        r"|\busing (?:the )?default\b"
                        # (round 37) a check that says it found nothing wrong closes its own failure word ("File system
                        # check failed but did not detect errors", "scrub did not find any errors"): its outcome is clean
                        r"|\b(?:did not|didn't) (?:detect|find) (?:any )?(?:errors?|problems?|corruption)\b", re.IGNORECASE)
_NEGATED = re.compile(r"\b(?:not|never|cannot|can.t|couldn.t|unable to|failed to|fails to)\b[^.;,]{0,24}?\b(?:be )?(?:corrected|recover|fixed up|succeed|successful)"
                      r"|\bunsuccessfully\b", re.IGNORECASE)
_REASSURE_QUICK = any_of(("corrected", "recovered", "successful", "succeeded", "fixed up", "no action", "fall back", "falls back", "will fallback",
                          "falling back", "rebuilding it", "manually zeroing", ", disabled", "using default", "using the default",
                          "did not detect", "did not find", "didn't detect", "didn't find"))

_QUICK = ("err", "fail", "unable to", "can not", "cannot", "could not", "couldn't", "can't", "!= expected", "!=expected", "did not complete", "time", "abort", "corrupt", "lost", "reset", "unrecover", "uncorrect", "fatal", "critical",
          "stall", "hung", "offline", "not respond", "panic", "rc = -", "status: -", "protection fault",
          "oops", "lockup", "bug:", "starv", "hang", "exception", "null pointer", "unable to handle", "checksum", "csum", "crc",
          "bad block", "bad sector", "status -", "unreadable", "rc=-", "rdma_cm_event_", "io_page_fault")
_QUICK_RE = any_of(_QUICK)
# The literals one of which every error word holds (parsing.kernel_log builds its pre-filter on them),
# with those of the level words of err or worse (kern.crit, [EMERG], level=alert; "err" is one already).
QUICK = _QUICK + ("crit", "emerg", "alert")
# Either vocabulary's literals: a line holding none (most lines) is settled by one scan.
_ANY_QUICK = any_of(set(_QUICK) | set(ALARM_QUICK))
# Words of trouble, as words. "reset" counts: a device reset by its driver is a fault's symptom.
_WORDS = re.compile(
    r"\b(?:errors?|err|fail(?:s|ed|ure|ures|ing)?|time ?outs?|timed out|abort(?:s|ed|ing)?|corrupt\w*|"
    r"medium error|lost|resets?|"
    # (round 20) a driver that could not get what its device needs (MMIO mapped, MSI-X vectors reserved, DMA memory
    # allocated: "mpt3sas_cm0: unable to map adapter memory!", "ena ...: Can not reserve msix vectors"), or a device
    # operation that never finished ("e1000e ...: MDI Write did not complete"): the device is not usable
    # (round 35) in every spelling of not being able ("Couldn't create ib_mad QP1", ionic's RDMA device: its queue pair
    # or object not created is the same want as one not allocated)
    r"(?:unable to|can ?not|can't|could(?: not|n't)) (?:map|reserve|allocate|request|enable|create)|did not complete|resetting|unrecoverable|unreadable|uncorrect(?:able|ed)|fatal|critical|stalls?|stalled|hung|"
    r"offline|not responding|(?:has )?not responded|panic|general protection fault|oops|(?:soft|hard) lockup|starved|hangs?|exception|null pointer dereference|"
    r"unable to handle kernel|"
    # corruption by its other words: a checksum that does not match, a block the device cannot serve
    # (round 36) and by its other name, a CRC (libceph's "osd1 (1)10.0.0.1:6800 bad crc/signature": a message whose
    # checksum did not match on the wire to the storage)
    r"(?:invalid|bad|wrong|incorrect) (?:checksums?|crcs?)|(?:checksum|crc) mismatch|csum failed|bad (?:block|sector)s?(?! list| log))\b|"
    # a status that is a negative errno (rc = -5, status: -110, a USB NIC's "Tx status -71") is a failure
    r"\bBUG: |\brc ?= ?-\d+|status:? -\d+|"
    # (round 35) a driver's own consistency check that failed, printed as an inequality with what it expected (bnxt_en's
    # "TPA end agg_buf 2 != expected agg_bufs 1": the ring's aggregation state is not what the hardware said)
    r"\S != ?expected\b|"
    # librdmacm's failed connection events as a program names them (rdma_event_str: an address or route
    # not resolved, the peer unreachable or refusing, the device removed), before the word "error" or without it
    r"\bRDMA_CM_EVENT_(?:ADDR_ERROR|ROUTE_ERROR|CONNECT_ERROR|UNREACHABLE|REJECTED|DEVICE_REMOVAL)\b|"
    # the AMD IOMMU's record of a device's DMA to an address it was not given (amd_iommu_report_page_fault, round 17):
    # behind the device's driver tag ("ice 0000:c7:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=...]") it is that
    # device's; naming the device by its address alone ("[IO_PAGE_FAULT device=00:14.0 ...]": no driver holds it, a
    # device the job does not drive, firmware at boot) it is no word of trouble. (round 45) Both forms, whole, are read
    # first by parsing/rules.toml kernel.iommu_dma_fault (kernel, an alert); this word serves the lines it does not take
    r"\bIO_PAGE_FAULT\b(?! device=)",
    re.IGNORECASE,
)
# Phrases whose error words say all is well; removed before the words are read.
_NEUTRAL = re.compile(
    # a count of none, with what kind of errors between ("0 uncorrectable hardware errors detected in umc block",
    # amdgpu_ras.c's per-query report; "no new uncorrectable errors")
    r"\b(?:no|0|zero|without) (?:(?:new|uncorrectable|correctable|hardware|ecc|fatal|media|i/o) ){0,3}(?:errors?|failures?)\b|errors=[\w-]+|error[_ ]?(?:handling|recovery) (?:enabled|supported)|"
    r"\berror count(?:er)?s? (?:cleared|reset)|reset (?:done|complete[d]?)|\bnot (?:an )?error\b|"
    # "correctable errors", and with what they were in between: amdgpu's RAS "2 correctable hardware
    # errors detected in umc block" (drivers/gpu/drm/amd/amdgpu/amdgpu_ras.c, dev_info)
    r"\b(?:link|port) reset\b|\bresets? (?:to|the) default|\bcorrect(?:able|ed) (?:[a-z]+ )?errors?\b|"
    r"\berrors? (?:collector|handler|handling|reporting|injection|detection|containment)\b|"
    # a setting stated, not an event: "Shutdown timeout set to 10 seconds", "timeout value is 30"
    r"\btime ?outs? (?:(?:value )?(?:set to|is|=)|of \d+ ?\w*$)|"
    # a capability, not an event: bonding's load-time advice "otherwise bonding will not detect link failures"
    r"\bdetect (?:\w+ )?failures?\b|"
    # (round 29) a controller's missing feature, stated at probe: hpsa's "Logical aborts not supported", "HP SSD Smart
    # Path aborts not supported" (hpsa.c hpsa_find_board_params) name what the board cannot do, no abort that happened
    r"\baborts? (?:are )?not supported\b|"
    # a FreeBSD device attach names the device by its description in angle brackets
    # ("apei0: <ACPI Platform Error Interface> on acpi0"): the words there are a name
    r"^\w+\d+: <[^<>]*>(?= (?:on|at) \w)",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Severity:
    """``priority``: the level the line carried (None: none); ``words``: the error words read;
    ``alarming``: parsing.alarm's verdict on the words (what the unrecognised-line miner hears)."""

    priority: int | None
    words: tuple[str, ...]
    alarming: bool = False
    # The line says its trouble is over or none ("corrected", "recovered", "successfully", ...).
    reassured: bool = False

    @property
    def is_error(self) -> bool:
        """An error by its own level (err or worse), or, with no level, by its words. A level of
        notice or below wins over words: the kernel printed it as information; so does a line
        that says its trouble was corrected or recovered."""
        if self.reassured:
            return False
        if self.priority is not None:
            return self.priority <= ERR or (self.priority == WARNING and bool(self.words))
        return bool(self.words)

    @property
    def says_quiet(self) -> str | None:
        """Why the line's own words or level say it is no alert on its own (None: they do not):
        a level of notice or below, or words that its trouble is over."""
        if self.priority is not None and self.priority >= NOTICE:
            return f"the line's own level is {_NAMES[self.priority]}"
        if self.reassured:
            return "the line says its trouble was corrected or recovered"
        return None

    def why(self) -> str:
        parts = []
        if self.priority is not None:
            parts.append(f"priority {self.priority}")
        if self.reassured:
            parts.append("says corrected / recovered")
        if self.words:
            parts.append("words: " + ", ".join(self.words))
        return "; ".join(parts) or "no sign of trouble"


def error_words(message: str) -> tuple[str, ...]:
    """The error words of ``message`` (lowered, unique, in order), without the neutral phrases."""
    low = message.lower()
    if not _QUICK_RE.search(low):
        return ()
    if "error" in low or "reset" in low or "fail" in low or "time" in low or "abort" in low:
        message = _NEUTRAL.sub(" ", message)
    seen: dict[str, None] = {}
    for m in _WORDS.finditer(message):
        seen.setdefault(m.group(0).lower(), None)
    return tuple(seen)


def level_word(message: str) -> int | None:
    """The syslog level the message states in words (``BTRFS info (device ...)``, ``kern.info``,
    ``[INFO]``, ``level=info``), or None."""
    m = _LEVEL_WORD.search(message[:160])
    if not m:
        return None
    if m.group("letter"):
        return _LETTERS[m.group("letter")]
    if m.group("ang"):
        return _ANGLE_LEVELS[m.group("ang").lower()]
    return _LEVELS.get((m.group("tagged") or m.group("fac") or m.group("br") or m.group("kv") or m.group("lus") or m.group("qb")
                        or m.group("cper") or "").lower())


# The level a trainer's or a library's log line states before its message, in the logging formats
# that print it: NCCL's "NCCL INFO" / "NCCL TRACE" (src/include/debug.h), Python logging's
# "INFO:name:", "name - INFO - " and "[INFO]" (logging's %(levelname)s), loguru's "| INFO     |",
# Hugging Face's "[INFO|trainer.py:12]", and glog / c10's "I0722 21:51:23.405504" (the letter is the
# level: I info, W warning, E error, F fatal), also inside c10d's "[I722 ...]". The word must be
# the format's level, upper case, in the line's head, with no exception's name before it
# ("ValueError: INFO field missing" is an error about a field). Python logging's WARNING too (round 15:
# a guess never outranks it, parsing.fallback); not "WARN", NCCL's and older NCCL's failure level.
_TRAINER_LEVEL = re.compile(
    r"^(?P<head>.{0,48}?)(?:(?<![\w.])(?P<word>INFO|DEBUG|TRACE|NOTICE|WARNING)(?=\s*[:\]|\-]|\s)"
    r"|(?<![\w.])\[?(?P<glog>[IWEF])\d{3,4} \d\d:\d\d:\d\d\.\d+)")
_TRAINER_LEVELS = {"INFO": 6, "NOTICE": 5, "DEBUG": 7, "TRACE": 7, "WARNING": 4, "I": 6, "W": 4, "E": 3, "F": 2}


# (round 31) UCX's log format puts its level after the time, host and source line, past the head above:
# "[1629615907.891300] [mlx-stud-01:26236:0]   mm_posix.c:326  UCX  DEBUG   shared memory mmap(...) failed".
# (The time may already be taken off as the line's stamp.) Only the levels under a warning: UCX's WARN and ERROR keep the words' reading.
_UCX_LEVEL = re.compile(r"^\s*(?:\[[\d.]+\]\s+)?\[[^\]]+\]\s+\S+:\d+\s+UCX\s+(?P<word>INFO|DEBUG|TRACE\w*|REQ|DATA|ASYNC|FUNC|POLL)\s")
_UCX_LEVELS = {"INFO": 6}
# (G15) TensorFlow's and Horovod's C++ log format states its level by one letter between the time and the source
# line: "2020-09-11 07:07:20.657297: D horovod/common/operations.cc:537] ..." (TF's LogMessage "IWEF", Horovod's
# "TDIWEF"; the time may already be taken off as the line's stamp). Its E and F keep the words' reading (and
# parsing.level_subject's), as UCX's do.
# (round 46) Its W letter too, read as Python logging's WARNING and glog's W are (a guess never outranks it, parsing.fallback:
# XLA's "W external/xla/xla/service/hlo_rematerialization.cc:2941] Can't reduce memory use below ..." is a compile-time
# note); the rules still read a W line's words (the BFC allocator's failed allocation is printed at W).
_CC_LEVEL = re.compile(r"^(?:\[?\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: )?(?P<letter>[TDIW]) [\w.\-/]+\.\w+:\d+\] ")
_CC_LEVELS = {"T": 7, "D": 7, "I": 6, "W": 4}
# (round 46) NeMo's logger states its level by one letter after its name in brackets (nemo/utils/formatters/base.py:
# "[NeMo %(levelname)1.1s %(asctime)s %(module)s:%(lineno)d]": "[NeMo W 2025-03-14 09:12:40 nemo_logging:349] ..."):
# D debug, I info, W warning, E error, C critical.
_NEMO_LEVEL = re.compile(r"\[NeMo (?P<letter>[DIWEC]) \d{4}-\d\d-\d\d \d\d:\d\d:\d\d [\w.\-]+:\d+\]")
_NEMO_LEVELS = {"D": 7, "I": 6, "W": 4, "E": 3, "C": 2}


def trainer_level(message: str) -> int | None:
    """The syslog level a trainer-side line states in its logging format's own word (``NCCL INFO``,
    ``- INFO -``, ``[INFO]``, ``I0722 10:00:00.1``, UCX's ``UCX  DEBUG``, TF's and Horovod's ``D file.cc:537]``), else the level :func:`level_word`
    reads, else None."""
    if " UCX " in message and (u := _UCX_LEVEL.match(message)):
        return _UCX_LEVELS.get(u.group("word"), 7)
    if "] " in message and (c := _CC_LEVEL.match(message)):
        return _CC_LEVELS[c.group("letter")]
    if "[NeMo " in message and (n := _NEMO_LEVEL.search(message, 0, 80)):
        return _NEMO_LEVELS[n.group("letter")]
    if "INFO" in message or "DEBUG" in message or "TRACE" in message or "NOTICE" in message or "WARNING" in message or ":" in message[:24]:
        m = _TRAINER_LEVEL.match(message)
        if m and "Error" not in m.group("head") and "Exception" not in m.group("head"):
            return _TRAINER_LEVELS[m.group("word") or m.group("glog")]
    return level_word(message)


# A program that says it will try again (issue 54, round 15): "command failed, retrying after 5 seconds",
# wandb's "encountered retryable exception": the failure is not its last word; if it is, the giving-up
# line says so. Never a guess's alert on its own (parsing.fallback), nor generic socket words'. "non-retryable"
# says the opposite (nfs-ganesha's "Error I/O error ... but was set non-retryable", fresh48: read as a retry).
# (round 48) also a retry loop's note that one attempt failed (W&B's retry.py logs "Retry attempt failed:" with the
# exception, then sleeps and tries again; it raises on the last): not a last or final attempt's, nor one that gives up.
_RETRYING = re.compile(r"\bretrying\b|(?<!non-)\bretryable\b|\bwill (?:be )?retr(?:y|ied)\b|\bretry(?:ing)? (?:in|after) \d"
                       r"|(?<!last )(?<!final )\bretry attempt(?: #?\d+(?:/\d+| of \d+)?)? failed\b(?![^\n]*\b(?:giving up|gave up|no more retries|aborting)\b)",
                       re.IGNORECASE)


def says_retrying(message: str) -> bool:
    """The line says the program will try again (``retrying after 5 seconds``, ``retryable``)."""
    return "etr" in message and _RETRYING.search(message) is not None


# (round 46) A Python logging record at WARNING whose message is an exception, its (dotted) type first: what a logger
# prints for an exception the program caught and went on past (torch._dynamo's convert_frame under suppress_errors,
# "[WARNING] torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:", the frame then run eagerly; vLLM's
# "WARNING 06-11 01:37:00 [import_utils.py:408] ImportError: cannot import name ..." for an optional kernel). The level
# word, then what the format puts between it and the message (a clock, "[file.py:N]", a logger's name and " - "), then the
# type. Not a program's own words about its failure at warning ("WARNING - Training batch error: ..."): no type opens them.
_WARNED_EXCEPTION = re.compile(
    r"(?<![\w.])WARNING\b[\]:|\- ]*(?:\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? )?(?:\[[\w.\-/]+:\d+\] |[\w.]+(?::\d+)? - |[\w.]+:\s?)?"
    r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Failed|Failure): ")


def warned_exception(message: str) -> bool:
    """The line is a logging record at WARNING whose message is an exception the program caught (its type first)."""
    return "WARNING" in message and trainer_level(message) == WARNING and _WARNED_EXCEPTION.search(message[:200]) is not None


def level_name(level: int) -> str:
    """The syslog name of ``level`` (6: info)."""
    return _NAMES.get(level, str(level))


def reassured(message: str) -> bool:
    """The line says its trouble was corrected or recovered, or that it needs no action."""
    low = message.lower()
    return bool(_REASSURE_QUICK.search(low)) and bool(_REASSURED.search(message)) and not _NEGATED.search(message)


def severity_of(message: str, raw: str | None = None, priority: int | None = None) -> Severity:
    """The line's severity: ``priority`` when the caller has it (journald's PRIORITY), else the
    one the raw line's format states, else the level it states in words; and the error words of
    the message either way."""
    if priority is None and raw:
        priority = kernel_priority(raw)
    if priority is None:
        priority = level_word(message)
    low = message.lower()
    if not _ANY_QUICK.search(low) and not _REASSURE_QUICK.search(low):
        return Severity(priority, (), False)
    return Severity(priority, error_words(message), looks_alarming(message), reassured(message))


_NAMES = {v: k for k, v in reversed(list(_LEVELS.items()))}
