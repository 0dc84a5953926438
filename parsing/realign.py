"""A known line behind a prefix no parser knows: where a format the parsers read begins inside it.

A log shipper, an OS or a wrapper puts its own header before the line it relays: Talos's
``talos03: kern:     err: [2026-01-01T23:32:07.50Z]: nvme nvme1: ...``, RFC 5424's
``<6>1 2020-12-02T21:55:55+01:00 host kernel - - - sd 3:0:0:1: ...``, a file name before a grep's
hit, a Kubernetes event's JSON ``"message": "..."``, logfmt's ``level=error msg="..."``, a glog,
klog or etcd header (``W0818 03:35:27.85 2658 eviction_manager.go:110] ...``, ``W | rafthttp: ...``).
The parsers read a line only from its start, so such a line gives no event. For a line that gave
none, :func:`candidates` finds where a known format begins (a kernel uptime stamp, a syslog or
ISO clock with its host and tag, the message after a glog / etcd / RFC 5424 header, a JSON or
logfmt message field) and the level the cut-off prefix states (``err:``, ``<6>``, ``level=warning``,
``W |``, ``I0928``), which the parsers then read the rest with (docs/design.md §3). Known headers
only, never a blind cut at every ``: ``: a cut inside a message reads its tail out of context
(``err: Unknown Error"`` is no CUDA error). A kernel uptime stamp in the prefix stays on the line:
the boot guard reads it.

Pure functions; the parsers call them only for lines that gave nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any, Callable, NamedTuple, TypeVar

from faultlens.parsing.timestamps import GLOG_HEADER, HOST_TAG, ISO_CLOCK, SYSLOG_CLOCK, UPTIME

# At most this many readings of a line are tried (leftmost first): each is a full parse.
MAX_TRIES = 3
# Syslog's level names, as dmesg -x and kernel_priority read them.
LEVEL_NAMES = ("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug")
_WORD_LEVELS = {"emerg": 0, "emergency": 0, "panic": 0, "alert": 1, "crit": 2, "critical": 2, "fatal": 2, "err": 3,
                "error": 3, "eror": 3, "warn": 4, "warning": 4, "notice": 5, "info": 6, "informational": 6,
                "debug": 7, "trace": 7}  # fmt: skip
_LETTER_LEVELS = {"F": 2, "C": 2, "E": 3, "W": 4, "N": 5, "I": 6, "D": 7}


class Realigned(NamedTuple):
    """A reading of a line from where a known format starts: ``line`` (the kept uptime stamp, then
    the known format's text), ``level`` the syslog level the cut-off prefix stated (None: none),
    ``form`` the header that was found (for counts and tests)."""

    line: str
    level: int | None
    form: str


# The level a shipper's prefix states: a facility and level pair (Talos, dmesg -x past a host
# label: "kern:     err:"), logfmt's or JSON's level field, a printk priority "<3>" before a clock.
_FACILITY_LEVEL = re.compile(r"\b(?:kern|user|daemon|auth|authpriv|syslog|local[0-7]):\s*"
                             r"(?P<w>emerg|alert|crit|err|warning|warn|notice|info|debug):\s*")  # fmt: skip
_LEVEL_FIELD = re.compile(r"""(?:\blevel=|"(?:level|severity|lvl)"\s*:\s*")(?P<w>[A-Za-z]+)""")
# RFC 5424: "<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID STRUCTURED-DATA MSG" (level: PRI's low 3 bits).
_RFC5424 = re.compile(r"<(?P<pri>\d{1,3})>1 \S+ \S+ \S+ \S+ \S+ (?:-|(?:\[[^\]]*\])+) ?")
# etcd's capnslog "W | pkg: message" after its clock; glog's and klog's header ends in "file.go:N] ".
_CAPNSLOG = re.compile(r"(?P<l>[DINWECF]) \| ")
_GLOG_TAIL = re.compile(r"\s*\d+ [\w.\-/]+:\d+\] ")
# (round 32) The container runtime's log file (CRI: containerd, CRI-O): after its RFC 3339 clock, the stream and a
# full/partial mark ("2024-03-07T10:55:48.37Z stderr F panic: ..."); the stream is no level: the line's own words say it.
_CRI_STREAM = re.compile(r"(?:stdout|stderr) [FP] ")
# c10d's own glog-like header in brackets, its month unpadded (torch >= 2.2: "[W710 16:53:50.544805244 socket.cpp:489] ").
_C10D_HEADER = re.compile(r"\[(?P<l>[IWEF])\d{3,4} \d\d:\d\d:\d\d\.\d{1,9} (?:\d+ )?[\w.\-/]+:\d+\] ")
# A JSON or logfmt message field's value (the line a program logged, escaped).
_JSON_MESSAGE = re.compile(r'"(?:message|msg|log|MESSAGE)"\s*:\s*"(?P<v>(?:[^"\\]|\\.){12,})"')
_LOGFMT_MESSAGE = re.compile(r'\bmsg="(?P<v>(?:[^"\\]|\\.){12,})"|\bmsg=(?P<bare>[^\s"=]{12,})')


def _level(prefix: str) -> int | None:
    """The level a cut-off prefix states, the last one it names (the one nearest the message)."""
    level = None
    for m in _FACILITY_LEVEL.finditer(prefix):
        level = _WORD_LEVELS[m.group("w").lower()]
    for m in _LEVEL_FIELD.finditer(prefix):
        level = _WORD_LEVELS.get(m.group("w").lower(), level)
    return level


def _uptime_at(text: str, start: int) -> re.Match[str] | None:
    """The kernel's own clock at or after ``start`` as printk writes it ("[%5lu.%06lu]": seconds
    padded to five, six decimals: "[    4.421615]"), on a separator: not a number in brackets
    inside a message ("lr [0.000100]")."""
    pos = start
    while (i := text.find("[", pos)) != -1:
        m = UPTIME.match(text, i)
        if (
            m
            and len(m.group(1).partition(".")[2]) == 6
            and m.start(1) - i - 1 + len(m.group(1).partition(".")[0]) >= 5
            and (i == 0 or text[i - 1] in " :>\t")
        ):
            return m
        pos = i + 1
    return None


def _headers(text: str, at: int) -> list[tuple[int, int, str]]:
    """(where the known text starts, where its header starts, form) for each known header from
    ``at`` (past the line's start: the clock the parser read is no prefix), leftmost first; an RFC
    5424 header may be at the start (no parser reads it)."""
    found: list[tuple[int, int, str]] = []
    if "[" in text[at:] and (m := _uptime_at(text, at)) is not None:
        found.append((m.start(), m.start(), "uptime"))
    if "<" in text and (m := _RFC5424.search(text)) is not None:
        found.append((m.end(), m.start(), "rfc5424"))
    for m in SYSLOG_CLOCK.finditer(text, at):
        if HOST_TAG.match(text, m.end()):
            found.append((m.start(), m.start(), "syslog"))
            break
    if "-" in text[at:]:
        for m in ISO_CLOCK.finditer(text, at):
            if text[m.start() - 1] in " :>\t[" and (text[m.start()] == "[" or HOST_TAG.match(text, m.end())):
                found.append((m.start(), m.start(), "iso"))
                break
    if (m := _FACILITY_LEVEL.search(text, at)) is not None:
        found.append((m.end(), m.start(), "facility"))
    return sorted(found)


def _message_field(text: str) -> tuple[int, str] | None:
    """A JSON or logfmt message field's value, unescaped, and where the field starts."""
    if '"' not in text and "msg=" not in text:
        return None
    m = _JSON_MESSAGE.search(text) or _LOGFMT_MESSAGE.search(text)
    if m is None:
        return None
    raw = m.group("v") if m.group("v") is not None else m.group("bare")
    try:
        value = json.loads(f'"{raw}"') if m.group("v") is not None else raw
    except json.JSONDecodeError:
        value = raw
    return m.start(), value.split("\n", 1)[0]


def _after_logger(msg: str) -> tuple[str, int | None, str] | None:
    """The message after a glog / klog header ("E0413 10:53:52.84 3263 kubelet.go:2055] "), c10d's
    ("[W710 16:53:50.54 socket.cpp:489] "), an etcd one ("W | ") or a container runtime's stream
    column ("stderr F "), at the message's start, and the level its letter states (None: none)."""
    if (m := GLOG_HEADER.match(msg, 1 if msg[:1] == "[" else 0)) is not None:
        tail = _GLOG_TAIL.match(msg, m.end() - 1)
        if tail is not None:
            return msg[tail.end() :], _LETTER_LEVELS[msg[m.start()]], "glog"
    if msg[:1] == "[" and (m := _C10D_HEADER.match(msg)) is not None:
        return msg[m.end() :], _LETTER_LEVELS[m.group("l")], "c10d"
    if (m := _CAPNSLOG.match(msg)) is not None:
        return msg[m.end() :], _LETTER_LEVELS[m.group("l")], "capnslog"
    if (m := _CRI_STREAM.match(msg)) is not None:
        return msg[m.end() :], None, "cri"
    return None


def candidates(text: str, msg: str, *, programs: bool = True) -> list[Realigned]:
    """The readings of ``text`` (a line that gave no event; ``msg`` its message after the clock the
    parser read) from where a known format starts, leftmost first, at most MAX_TRIES. Each keeps
    the level its cut-off prefix stated and a kernel uptime stamp the prefix held. ``programs``:
    also the message of a program's logger (glog, capnslog, a JSON or logfmt field); the kernel
    parser leaves those out: a program's error level is not the kernel's err, which would send the
    line to the line model (a kubelet's E line in a node's syslog is no kernel record)."""
    out: list[Realigned] = []
    seen: set[str] = set()

    def add(cut: str, prefix: str, level: int | None, form: str) -> None:
        level = _level(prefix) if level is None else level
        stamp = _uptime_at(prefix, 0) if "[" in prefix else None
        if stamp is not None and not UPTIME.match(cut):
            cut = stamp.group(0).rstrip() + " " + cut  # the boot guard reads the prefix's uptime
        if len(cut.strip()) >= 12 and cut not in seen and cut != text:
            seen.add(cut)
            out.append(Realigned(cut, level, form))

    # Headers are looked for in the message only: the clock and host the parser took off are known.
    at = max(1, len(text) - len(msg)) if text.endswith(msg) else 1
    for start, prefix_end, form in _headers(text, at):
        level = _rfc_level(text, prefix_end) if form == "rfc5424" else None
        add(text[start:], text[:start], level, form)
    if not programs:
        return out[:MAX_TRIES]
    logger = _after_logger(msg)
    if logger is not None:
        add(logger[0], text[: len(text) - len(msg)], logger[1], logger[2])
    field = _message_field(text)
    if field is not None:
        # a JSON object's level field may come after its message: the whole line's, less the message
        start, value = field
        add(value, text[:start], _level(text[:start] + text[start:].replace(value, "", 1)), "field")
    return out[:MAX_TRIES]


def _rfc_level(text: str, start: int) -> int | None:
    m = _RFC5424.match(text, start)
    return int(m.group("pri")) & 7 if m else None


def dmesg_level_prefix(level: int | None) -> str:
    """The dmesg -x columns that state ``level`` ("kern  :err   : "), as the kernel parser reads a
    level off a line (parsing.alarm.kernel_priority); "" for none."""
    return "" if level is None else f"kern  :{LEVEL_NAMES[level]:<6}: "


_Event = TypeVar("_Event")


def first_reading(again: list[Realigned], stats: Any, read: Callable[[Realigned], list[_Event]]) -> list[_Event]:
    """The events of the first candidate whose reading (``read``, the parser's own) gives any, the line
    counted once in the parser's ``stats``; a reading that gives none leaves no trace in them."""
    for candidate in again:
        before = replace(stats)
        out = read(candidate)
        if out:
            stats.lines -= 1
            return out
        vars(stats).update(vars(before))
    return []
