"""Which kernel subsystem wrote a line, and the fault class of that subsystem (parsing/subsystems.toml).

Recognition by message text breaks on the next driver version; the subsystem that wrote a line
does not: every kernel message starts with its driver's or subsystem's tag (``XFS (dm-0):``,
``nvme nvme1:``, ``mlx5_core 0000:01:00.0 eth0:``, ``LustreError:``). The tag is read by the shape
of the line, so a driver the table does not know is still named (``data.subsystem``), and the
device it names (a block device, a network interface) gives its class when the table cannot.

Pure functions over one message; the table is data, loaded once.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from faultlens.events.diagnosis_record import ACTIONS, FAULT_CLASSES

TABLE = Path(__file__).resolve().parent / "subsystems.toml"
# A tag sits at the start of the message: a colon further in is part of the text.
MAX_TAG = 48

_PCI_ADDR = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
# Devices whose name says what they are (the generic "driver DEVICE: message" shape).
_BLOCK_DEV = re.compile(r"^\(?(?:device )?(?:sd[a-z]+\d*|nvme\d+(?:n\d+(?:p\d+)?)?|vd[a-z]+\d*|xvd[a-z]+\d*|dm-\d+|md\d+|hd[a-z]\d*|mmcblk\d+)\)?,?$")
_NET_DEV = re.compile(r"^(?:eth\d+|en[a-z0-9]+|ib\d+|ibp\w+|ens\w+|eno\w+|bond\d+|mlx5_\d+|hsn\d+|efa_\d+|rdma\d+)$")
_BRACKET = re.compile(r"\[[^\]]*\]$")
# pdsh / clush put "host: " before each line, so the kernel's own clock and tag follow it.
_HOST_LABEL = re.compile(r"^[\w.\-]+: \[\s*\d+\.\d+\]\s*")
# A network interface named before the first ": " of a driver's line whose bus address is not PCI (USB ...).
_NETDEV_COLON = re.compile(r"\s((?:eth|en|ib|bond|hsn|wl)[\w.\-]*\d):\s")
_SYSLOG_KERNEL = "kernel: "
# A DRM driver's own line names its module after the function: "[drm:gfx_v10_0_hw_fini [amdgpu]] *ERROR* ...".
# Without the module (kernels that print only the function: "[drm:amdgpu_job_timedout] *ERROR* ring gfx_0.0.0 timeout"),
# the function's prefix names a DRM driver that prefixes its functions with its name (round 15).
_DRM_MODULE = re.compile(r"\[drm:(?:[^\s\]]+ \[([\w-]+)\]|(amdgpu|radeon|i915|nouveau|xe|msm|panfrost|etnaviv|vmwgfx)_\w*)\]")


class SubsystemTableError(ValueError):
    """The table cannot be used; the message names the entry."""


@dataclass(frozen=True, slots=True)
class Subsystem:
    name: str
    fault: str
    action: str = "alert"

    @property
    def outside_the_job(self) -> bool:
        """A subsystem the training does not run on (USB, SPI flash, GPIO, sound, input, ...): the
        table knows it so that no neighbour's class is given to it by prefix; its errors are recorded."""
        return self.fault == "unknown"


@dataclass(frozen=True, slots=True)
class Attribution:
    """``subsystem``: the table's name, or the tag itself for a driver the table lacks; ``fault``:
    the class (None: neither the table nor the device says); ``device``: what the line names."""

    subsystem: str
    tag: str
    fault: str | None
    action: str
    device: str | None = None
    known: bool = True


@dataclass(frozen=True)
class SubsystemTable:
    by_tag: dict[str, Subsystem]
    prefixes: tuple[tuple[str, Subsystem], ...]
    phrases: tuple[tuple[str, Subsystem], ...]
    # User-space programs by their syslog tag: exact names, and "name-*" as a prefix.
    by_program: dict[str, Subsystem] = field(default_factory=dict)
    program_prefixes: tuple[tuple[str, Subsystem], ...] = ()

    def lookup(self, tag: str) -> Subsystem | None:
        sub = self.by_tag.get(tag)
        if sub is None:
            stripped = tag.rstrip("0123456789.:")
            sub = self.by_tag.get(stripped) if stripped and stripped != tag else None
        if sub is None:
            for prefix, s in self.prefixes:
                if tag.startswith(prefix):
                    return s
        return sub


def parse_table(text: str, origin: str) -> SubsystemTable:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SubsystemTableError(f"{origin}: not TOML: {exc}") from None
    by_tag: dict[str, Subsystem] = {}
    prefixes: list[tuple[str, Subsystem]] = []
    phrases: list[tuple[str, Subsystem]] = []
    by_program: dict[str, Subsystem] = {}
    program_prefixes: list[tuple[str, Subsystem]] = []
    for i, raw in enumerate(doc.get("subsystem", ())):
        name = raw.get("name") if isinstance(raw, dict) else None
        if not isinstance(name, str) or not name:
            raise SubsystemTableError(f"{origin}: subsystem {i + 1} needs a name")
        fault, action = raw.get("fault"), raw.get("action", "alert")
        if fault not in FAULT_CLASSES:
            raise SubsystemTableError(f"{origin}: subsystem {name!r}: fault {fault!r} is not a fault class")
        if action not in ACTIONS:
            raise SubsystemTableError(f"{origin}: subsystem {name!r}: action {action!r} is not an action")
        sub = Subsystem(name, fault, action)
        for tag in raw.get("tags", ()):
            if tag.lower() in by_tag:
                raise SubsystemTableError(f"{origin}: tag {tag!r} twice ({by_tag[tag.lower()].name} and {name})")
            by_tag[tag.lower()] = sub
        prefixes.extend((p.lower(), sub) for p in raw.get("prefixes", ()))
        phrases.extend((p, sub) for p in raw.get("phrases", ()))
        for prog in raw.get("programs", ()):
            prog = prog.lower()
            if prog.endswith("*"):
                program_prefixes.append((prog[:-1], sub))
            elif prog in by_program:
                raise SubsystemTableError(f"{origin}: program {prog!r} twice ({by_program[prog].name} and {name})")
            else:
                by_program[prog] = sub
    # Longest prefix first: "nvidia-nvswitch" before "nvidia".
    prefixes.sort(key=lambda ps: -len(ps[0]))
    program_prefixes.sort(key=lambda ps: -len(ps[0]))
    return SubsystemTable(by_tag, tuple(prefixes), tuple(phrases), by_program, tuple(program_prefixes))


@lru_cache(maxsize=1)
def shipped() -> SubsystemTable:
    return parse_table(TABLE.read_text(encoding="utf-8"), TABLE.name)


def _body(message: str) -> str:
    """The message without what a syslog or a host label put before the driver's tag."""
    msg = message.lstrip()
    if msg.startswith(_SYSLOG_KERNEL):
        msg = msg[len(_SYSLOG_KERNEL):]
    label = _HOST_LABEL.match(msg)
    return msg[label.end():] if label else msg


def tag_of(message: str) -> tuple[str, str | None]:
    """(tag, device) of a kernel message by its shape: the first word before the first colon
    (lowered, ``[pid]`` dropped) and the word after it when that names a device; ('', None) when
    the line starts with text rather than a tag."""
    msg = _body(message)
    if msg.startswith("[drm:"):
        drm = _DRM_MODULE.match(msg)
        if drm:
            return (drm.group(1) or drm.group(2)).lower(), None
    colon = msg.find(":", 0, MAX_TAG)
    if colon <= 0:
        return "", None
    head = msg[:colon].split()
    if not head:
        return "", None
    first = head[0]
    if first.endswith("]") and "[" in first and not first.startswith("["):
        first = _BRACKET.sub("", first)
    device = None
    if len(head) > 1:
        second = head[1]
        if second.startswith("(") or _BLOCK_DEV.match(second) or _NET_DEV.match(second):
            device = second.strip("(),")
        elif len(head) > 2 and _NET_DEV.match(head[2]):
            device = head[2]
        elif second[:4].isalnum():
            # "mlx5_core 0000:..." splits at the PCI address's first colon: the rest of it is the device.
            rest = msg[len(msg[:colon]) - len(second):].split(None, 1)[0].rstrip(":")
            device = rest if _PCI_ADDR.match(rest) else None
        if device is None:
            nm = _NETDEV_COLON.search(msg, 0, 96)
            device = nm.group(1) if nm else None
    return first.lower(), device


def subsystem_of(message: str, table: SubsystemTable | None = None) -> str | None:
    """The table's name for the subsystem that wrote ``message`` by its tag alone (no phrases, no
    device guess): the cheap first step the rule catalogue dispatches on."""
    if message.startswith(_SYSLOG_KERNEL):
        message = message[len(_SYSLOG_KERNEL):]
    if message.startswith("[drm:"):
        drm = _DRM_MODULE.match(message)
        if drm:
            sub = (table or shipped()).lookup((drm.group(1) or drm.group(2)).lower())
            return sub.name if sub is not None else None
    colon = message.find(":", 0, MAX_TAG)
    if colon <= 0:
        return None
    if message.startswith(" [", colon + 1) and " " not in message[:colon]:
        label = _HOST_LABEL.match(message)  # "host: [ 123.4] tag: ...", a pdsh label before the kernel's clock
        if label:
            return subsystem_of(message[label.end():], table)
    head = message[:colon]
    first = head.split(None, 1)[0] if " " in head else head
    memo = _MEMO if table is None else {}
    name = memo.get(first, _UNSET)
    if name is _UNSET:
        tag = first.lower()
        if tag.endswith("]") and "[" in tag and not tag.startswith("["):
            tag = _BRACKET.sub("", tag)
        sub = (table or shipped()).lookup(tag)
        name = sub.name if sub is not None else None
        if len(memo) > 4096:
            memo.clear()
        memo[first] = name
    return name  # type: ignore[return-value]


def outside_the_job(message: str, table: SubsystemTable | None = None) -> str | None:
    """The table's name for the subsystem that wrote ``message`` when its tag is one of the table's
    own tags (not a prefix: FreeBSD's amdgpu writes as ``drmn0``) for a subsystem a training job does
    not run on (USB, input, SPI flash, GPIO, sound, platform / firmware / wireless); else None."""
    tag, _ = tag_of(message)
    sub = (table or shipped()).by_tag.get(tag) if tag else None
    return sub.name if sub is not None and sub.outside_the_job else None


_UNSET = object()
# The first word of a line -> its subsystem: a log holds a few hundred distinct ones.
_MEMO: dict[str, object] = {}


def _class_of_device(device: str | None) -> str | None:
    if not device:
        return None
    if _BLOCK_DEV.match(device):
        return "storage"
    if _NET_DEV.match(device):
        return "nic"
    return None


def attribute(message: str, table: SubsystemTable | None = None) -> Attribution | None:
    """The subsystem that wrote ``message``, or None when the line has no tag and no known phrase."""
    table = table or shipped()
    tag, device = tag_of(message)
    if tag:
        sub = table.lookup(tag)
        if sub is not None:
            return Attribution(sub.name, tag, sub.fault, sub.action, device)
    for phrase, sub in table.phrases:
        if phrase in message:
            return Attribution(sub.name, phrase.lower(), sub.fault, sub.action, device)
    if not tag or not tag[0].isalpha() or not _driver_shaped(message):
        return None
    # A driver the table lacks: named by the shape of its line; its class from the device, if any,
    # or from the tag when the tag is itself a device ("sdb: checker failed path", "eth3: ...").
    fault = _class_of_device(device) or _class_of_device(tag)
    return Attribution(tag, tag, fault, "alert", device, known=False)


def by_program(program: str | None, table: SubsystemTable | None = None) -> Attribution | None:
    """The subsystem of a user-space program by its syslog tag (``chronyd``, ``rpc.mountd``,
    ``beegfs-client``), when the table names it among a subsystem's ``programs`` (exact names,
    ``beegfs-*`` a prefix; never by a kernel tag: ``net`` or ``session`` are no program's name);
    None for a program it does not."""
    if not program:
        return None
    table = table or shipped()
    sub = table.by_program.get(program)
    if sub is None:
        sub = next((s for prefix, s in table.program_prefixes if program.startswith(prefix)), None)
    return Attribution(sub.name, program, sub.fault, sub.action) if sub is not None else None


def _driver_shaped(message: str) -> bool:
    """Does the text before the first colon read as a driver's tag (``gpio_thunderx:``,
    ``usbhid 2-3:1.0:``, ``zzraid (sdb):``) rather than words (``Memory failure:``, ``Device:``)?
    One word not capitalised like a sentence's first, or a word and a device or bus address (a
    digit or a parenthesis in it)."""
    msg = _body(message)
    head = msg[:msg.find(":", 0, MAX_TAG)].split()
    if len(head) == 1:
        # A capitalised word ("Device:", "Memory:") opens a sentence; tags are lower case or
        # capitals (XFS, GHES, EXT4-fs), and the table knows the capitalised ones (Bluetooth, Lustre).
        return not head[0].istitle()
    return len(head) >= 2 and (head[1][:1] == "(" or any(c.isdigit() for c in head[1]))
