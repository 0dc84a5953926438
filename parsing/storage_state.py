"""What a storage system says of its own health, read in the vocabulary storage systems share (issue 54).

A ZFS pool, a Ceph cluster, an md array and the kernel's block layer each print their health in a
small, shared vocabulary: a pool, vdev, array, placement group, OSD or device named with a STATE
(``DEGRADED``, ``FAULTED``, ``UNAVAIL``, ``SUSPENDED``, ``REMOVED``; ``faulty``; ``inactive``,
``incomplete``, ``stale``, ``undersized``), a COUNT of things in a bad state (``4 pgs inactive``, ``16
pgs degraded``, ``95 slow ops``, ``1 ops are blocked > 524.288 sec``), an error COUNTER (zpool's READ /
WRITE / CKSUM columns, ``N data errors``), or an errno a block device's request ended with (``result
-108``). Per-program rules name one program's sentences; this reading names the vocabulary, so the
next program's table row or summary in the same words is read too. Every reading is the storage's
(docs/design.md §9 ``storage``), at most an alert (parsing.state_grammar.grammar_event): a degraded
pool under a training job is work for the storage's owner and a reason to watch the job's I/O, not
a reason to evict the node the line was printed on (the pool may be another host's, and its
redundancy is what keeps the job's data readable meanwhile).

The guards are the healthy forms of the same vocabulary, everywhere in a healthy log: a state of
health (``ONLINE``, ``active+clean``, ``State : clean``, ``HEALTH_OK``), a count or counter of none
(``0 pgs degraded``, ``sdd ONLINE 0 0 0``, ``No known data errors``), a check Ceph says has cleared
(``Health check cleared: ... (was: ...)``), objects ``misplaced`` by a rebalance (not degraded), and a
hedge before the state (``if a pool is DEGRADED``). The parsers' own guards (the line's level, its
words that it recovered or will retry, help text) are parsing.state_grammar's, which consults this
module for a line its own grammar did not read.

Pure functions over one line; the tables are the regexes below.
"""

from __future__ import annotations

import re

from faultlens.parsing.line import any_of
from faultlens.parsing.subsystems import attribute

# fmt: off
# ZFS's states, upper case as zpool and zed print them. OFFLINE is an administrator's act (zpool
# offline); the pool it leaves short says DEGRADED on its own row.
_ZFS_BAD = r"DEGRADED|FAULTED|UNAVAIL|SUSPENDED|REMOVED"
_ZFS_ANY = rf"ONLINE|OFFLINE|AVAIL|INUSE|{_ZFS_BAD}"
# zpool status / import's config table: a name, its state, then the READ WRITE CKSUM counters or a note.
_COUNTER = r"\d+(?:\.\d+)?[KMGT]?"
_ROW = re.compile(rf"^\s*(?P<obj>[\w./:+-]*[\w./+-])\s+(?P<state>{_ZFS_ANY})"
                  rf"(?:\s+(?P<r>{_COUNTER})\s+(?P<w>{_COUNTER})\s+(?P<c>{_COUNTER}))?(?:\s+(?P<note>\S.*))?\s*$")
# A field holding a ZFS state: zpool's own line " state: UNAVAIL" (the whole line: a scheduler's job
# "state: SUSPENDED" is another word's), zed's "vdev_state=FAULTED".
_FIELD = re.compile(rf"^\s*(?P<obj>state): (?P<state>{_ZFS_BAD})\s*$|(?:^|[\s,])(?P<zed>vdev_state|pool_state)=(?P<zed_state>{_ZFS_BAD})\b")
# mdadm --detail's "State : clean, degraded" (its own spacing: systemctl's "State: degraded" is the
# system's units, not an array); its member table's row "0  8  3  -  faulty  /dev/sda3".
_MD_STATE = re.compile(r"^\s*State : (?P<state>.*)$")
_MD_BAD = re.compile(r"\b(?:degraded|FAILED|Not Started|inactive)\b")
_MD_FAILED = re.compile(r"^\s*(?P<obj>Failed|Removed) Devices : (?P<n>[1-9]\d*)\s*$")
_MD_MEMBER = re.compile(r"^\s*(?:\d+|-)\s+\d+\s+\d+\s+(?:\d+|-)\s+(?:\w+\s+)?(?P<state>faulty|removed)\b")
# /proc/mdstat: a member marked (F), or fewer members up than the array has ("[2/1] [U_]").
_MDSTAT_FAILED = re.compile(r"^\s*(?P<obj>md\d+) : \w+ .*\[\d+\]\(F\)")
_MDSTAT_SHORT = re.compile(r"\[(?P<n>\d+)/(?P<up>\d+)\] \[[U_]*_[U_]*\]")

# A placement group's state is '+'-joined words; these say its data is unavailable, unsafe or damaged.
_PG_BAD = frozenset({"inactive", "incomplete", "down", "stale", "degraded", "undersized", "inconsistent", "unknown",
                     "damaged", "peering", "recovery_unfound", "backfill_unfound", "backfill_toofull",
                     "recovery_toofull", "snaptrim_error", "failed_repair", "unclean"})
_PG_STATE = r"[a-z_]+(?:\+[a-z_]+)*"
# A count of things in a bad state: Ceph's health summaries and detail ("4 pgs inactive", "16 pgs
# degraded", "41904/200910 objects degraded", "2 osds down", "95 slow ops", "1 ops are blocked > 524.288 sec",
# "1 osds have slow requests", "1 MDSs report slow metadata IOs", "3 scrub errors"), zpool's "N data errors".
_COUNTED = re.compile(
    r"(?<![\w.%/-])(?P<n>\d+)(?:/\d+)?\s+(?:"
    rf"(?P<pgs>pgs?|placement groups?)\s+(?:are\s+|is\s+)?(?:stuck\s+)?(?P<pg>{_PG_STATE}|not active)"
    r"|(?P<objs>objects?)\s+(?P<obj_state>degraded|unfound)"
    r"|(?P<osds>osds?|mons?|hosts?\s+\(\d+\s+osds?\))\s+(?:are\s+)?(?P<down>down)"
    r"|(?P<slow>slow\s+(?:ops|requests)\b|(?:ops|requests|reqs)\s+(?:are\s+)?blocked\s*>)"
    r"|(?P<slow_holders>osds?|mdss?|daemons?)\s+(?:have|has|report)\s+slow\s+(?:ops|requests|metadata\s+ios)"
    r"|(?P<errors>scrub|data|i/o)\s+errors\b"
    r")", re.IGNORECASE)
# ceph -s's count of placement groups in each state ("16 undersized+degraded+peered", not "112 active+clean"),
# and its share of them not active ("12.500% pgs not active").
_PG_ROW = re.compile(r"^\s*(?P<n>\d+)\s+(?P<pg>[a-z_]+(?:\+[a-z_]+)+)\s*$|(?<![\w.])(?P<share>\d+(?:\.\d+)?)% pgs (?P<share_state>not active|unknown|inactive)\b")
# Slow requests are a storage cluster's only where the line names its daemons or how long they wait
# ("95 slow ops, oldest one blocked for 13741 sec, daemons [osd.0,osd.4] have slow ops"), not a web service's.
_SLOW_CONTEXT = re.compile(r"(?i)blocked|\bosds?\b|\bosd\.|\bmds|\bmon\.|\bdaemons?\b|\bceph")
# One named placement group or OSD in a state ("pg 3.6 is incomplete, acting [0,1,2]", "osd.2 is down",
# "osd.8 has slow ops").
_NAMED = re.compile(rf"\b(?P<obj>pg \d+\.[0-9a-f]+) is (?:stuck )?(?P<pg>{_PG_STATE})"
                    r"|\b(?P<osd>osd\.?\d+)(?: \S+)? (?:is |was |has been )?(?:marked )?(?P<state>down|failed)\b"
                    r"|\b(?P<slow_osd>osd\.\d+) has slow (?:ops|requests)")
# Ceph's own verdict on the cluster: an error level of health is the storage's whatever its reason
# (a warning's reason is read by the counts above: clock skew and configuration warn too).
_HEALTH_ERR = re.compile(r"\bHEALTH_ERR\b")

# A storage controller whose firmware stopped (megaraid's "FW in FAULT state", mpt3sas's "fault_state(0x5854)"), (round 44)
# in the words of FreeBSD's drivers too: mfi(4)'s "Firmware fault" (mfi_transition_firmware, MFI_FWSTATE_FAULT), mps(4) and
# mpr(4)'s "IOC Fault 0x40000d04, Resetting": the firmware or IOC with "fault" as its state, the clause ending there or
# with the fault's code, not a subject of other words ("firmware fault handling", "IOC fault injection").
_FAULT_STATE = re.compile(r"(?i)\b(?:FW|firmware|controller|adapter|IOC|HBA)\b(?:\s+\w+){0,2}?\s+(?:is\s+)?in\s+(?:a\s+)?FAULT\s+state\b"
                          r"|\bfault_state\(0x[0-9a-f]+\)"
                          r"|\b(?:FW|firmware|IOC) fault(?:\s*(?:0x)?[0-9a-f]+)?\s*(?:[.,;!]|$)")
# A block device or its request ending in an errno that is the device's trouble: EIO, ENXIO, EROFS, EBADMSG,
# ESHUTDOWN, ETIMEDOUT, EUCLEAN, EREMOTEIO ("rbd: rbd2: read result -108", "xfs_log_force: error 5 returned",
# "errno 5 (Input/output error)"), and ENOTCONN (-107, round 39: a network block device or file system lost its
# link to the cluster, as ESHUTDOWN). Not ENODEV (-19): a USB device unplugged says it.
_ERRNO = re.compile(r"(?i)\b(?:result|error|errno|err|returned|ret|rc|status)\s*[:=]?\s*-(?P<neg>5|6|30|74|107|108|110|117|121)\b"
                    r"|\b(?:error|errno)(?: code)?\s*[:=]?\s*\(?(?P<pos>5)\)?(?=[^.;]{0,40}(?:input/output|i/o) error|\s+returned)"
                    r"|\bi/o error with error code (?P<eio>5)\b|\[errno (?P<py>5)\] input/output error")
# An SDIO card on an MMC host is a radio, not a disk ("mmc1: error -110 whilst initialising SDIO card").
_SDIO = re.compile(r"(?i)\bsdio\b")
# Words that make an errno a storage system's when no block device or storage driver's tag is on the line.
_STORAGE_WORD = re.compile(r"(?i)\b(?:nfs\d?|fsal|xfs\w*|ext[234](?:-fs)?|btrfs|jbd2|ceph|rbd|osd|bluestore|objectstore|zfs|zpool"
                           r"|lustre|gpfs|disk|volume|file ?system)\b")
# A device the kernel names by its block, ATA, RBD or NBD name, before a colon or in brackets.
_BLOCK_DEVICE = re.compile(r"(?:^|[\s\[(])(?P<obj>(?:sd[a-z]+|vd[a-z]+|xvd[a-z]+|nvme\d+(?:n\d+(?:p\d+)?)?|dm-\d+|md\d+|rbd\d+|nbd\d+"
                           r"|mmcblk\d+|ata\d+(?:\.\d+)?))(?=[:\])\s,]|$)")
# Such a device given up on ("ata1.00: disabled", "sdb: device offlined").
_DEVICE_GONE = re.compile(r"(?:^|[\s\[])(?P<obj>sd[a-z]+|nvme\d+(?:n\d+)?|dm-\d+|md\d+|rbd\d+|nbd\d+|ata\d+\.\d+)\]?:\s*"
                          r"(?:device\s+)?(?P<state>disabled|offlined|dead|faulty)\s*[.!]?\s*$")
# A pool's I/O stopped or lost (zpool's "pool I/O is currently suspended", "has encountered an uncorrectable I/O failure").
_IO_STOPPED = re.compile(r"(?i)\bI/O is (?:currently )?(?P<suspended>suspended)\b|\b(?P<uncorrectable>uncorrectable I/O failure)")
# Devices a pool's status says are in a bad state ("status: One or more devices are faulted in response to IO failures").
_SOME_DEVICES = re.compile(r"(?i)\b(?:one or more|some|all|several|\d+) (?:of (?:the|its) )?(?P<obj>devices?|vdevs?|disks?|drives?|members?)"
                           r" (?:are|is|has been|have been|were|was) (?:currently )?(?P<state>faulted|removed|unavailable|degraded)\b")
# A multipath map with no path left.
_NO_PATH = re.compile(r"(?i)\b(?:remaining )?active paths:\s*0\b|\ball paths (?:are )?(?:down|failed)\b|\bno (?:active|usable) paths?\b")

# Error counters a device or file system keeps, any above zero: btrfs's "errs: wr 1, rd 0, flush 0, corrupt 0,
# gen 0", NVMe's smart-log "Media and Data Integrity Errors: 3" and "Critical Warning: 0x04", a SMART attribute
# row's raw count of sectors the disk could not read ("197 Current_Pending_Sector 0x0012 100 100 000 Old_age
# Always - 8"; not the reallocated count, which many a healthy disk carries), ZFS's zio error ("error=5").
_BTRFS_ERRS = re.compile(r"\berrs: wr (\d+), rd (\d+), flush (\d+), corrupt (\d+), gen (\d+)")
_NVME_LOG = re.compile(r"(?i)^\s*(?P<obj>media and data integrity errors|critical warning)\s*:\s*(?P<v>0x[0-9a-f]+|\d+)\s*$")
_SMART_ROW = re.compile(r"^\s*\d+\s+(?P<obj>Current_Pending_Sector|Offline_Uncorrectable|Reported_Uncorrect)\s+"
                        r"(?:0x[0-9a-f]{4}(?:\s+\S+){6}|[PO\-SRCK]{6}(?:\s+\S+){4})\s+(?P<raw>\d+)")
_ZIO = re.compile(r"\bzio\b.*?\berror=(?P<errno>5|52)\b")
# Words a monitor uses for a device it gave up on ("ZFS has marked the device as faulted"), a full Ceph OSD
# (writes stop: "1 full osd(s)"), and mount(8)'s exit status for a mount that failed (32; a CSI driver or
# kubelet relays it: "MountVolume.SetUp failed ... mount failed: exit status 32").
_MARKED = re.compile(r"(?i)\bmarked (?:the )?(?P<obj>device|vdev|disk|drive) (?:as )?(?P<state>faulted|degraded)\b")
_FULL_OSD = re.compile(r"\b[1-9]\d* full osd\(s\)|\bosd\.\d+ is full\b")
_MOUNT_FAILED = re.compile(r"(?i)\bmount\w*\b[^|]{0,200}?\bexit status 32\b")

# The guards. Ceph's report of a check that no longer holds; a hedge or a question before the state
# in its clause (advice after it, "reducing min_size may help", does not doubt it).
_CLEARED = re.compile(r"(?i)\bhealth check cleared\b|\(was: ")
_HEDGE = re.compile(r"(?i)\b(?:if|whether|unless|when(?:ever)?|may|might|could|would|should|in case|e\.g\.|such as)\b|\?")
_CLAUSE = re.compile(r"[.;!?]\s|\s-\s|\|")

# Literals one of which any reading needs (lowered), for the parsers' pre-filters: few and narrow, as each costs the
# scan of every line (a trainer's every step line holds "1e-5", many a line "pg", "mon" or "unknown").
QUICK = ("degraded", "faulted", "unavail", "suspended", "removed", "online ", "faulty", "(f)", "block", "undersized",
         "incomplete", "inactive", "stale", "peering", "inconsistent", "unfound", "pgs ", "pg ", "osd", "down",
         "slow ops", "slow req", "slow metadata", "health_err", "fault state", "fault_state", "firmware fault", "fw fault", "ioc fault", "result -", "returned -",
         "rc = -", "rc=-", "ret=-", "status -", "error", "errno", "disabled", "offlined", "dead", "i/o is",
         "uncorrectable i/o", "active path", "all paths", "errs: wr", "critical warning", "current_pending",
         "offline_uncorrect", "reported_uncorrect", "zio", "marked the", "marked device", "marked disk", "marked drive",
         "marked vdev", "exit status 32")
_QUICK = any_of(QUICK)
# fmt: on


def quick(lowered: str) -> bool:
    """The line holds a literal some reading needs (one scan settles most lines)."""
    return _QUICK.search(lowered) is not None


def read_storage(message: str, raw: str | None = None) -> tuple[str, str] | None:
    """(object, state) a line states of a storage pool, array, placement group, OSD or device, or None."""
    if _CLEARED.search(message):
        return None
    for read in (
        _table_row,
        _field,
        _md,
        _pg_row,
        _counted,
        _named,
        _health_err,
        _some_devices,
        _controller,
        _errno,
        _device_gone,
        _io_stopped,
        _no_path,
        _counters,
        _marked,
    ):
        got = read(message, raw)
        if got is not None:
            return got
    return None


def _hedged(message: str, state_at: int) -> bool:
    """A hedge or a question between the start of the state's clause and the state."""
    start = max((c.end() for c in _CLAUSE.finditer(message, 0, state_at)), default=0)
    return _HEDGE.search(message, start, state_at) is not None


def _nonzero(counter: str | None) -> bool:
    return counter is not None and float(counter.rstrip("KMGT")) > 0


def _table_row(message: str, raw: str | None) -> tuple[str, str] | None:
    m = _ROW.match(message)
    if m is None:
        return None
    obj, state = m.group("obj"), m.group("state")
    if state in ("SUSPENDED", "REMOVED") and m.group("r") is None:
        return None  # without zpool's counters the row may be a scheduler's job ("1234  SUSPENDED  gpu  alice")
    if re.fullmatch(_ZFS_BAD, state):
        return obj, state
    errors = [name for name, g in (("read", "r"), ("write", "w"), ("checksum", "c")) if _nonzero(m.group(g))]
    if errors and state == "ONLINE":
        return obj, f"{state} with {'/'.join(errors)} errors counted"
    return None


def _field(message: str, raw: str | None) -> tuple[str, str] | None:
    m = _FIELD.search(message)
    if m is None:
        return None
    return ("pool", m.group("state")) if m.group("obj") else (m.group("zed").split("_")[0], m.group("zed_state"))


def _md(message: str, raw: str | None) -> tuple[str, str] | None:
    m = _MD_STATE.match(message)
    if m is not None:
        return ("array", m.group("state").strip()) if _MD_BAD.search(m.group("state")) else None
    m = _MD_FAILED.match(message)
    if m is not None:
        return "array", f"{m.group('n')} {m.group('obj').lower()} devices"
    m = _MD_MEMBER.match(message)
    if m is not None:
        return "array member", m.group("state")
    m = _MDSTAT_FAILED.match(message)
    if m is not None:
        return m.group("obj"), "has a failed member (F)"
    m = _MDSTAT_SHORT.search(message)
    if m is not None and int(m.group("up")) < int(m.group("n")):
        return "array", f"{m.group('up')} of {m.group('n')} members up"
    return None


def _pg_bad(state: str) -> bool:
    return state == "not active" or any(w in _PG_BAD for w in state.lower().split("+"))


def _pg_row(message: str, raw: str | None) -> tuple[str, str] | None:
    m = _PG_ROW.search(message)
    if m is None:
        return None
    if m.group("pg") is not None:
        return ("pgs", f"{m.group('n')} {m.group('pg')}") if int(m.group("n")) and _pg_bad(m.group("pg")) else None
    return ("pgs", f"{m.group('share')}% {m.group('share_state')}") if float(m.group("share")) else None


def _counted(message: str, raw: str | None) -> tuple[str, str] | None:
    for m in _COUNTED.finditer(message):
        if int(m.group("n")) == 0 or _hedged(message, m.start()):
            continue
        text = " ".join(m.group(0).split())
        if m.group("pgs") and not _pg_bad(m.group("pg")):
            continue
        if m.group("slow") and not _SLOW_CONTEXT.search(message):
            continue
        return text.split(" ", 2)[1] if m.group("pgs") or m.group("objs") or m.group("osds") else "storage", text
    return None


def _named(message: str, raw: str | None) -> tuple[str, str] | None:
    for m in _NAMED.finditer(message):
        if _hedged(message, m.start()):
            continue
        if m.group("pg") is not None:
            if _pg_bad(m.group("pg")):
                return m.group("obj"), m.group("pg")
            continue
        if m.group("osd") is not None:
            # Ceph names an OSD "osd.N"; its kernel client, libceph, "osdN" (another program's "osd2" is not read)
            if "." in m.group("osd") or "libceph" in message:
                return m.group("osd"), m.group("state")
            continue
        return m.group("slow_osd"), "has slow ops"
    return None


def _health_err(message: str, raw: str | None) -> tuple[str, str] | None:
    m = _HEALTH_ERR.search(message)
    return ("ceph cluster", "HEALTH_ERR") if m and not _hedged(message, m.start()) else None


def _some_devices(message: str, raw: str | None) -> tuple[str, str] | None:
    m = _SOME_DEVICES.search(message)
    if m is None or m.group(0).startswith("0 ") or _hedged(message, m.start()):
        return None
    return m.group("obj"), m.group("state")


def _storage_driver(message: str, raw: str | None) -> bool:
    att = attribute(message) or (attribute(raw) if raw and raw != message else None)
    return att is not None and att.fault == "storage"


def _controller(message: str, raw: str | None) -> tuple[str, str] | None:
    m = _FAULT_STATE.search(message)
    if m is None or not _storage_driver(message, raw):
        return None
    return "storage controller", "in FAULT state"


def _errno(message: str, raw: str | None) -> tuple[str, str] | None:
    m = _ERRNO.search(message)
    if m is None:
        return None
    if _SDIO.search(message):
        return None
    dev = _BLOCK_DEVICE.search(message)
    if dev is None and not _storage_driver(message, raw) and not _STORAGE_WORD.search(message):
        return None
    errno = m.group("neg") or m.group("pos") or m.group("eio") or m.group("py")
    return (dev.group("obj") if dev else "storage"), f"errno {errno}"


def _device_gone(message: str, raw: str | None) -> tuple[str, str] | None:
    m = _DEVICE_GONE.search(message)
    return (m.group("obj"), m.group("state")) if m else None


def _io_stopped(message: str, raw: str | None) -> tuple[str, str] | None:
    m = _IO_STOPPED.search(message)
    if m is None or _hedged(message, m.start()):
        return None
    return "pool I/O", "suspended" if m.group("suspended") else "uncorrectable I/O failure"


def _counters(message: str, raw: str | None) -> tuple[str, str] | None:
    m = _BTRFS_ERRS.search(message)
    if m is not None and any(int(g) for g in m.groups()):
        return "btrfs device", m.group(0)
    m = _NVME_LOG.match(message)
    if m is not None and int(m.group("v"), 0):
        return m.group("obj"), m.group("v")
    m = _SMART_ROW.match(message)
    if m is not None and int(m.group("raw")):
        return m.group("obj"), f"raw {m.group('raw')}"
    m = _ZIO.search(message)
    return ("zio", f"error={m.group('errno')}") if m else None


def _marked(message: str, raw: str | None) -> tuple[str, str] | None:
    m = _MARKED.search(message)
    if m is not None and not _hedged(message, m.start()):
        return m.group("obj"), m.group("state")
    if _FULL_OSD.search(message):
        return "osd", "full"
    m = _MOUNT_FAILED.search(message)
    return ("mount", "failed (exit status 32)") if m and not _hedged(message, m.start()) else None


def _no_path(message: str, raw: str | None) -> tuple[str, str] | None:
    m = _NO_PATH.search(message)
    return ("multipath map", "no active path") if m and not _hedged(message, m.start()) else None
