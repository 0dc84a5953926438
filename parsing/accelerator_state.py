"""An accelerator's own word that it hung, was reset, stopped answering, or could not be brought up (issue 54).

Every accelerator, whoever makes it, states the same few things when it fails, in its own driver's or
runtime's words: it HUNG (``GPU HANG: ecode 9:1:...``, ``Resetting chip after gpu hang``, ``context reset due
to GPU hang``), a RESET of it failed or timed out (``Engine reset failed on 0:0 (rcs0)``, ``rcs0 reset request
timed out``), its firmware processor stopped ANSWERING (``Timeout waiting for ARC response``, ``ARC Status:
Timeout``), or it could not be BROUGHT UP at all (``Failed to initialize devices``, ``Could not open the device
index:0``, ``Error when re-initializing chips!``, ``DeviceOpenFailed``, ``Unable to determine ... Driver
version``). A person who has never seen the vendor reads these as the device's fault by the words alone; rules
name one driver's messages, this names the statements, so the next vendor's wording of them is read too.

The class is the statement's (docs/design.md §9): a device that hung, whose reset failed or whose firmware
went silent needs a reset (``gpu_reset_required``); one that could not be opened or initialised is not there
for the job (``gpu_lost``). A reading is at most an alert (parsing.state_grammar.grammar_event) and is only
ever a reading of a line nothing more specific took. Its guards are a person's: the line names another
kind of device (a network port or link, a disk, a USB or serial device: its driver's own rules and the
state grammar read those), its driver's tag is one the subsystem table gives another class, it says the
reset or start worked (``reset successful``, ``completed``), or it names a hang detector's settings
(``hangcheck``, ``hang timeout``). The state grammar's own guards (a negation, a hedge, help text, a retry)
apply before this is consulted.

Pure functions over one line; the statements are the regexes below.
"""

from __future__ import annotations

import re

from faultlens.parsing.line import any_of
from faultlens.parsing.subsystems import attribute

# fmt: off
# What an accelerator is called where no vendor is named: the GPU, a chip, an accelerator, its engines (a
# render ring's), its firmware, a device of no kind (the line's other words and its tag decide).
_DEVICE = r"[gntvhi]pus?|chips?|accelerators?|engines?|devices?"
_PCI = r"(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
# Each statement, the class it is of and the words a finding gives it.
_STATEMENTS: tuple[tuple[str, str, str], ...] = (
    # it hung: "GPU HANG", "after gpu hang", "due to GPU hang", a heartbeat that stopped; not a detector's settings
    ("hung", "gpu_reset_required",
     rf"\b(?:{_DEVICE}) hang\b(?!\s*(?:check|detect|timeout|test|debug))|\b(?:after|due to) (?:an? |the )?(?:gpu |device )?hang\b(?!\s*(?:check|detect))"
     r"|\bstopped heartbeat\b"),
    # a reset of it failed or timed out
    ("failed a reset", "gpu_reset_required",
     r"\breset(?: request)? (?:failed|timed out|timeout)\b|\b(?:failed|unable) to reset (?:the )?(?:gpu|chip|device|engine|accelerator)\b"),
    # its runtime resets it by its bus address, or its driver soft-resets it; not a bare "Resetting GPU", which a
    # driver prints at every boot (its cause, a hang, is read above)
    ("is being reset", "gpu_reset_required", rf"\bresetting {_PCI}\b|\bgpu soft ?reset\b"),
    # its firmware processor did not answer: a timeout waiting for its reply, a status of timeout (the processor by
    # its kind, or by its acronym: "ARC", "GuC", "PSP"; an acronym's only on a line that names a device, see _ON_DEVICE)
    ("stopped answering", "gpu_reset_required",
     r"\btime(?:d)?[ -]?out waiting for (?:the |an? )?(?:firmware|fw|hardware|hw|device|mailbox|mcu|(?P<fw>(?-i:[A-Z][A-Za-z]{1,4})))(?: \w+)? (?:response|reply|ack\w*)\b"
     r"|\b(?:firmware|fw|(?P<fw2>(?-i:[A-Z][A-Za-z]{1,4}))) status:\s*timeout\b"),
    # it could not be brought up: opened, initialised, found by its runtime
    ("could not be brought up", "gpu_lost",
     rf"\b(?:failed to|unable to|could not|couldn.t|cannot|can.t) (?:initiali[sz]e|open|bring up|enumerate) (?:the |any |all )?(?:\w+ )?(?:{_DEVICE})\b"
     rf"|\berror (?:when|while) (?:re-?)?initiali[sz]ing (?:the |all )?(?:\w+ )?(?:{_DEVICE})\b"
     r"|\b(?-i:Device(?:Open|Init)(?:Failed|Error))\b"
     r"|\b(?:failed to|unable to|could not|cannot) (?:determine|read|get|query) (?:the )?(?:\w+ ){0,2}driver version\b"
     r"|\b0 (?:out )?of \d+ (?:\w+ )?initiali[sz]ed\b"),
)
_STATEMENT = re.compile("|".join(f"(?P<s{i}>{r})" for i, (_, _, r) in enumerate(_STATEMENTS)), re.IGNORECASE)
# Another kind of device named in the line: a network device, port or link, a disk or block device, a USB,
# serial, sound, video-capture or input device, a device file of one (its class is not an accelerator's).
_OTHER_DEVICE = re.compile(
    r"\b(?:ib|infiniband|rdma|roce|hcas?|nics?|ethernet|eth\d+|en[ops]\d\w*|mlx\d_\d+|ports?|links?|phy|wlan\d*|wifi|bluetooth"
    r"|disks?|nvme\w*|(?-i:sd[a-z]\d*)|ata\d*|scsi|volumes?|file ?systems?|luns?|raid|md\d+|mmc\d*"
    r"|usb|tty\w*|serial|audio|sound|snd|cameras?|webcam|input|keyboard|mouse|touchpad|tpm|i2c\w*|hid|rtc\d*|spi|gpio|watchdog)\b"
    r"|/dev/(?!dri|accel|nvidia|neuron|davinci|hl\d)\w", re.IGNORECASE)
# A device the line names (its bus address or its kind): what an acronym waited for is then its firmware.
_ON_DEVICE = re.compile(rf"\b{_PCI}\b|\b(?:{_DEVICE})\b", re.IGNORECASE)
# The line says the reset or start worked.
_WORKED = re.compile(r"\b(?:successful\w*|succeeded|complete[ds]?|done|recovered|ok)\b", re.IGNORECASE)
# Classes a driver's subsystem may have for its line to be read here (a GPU's, or one the table keeps outside the job).
_ACCELERATOR_CLASSES = frozenset({"gpu_lost", "gpu_reset_required", "gpu_memory", "nvlink", "unknown"})
# Literals one of which any statement needs besides the state grammar's ("fail", "unable to", "could not", "cannot":
# parsing.state_grammar consults this on a line of either; the parsers' pre-filters carry both), each as narrow as its
# statement: boot logs print "initialized" and "reset" by the hundred. " hang": not "change".
QUICK = (" hang", "stopped heartbeat", "reset timeout", "reset request timeout", "reset timed out", "reset request timed out", "resetting", "soft reset", "softreset",
         "out waiting for", "status: timeout", "status:timeout", "error when", "error while", "deviceiniterror", "0 out of", "0 of ")
_QUICK = any_of(QUICK)
# fmt: on


def quick(lowered: str) -> bool:
    """Whether the lowered line holds a literal some statement needs (most lines do not)."""
    return _QUICK.search(lowered) is not None


def read_accelerator(message: str, raw: str | None = None) -> tuple[str, str, str, str | None] | None:
    """(class, device words, state, why it is recorded only or None) when the line is an accelerator stating it
    hung, was reset, stopped answering or could not be brought up, else None. ``raw``: the line as read (its tag
    names the driver)."""
    # every statement the line makes, but an acronym's timeout on a line that names no device ("Timed out waiting for
    # RPC response": no device's firmware)
    on_device = _ON_DEVICE.search(message) is not None
    said = [m for m in _STATEMENT.finditer(message) if on_device or not (m.group("fw") or m.group("fw2"))]
    if not said or _OTHER_DEVICE.search(message) or _WORKED.search(message, said[0].end()):
        return None
    att = attribute(message) or (attribute(raw) if raw and raw != message else None)
    if att is not None and att.fault is not None and att.fault not in _ACCELERATOR_CLASSES:
        return None
    # a driver the subsystem table keeps outside the job (i915's display GPU): its device's class, recorded only, as
    # gpu.display_driver_engine_hang records those drivers' hangs (docs/rules.md, rounds 11 and 14)
    quiet = "its driver's subsystem is outside the job's" if att is not None and att.fault == "unknown" else None
    # a device that went silent while it was being brought up is not there for the job: the start's statement rules
    read = [(_STATEMENTS[int((m.lastgroup or "s0")[1:])], m.group(0)) for m in said]
    (state, fault, _), words = next(((st, w) for st, w in read if st[1] == "gpu_lost"), read[0])
    return fault, words, state, quiet
