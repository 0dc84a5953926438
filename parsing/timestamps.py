"""Timestamp prefixes of kernel and trainer log lines: split a line into (epoch, monotonic, message).

Pure functions, no state. Forms recognised at the start of a line:

* ``/dev/kmsg`` records ``6,1234,5678901234,-;message`` (monotonic microseconds)
* ``dmesg`` monotonic ``[12345.678901] message``
* ``dmesg -T`` ``[Sun Nov 22 10:11:12 2026] message``
* ``dmesg -H`` / ``--reltime`` ``[Nov22 10:11] message``, then ``[  +0.000123] message`` (a delta: no clock)
* ``dmesg --time-format iso`` ``2026-11-22T10:11:12,123456+00:00 message``
* journald short-iso / rsyslog RFC 3339 ``2026-11-22T10:11:12[.123456]+0000 host kernel: message``
* classic syslog ``Nov 22 10:11:12 host kernel: message`` (no year: the caller's year, or the
  year before when that would put the line more than a day in the future)
* Python logging / torchrun ``[2026-11-22 10:11:12,345] ...`` and ``2026-11-22 10:11:12,345 ...``
* glog (torch C++ logs) ``E1122 10:11:12.345678 1234 file.cpp:12] ...`` (no year either)

Times without a zone (dmesg -T, syslog, glog, Python logging) are read as UTC: collectors run
with TZ=UTC on the fleets this targets, and a wrong zone shifts events, it never drops them.
A syslog or journald prefix may itself be followed by a monotonic ``[  12.345]``; both are kept.
"""

from __future__ import annotations

import calendar
import re
import time
from typing import NamedTuple

_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}

# A /dev/kmsg record's header (Documentation/ABI/testing/dev-kmsg): "prefix,seq,usec,flags[,more];".
# prefix is facility * 8 + level (so up to 191, the level its low three bits); the flags field ("-",
# "c", "+") and what follows it ("caller=T1") are left out by some readers and relays
# ("6,902,101;message"), so they are optional: without them the level went unread and an info
# record was judged by its words. parsing.alarm reads the level off the same header.
KMSG_HEADER = re.compile(r"(\d{1,3}),(\d+),(\d+)(?:,[^;]{0,16})?;")
# The kernel's clock, and after it the printk caller id a CONFIG_PRINTK_CALLER kernel adds (kernel/printk/printk.c
# info_print_prefix: "[T<pid>]" for a task, "[C<cpu>]" outside one, padded to six: "[  397.26][   T11] ...";
# (round 20) util-linux dmesg prints it after a space: "[ 2491.403032] [    T240] igc ...").
_MONO = re.compile(r"\[\s*(\d{1,10}\.\d{1,9})\](?: ?\[\s*[TC]\d{1,7}\])?\s?")
# dmesg --reltime / -H (util-linux sys-utils/dmesg.c print_record): a minute's first line "[Feb 2 08:03] "
# (strftime "%b%e %H:%M", so "[Sep11 18:40]" too), the others the delta to the line before "[  +0.317065] "
# (printf's %+8.06f, with the locale's decimal comma: "[  +0,317065]"); --show-delta's "[<    0.000123>] ".
# A delta is no clock: the message is taken off it and read as a line without one.
_RELTIME = re.compile(r"\[\s*(?:\+\d{1,9}[.,]\d{6}|<\s*\d{1,9}[.,]\d{6}>)\]\s?")
_RELTIME_MINUTE = re.compile(r"\[([A-Z][a-z]{2}) ?(\d{1,2}) (\d\d):(\d\d)\]\s?")
_CTIME = re.compile(r"\[(?:[A-Z][a-z]{2} )?([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:\.\d+)? (\d{4})\]\s?")
# (round 21) util-linux dmesg given several --time-format options prints each ("kern  :info  : [Jan13 04:31] [Tue Jan 13
# 04:31:07 2026] [T10489]  connection7:0: ..."): after a reltime stamp a ctime stamp may follow, and after either the
# printk caller id.
_CALLER = re.compile(r"\[\s*[TC]\d{1,7}\]\s*")
_ISO = re.compile(
    r"\[?(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:([.,])(\d{1,9}))?\s?(Z|[+-]\d\d:?\d\d)?\]?:?\s?"
)
_SYSLOG = re.compile(r"([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))? ")
# syslog under a non-English locale writes the month in its own words ("kvě 25", "maj 08", "févr. 3"):
# the clock cannot be read without the locale, but the host and tag after it must still be taken off,
# or the kernel's line is read as a program's.
_LOCALE_SYSLOG = re.compile(r"[^\W\d_]{2,5}\.? +\d{1,2} \d\d:\d\d:\d\d(?:\.\d{1,9})? ")
# After a syslog/journald clock: "host tag[pid]: " (tag is kernel for the kernel ring).
_HOST_TAG = re.compile(r"[\w.\-]+ [\w.\-/@]+(?:\[\d+\])?: ")
# An rsyslog template that writes the numeric facility and severity before the host, and the tag
# glued to the kernel's clock ("2023-02-07 15:24:38.604 0 4 localhost kernel:[  267.326480] qla2xxx ...").
_FAC_SEV_HOST_TAG = re.compile(r"\d{1,2} [0-7] [\w.\-]+ [\w.\-/@]+(?:\[\d+\])?:(?: |(?=\[))")
# A classic syslog line whose host a reporter or a relay dropped ("Feb  2 08:03:20 kernel: [37937.1] ..."):
# the program's tag alone is taken off, or the kernel's own clock and driver tag stay behind "kernel: ".
# A program's name starts in lower case; a capital word there ("WARNING:", "INFO:", "NVRM:") is the message's.
_TAG_ONLY = re.compile(r"[a-z][\w.\-/@]*(?:\[\d+\])?: ")
# (round 35) A daemon's Go logger writing straight to its file: Go's log clock (log.LstdFlags|log.Lmicroseconds,
# "2006/01/02 15:04:05.000000"), then the program and its pid with no host and no colon, then its level in angle
# brackets (JuiceFS's utils/logger.go: "2025/03/06 10:43:58.436860 juicefs[2508038] <ERROR>: ..."): the program is named.
_GO_LOG_PROGRAM = re.compile(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d{1,9})? ([a-z][\w.\-]*)\[\d+\] <[A-Z]+>: ")
_GLOG = re.compile(r"[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{1,9})\s")
# (round 18) A console capture's elapsed clock and its delta to the line before ("00h 02m 10.529s(  51ms): [  131.91] ena: ..."):
# the capture's, not the machine's; taken off, the kernel's own clock and line after it are read as dmesg's.
_ELAPSED = re.compile(r"\d{2,3}h \d\dm \d\d\.\d{3}s\(\s*\d+ms\): ")


class Stamped(NamedTuple):
    """A log line split into its clock (``ts`` epoch seconds, ``mono`` seconds since boot) and message.
    A tuple, not a frozen dataclass: one is made per line, and a dataclass's __init__ cost a tenth
    of a plain line's parse."""

    ts: float | None
    mono: float | None
    message: str


# calendar.timegm of a clock's minute, by its fields as the line spelled them (strings or ints): a
# log's lines share a few minutes, and converting one (int() of five fields, datetime's ordinals)
# was most of a stamped line's cost.
_MINUTES: dict[tuple[int | str, ...], int | None] = {}
_NO = object()


def _minute_start(year: int | str, month: int | str, day: int | str, hh: int | str, mm: int | str) -> int | None:
    """Epoch seconds of the minute (UTC), as calendar.timegm computes it (a day past the month's end
    runs on into the next month); None for an impossible month, day, hour, minute or year."""
    key = (year, month, day, hh, mm)
    start = _MINUTES.get(key, _NO)
    if start is _NO:
        y, mo, d, h, mi = int(year), int(month), int(day), int(hh), int(mm)
        start = None
        if 1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60:
            try:
                start = calendar.timegm((y, mo, d, h, mi, 0, 0, 0, 0))
            except (ValueError, OverflowError):
                start = None
        if len(_MINUTES) > 4096:
            _MINUTES.clear()
        _MINUTES[key] = start
    return start  # type: ignore[return-value]


def _epoch(year: int | str, month: int | str, day: int | str, hh: int | str, mm: int | str, ss: int | str,
           frac: str | None = None) -> float | None:
    start = _minute_start(year, month, day, hh, mm)
    if start is None:
        return None
    sec = int(ss)
    if sec >= 61:
        return None
    value = float(start + sec)
    if frac:
        value += int(frac) / 10 ** len(frac)
    return value


def _zone_offset(zone: str | None) -> int:
    if not zone or zone == "Z":
        return 0
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)


# The current year as (first second, first second of the next year, year): time.gmtime per line
# was a fifth of a syslog or glog line's cost.
_YEAR: tuple[float, float, int] = (0.0, 0.0, 0)


def _year_of(now: float) -> int:
    global _YEAR
    start, end, year = _YEAR
    if not start <= now < end:
        year = time.gmtime(now).tm_year
        start = float(calendar.timegm((year, 1, 1, 0, 0, 0)))
        end = float(calendar.timegm((year + 1, 1, 1, 0, 0, 0))) if year < 9999 else float("inf")
        _YEAR = (start, end, year)
    return year


def _guess_year(month: int, day: int, now: float | None) -> int:
    """Syslog and glog omit the year: take now's, unless that lands more than a day ahead."""
    now = time.time() if now is None else now
    year = _year_of(now)
    candidate = _epoch(year, month, day, 0, 0, 0)
    if candidate is not None and candidate > now + 86400:
        return year - 1
    return year


_PRINTK_LEVEL = re.compile(r"<[0-7]>(?=\[)")
_CONSOLE_LOGIN = re.compile(r"[\w.\-]{1,63} login: (?=\[\s*\d|<[0-7]>\[)")
# dmesg --decode's facility and level columns.
_DMESG_LEVEL = re.compile(r"^[a-z]+\s*:(?:emerg|alert|crit|err|warn|notice|info|debug)\s*: ?")


def _strip_mono(message: str) -> tuple[float | None, str]:
    m = _MONO.match(message)
    if m:
        return float(m.group(1)), message[m.end():]
    return None, message


def _ctime(m: re.Match[str], line: str) -> Stamped | None:
    """dmesg -T's stamp ``m`` at the start of ``line`` and the message after it (and after a caller id)."""
    month = _MONTHS.get(m.group(1))
    ts = _epoch(m.group(6), month, *m.group(2, 3, 4, 5)) if month else None
    if ts is None:
        return None
    rest = line[m.end():]
    c = _CALLER.match(rest)
    return Stamped(ts, None, rest[c.end():] if c else rest)


def _after_reltime(stamped: Stamped) -> Stamped:
    """A reltime stamp's line: a ctime stamp after it gives the clock (to the second)."""
    rest = stamped.message
    m = _CTIME.match(rest) if rest.startswith("[") else None
    found = _ctime(m, rest) if m else None
    if found is not None:
        return found
    c = _CALLER.match(rest) if rest.startswith("[") else None
    return Stamped(stamped.ts, stamped.mono, rest[c.end():]) if c else stamped


def split_timestamp(line: str, *, now: float | None = None) -> Stamped:
    """The clock prefix of ``line`` (any form above) and the message after it; never raises."""
    if not line:
        return Stamped(None, None, line)
    first = line[0]
    if first.islower():
        m = _DMESG_LEVEL.match(line)
        if m:
            # dmesg -x: "kern  :err   : " before the clock (parsing.alarm reads the level off the raw line).
            line = line[m.end():]
            if not line:
                return Stamped(None, None, line)
            first = line[0]
    if first.isalnum() and " login: " in line[:72] and (m := _CONSOLE_LOGIN.match(line)):
        # a serial console's getty prompt the kernel's next message was printed after ("node1 login: [  519.20] nvme ...")
        line = line[m.end():]
        first = line[0]
    if first == "<" and (m := _PRINTK_LEVEL.match(line)):
        # printk's "<4>" before the kernel's clock (a console or an early dmesg without -x): its level
        # is read off the raw line (parsing.alarm), its clock is the kernel's
        line = line[m.end():]
        if not line:
            return Stamped(None, None, line)
        first = line[0]
    elif first == "k" and line.startswith("kernel: [") and (m := _MONO.match(line, 8)):
        # a syslog line whose clock and host a reporter dropped, its tag kept ("kernel: [  731.07] sof-audio-pci ..."):
        # the kernel's own clock and driver tag follow
        return Stamped(None, float(m.group(1)), line[m.end():])
    elif first in "k " and line.lstrip(" ").startswith("kernel:") and (body := line.lstrip(" ")[7:])[:1].isalpha():
        # (round 34) syslogd's broadcast of an emergency to the terminals ("Message from syslogd@host at ..." then
        # " kernel:LustreError: 1474:0:(...) LBUG"): the tag and the message with no space between, no clock; the
        # message is the kernel's, its driver's tag first
        return Stamped(None, None, body)
    if first.isdigit():
        if line[2:4] == "h " and (m := _ELAPSED.match(line)):
            mono, rest = _strip_mono(line[m.end():])
            return Stamped(None, mono, rest)
        m = KMSG_HEADER.match(line)
        if m:
            return Stamped(None, int(m.group(3)) / 1e6, line[m.end():])
        m = _ISO.match(line)
        if m:
            return _from_iso(m, line)
    elif first == "[":
        m = _MONO.match(line)
        if m:
            return Stamped(None, float(m.group(1)), line[m.end():])
        m = _CTIME.match(line)
        if m:
            stamped = _ctime(m, line)
            if stamped is not None:
                return stamped
        m = _ISO.match(line)
        if m:
            return _from_iso(m, line)
        m = _GLOG.match(line, 1)  # torch >= 2.2 wraps glog headers in brackets: [E1122 10:11:12.345 ...]
        if m:
            return _from_glog(m, line, now)
        m = _RELTIME.match(line)
        if m:
            return _after_reltime(Stamped(None, None, line[m.end():]))
        m = _RELTIME_MINUTE.match(line)
        month = _MONTHS.get(m.group(1)) if m else None
        if m and month:
            day = int(m.group(2))
            return _after_reltime(Stamped(_epoch(_guess_year(month, day, now), month, day, m.group(3), m.group(4), 0), None, line[m.end():]))
    elif first in "IWEF" and (m := _GLOG.match(line)):
        return _from_glog(m, line, now)
    elif first.isupper():  # "Feb 25 ..." too: a line of February is syslog's when it is not glog's
        m = _SYSLOG.match(line)
        month = _MONTHS.get(m.group(1)) if m else None
        if m and month:
            day = int(m.group(2))
            ts = _epoch(_guess_year(month, day, now), month, day, *m.group(3, 4, 5, 6))
            if ts is not None:
                rest = line[m.end():]
                tag = _HOST_TAG.match(rest) or _TAG_ONLY.match(rest)
                if tag:
                    rest = rest[tag.end():]
                mono, rest = _strip_mono(rest)
                return Stamped(ts, mono, rest)
    if first.isalpha() and (m := _LOCALE_SYSLOG.match(line)) and (tag := _HOST_TAG.match(line, m.end())):
        mono, rest = _strip_mono(line[tag.end():])
        return Stamped(None, mono, rest)
    return Stamped(None, None, line)


def program_of(line: str) -> str | None:
    """The program a syslog or journald line names in its ``host tag[pid]: `` (lowered, the pid
    dropped), or a Go daemon's own log names in ``clock program[pid] <LEVEL>:`` (JuiceFS); None for the
    kernel's own lines and a line of no such prefix. split_timestamp takes the tag off with the clock;
    the parsers ask for it only for a line whose message names no subsystem of its own (a daemon's
    line: chronyd, ptp4l, rpc.mountd, ...)."""
    if line[:1].isdigit() and (go := _GO_LOG_PROGRAM.match(line)):
        return go.group(1).lower()
    m = _SYSLOG.match(line) if line[:1].isupper() else _ISO.match(line) if line[:1].isdigit() else None
    if m is None or (m.re is _ISO and m.group(7) == ","):
        return None
    tag = _HOST_TAG.match(line, m.end())
    if tag is None:
        return None
    name = tag.group(0).split(" ", 1)[1].partition("[")[0].rstrip(": ").lower()
    return None if name == "kernel" else name


def _from_iso(m: re.Match[str], line: str) -> Stamped:
    year, month, day, hh, mm, ss = m.group(1, 2, 3, 4, 5, 6)
    ts = _epoch(year, month, day, hh, mm, ss, m.group(8))
    if ts is None:
        return Stamped(None, None, line)
    ts -= _zone_offset(m.group(9))
    rest = line[m.end():]
    # dmesg --time-format iso writes a comma and no host; journald/rsyslog write "host tag: ".
    if m.group(7) != "," and not line.startswith("["):
        tag = _HOST_TAG.match(rest) or (_FAC_SEV_HOST_TAG.match(rest) if rest[:1].isdigit() else None)
        if tag:
            rest = rest[tag.end():]
    mono, rest = _strip_mono(rest)
    return Stamped(ts, mono, rest)


def _from_glog(m: re.Match[str], line: str, now: float | None) -> Stamped:
    month, day = int(m.group(1)), int(m.group(2))
    ts = _epoch(_guess_year(month, day, now), month, day, *m.group(3, 4, 5, 6))
    # glog's header (severity, thread, file:line) stays in the message: parsers read the severity.
    return Stamped(ts, None, line)


# The header patterns above by the names parsing.realign finds them with inside a line (a known
# format behind a prefix no parser knows).
UPTIME = _MONO
SYSLOG_CLOCK = _SYSLOG
ISO_CLOCK = _ISO
GLOG_HEADER = _GLOG
HOST_TAG = _HOST_TAG
