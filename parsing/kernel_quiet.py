"""When a kernel line's events are recorded and not acted on: the machine was booting, or the line
says itself that it is information (its own level, or words that its trouble was corrected).

Boot is not the job. A kernel line stamped with an uptime below the parser's ``live_from`` (the
agent's own start in uptime seconds where it knows it; for a file, BOOT_UPTIME_S) was logged while
the machine booted, before any job could run on it: probes of devices that failed, firmware and
driver initialisation, even a GPU the driver could not attach. Its events keep their class for the
machine's record (and its health before admission) with ``boot: true``, and ask for nothing
against a running job (action ``none``).

Devices the job does not use: a storage event about an optical or floppy drive (a BMC's or a
hypervisor's virtual media) is recorded too.

The line's own word first. A catalogue rule reads the message text; the kernel said how bad it
thought the line was (its printk level, or a level word: ``BTRFS info (device ...)``), and some
lines say the trouble is over (``read error corrected``). A rule's event on such a line is
recorded with action ``none`` unless the rule says the kernel prints its message at that level
(``printk_level``: ``nfs: server ... not responding`` is a notice). The code's own records
(Xids, OOM, AER, machine checks) read their lines' severity themselves and are left alone; the
subsystem and model fallback asks ``Severity.is_error``, which already holds both.
"""

from __future__ import annotations

import re
from typing import Any

from faultlens.parsing import subsystems
from faultlens.parsing.rules import LineRule
from faultlens.parsing.severity import NOTICE, Severity

# Kernel uptime (seconds) below which a line of a log read from a file counts as logged at boot.
# Drivers probe, firmware loads and the NVIDIA and mlx5 drivers attach within the first minute
# of a server's boot (the real boot lines of the corpus: 0.2-66 s); no job is scheduled, pulled
# and through NCCL's init on a machine two minutes after its kernel started.
BOOT_UPTIME_S = 120.0

Found = list[tuple[str, dict[str, Any]]]

# Block devices no training job reads or writes: optical drives (sr0, a BMC's virtual CD-ROM) and
# floppies (fd0, a hypervisor's). Their I/O errors (an empty virtual drive probed) are recorded.
_UNUSED_BLOCK = re.compile(r"(?:\bdev(?:ice)? |\[|\()(?:sr\d+|fd\d+|scd\d+|cdrom)\b")


def at_boot(found: Found, mono: float | None, live_from: float) -> bool:
    """Mark ``found`` as logged at boot when the line's uptime stamp is below ``live_from``:
    ``boot: true`` and action ``none``, class kept. True when it did."""
    if mono is None or mono >= live_from or not found:
        return False
    for _, data in found:
        data["boot"] = True
        if data.get("action") not in (None, "none"):
            data["action"] = "none"
            data["quiet"] = f"logged at uptime {mono:.1f} s, while the machine booted (before {live_from:.0f} s)"
    return True


def by_own_word(found: Found, sev: Severity, rule: LineRule | None) -> bool:
    """Record, not act on, a rule's events whose line says it is information or that its trouble
    is over (the rule's ``printk_level`` lets its own message's level through). True when it did."""
    why = None
    if sev.reassured:
        why = "the line says its trouble was corrected or recovered"
    elif sev.priority is not None and sev.priority >= NOTICE and sev.priority > (rule.printk_level if rule else 4):
        why = sev.says_quiet
    if why is None or not found:
        return False
    record_only(found, why)
    return True


def record_only(found: Found, why: str) -> None:
    """Keep ``found``'s class for the machine's record but act on none of it: action ``none``,
    severity ``info``, and ``quiet`` saying why (docs/events.md)."""
    for _, data in found:
        if data.get("action") not in (None, "none"):
            data["action"] = "none"
            data["severity"] = "info"
            data["quiet"] = why


def outside_the_job(found: Found, msg: str, rule: LineRule | None) -> bool:
    """Record, not act on, a catalogue rule's events on a line whose tag is the table's for a subsystem
    the job does not run on (USB, input, SPI flash, GPIO, sound, platform / firmware / wireless): a
    Bluetooth controller's 'command tx timeout' is no NIC's. A rule that names the subsystem among
    its own keeps its action. True when it did."""
    if not found:
        return False
    subsystem = subsystems.outside_the_job(msg)
    if subsystem is None or (rule is not None and subsystem in rule.subsystems):
        return False
    hit = False
    for _, data in found:
        if data.get("action") not in (None, "none"):
            data["action"] = "none"
            data["quiet"] = f"a line of {subsystem}, a subsystem the job does not run on"
            hit = True
    return hit


def unused_device(found: Found, msg: str) -> bool:
    """Record, not act on, a storage event about a block device no job uses (an optical drive, a
    floppy: a BMC's or a hypervisor's virtual media). True when it did."""
    if not found or not _UNUSED_BLOCK.search(msg):
        return False
    hit = False
    for _, data in found:
        if data.get("fault") == "storage" and data.get("action") not in (None, "none"):
            data["action"] = "none"
            data["quiet"] = "an optical or floppy drive: no job's storage"
            hit = True
    return hit


# (round 43) A driver's probe or registration that returned -ENODEV (-19): the driver found no device of its kind on
# this machine (an EDAC memory-controller driver on a board without its controller or with ECC off: "EDAC sbridge:
# Failed to register device with error -19."). The driver core itself takes a probe's -ENODEV as "not mine", no
# failure (drivers/base/dd.c really_probe logs it at debug only); a driver that prints it has said the same. An I/O
# or an open's -19 (a device gone under a read, a PHY that would not attach to an interface brought up) is no probe's.
_PROBE_WORD = re.compile(r"\b(?:probe|probing|register|registration|registering)\b", re.IGNORECASE)
_NO_SUCH_DEVICE = re.compile(r"\b(?:error|err|returned|ret|rc)\b\s*[:=]?\s*-(?:19|ENODEV)\b|\berror -ENODEV\b")


def no_such_device(found: Found, msg: str) -> bool:
    """Record, not act on, a probe's or a registration's failure with -ENODEV: the driver found no device of its
    kind (see _NO_SUCH_DEVICE). True when it did."""
    if not found or ("-19" not in msg and "ENODEV" not in msg) or not _NO_SUCH_DEVICE.search(msg) or not _PROBE_WORD.search(msg):
        return False
    before = [data.get("action") for _, data in found]
    record_only(found, "a probe or registration that found no such device (-ENODEV): the driver has nothing to drive here")
    return before != [data.get("action") for _, data in found]


# amdgpu's display engine (drivers/gpu/drm/amd/display): the display core's register waits
# (dc/dc_helper.c generic_reg_wait: DC_LOG_WARNING "REG_WAIT timeout %dus * %d tries - %s line:%d"),
# its functions by their prefixes (dcn32_*, dce110_*, dc_*, dmub_* / DMUB firmware, amdgpu_dm_*,
# dm_*). A compute job draws nothing on a display: a scan-out's trouble is no GPU reset for it.
_AMD_DISPLAY = re.compile(r"REG_WAIT timeout|\b(?:dcn\d+|dce\d+|dc|dmub|amdgpu_dm|dm)_\w+|\bDMUB\b")


def display_engine(found: Found, msg: str) -> bool:
    """Record, not act on, an amdgpu line of its display engine (see _AMD_DISPLAY). True when it did."""
    if not found or "amdgpu" not in msg or not _AMD_DISPLAY.search(msg):
        return False
    before = [data.get("action") for _, data in found]
    record_only(found, "amdgpu's display engine: a job draws nothing on a display")
    return before != [data.get("action") for _, data in found]

