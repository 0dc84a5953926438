"""Does a line no rule took look like trouble? (parsing.unrecognised mines the ones that do.)

Apart from the miner so the parsers can count alarming lines without importing Drain3.
"""

from __future__ import annotations

import re

from faultlens.parsing.line import any_of
from faultlens.parsing.timestamps import KMSG_HEADER

# "error" and "exception" anywhere (UnicodeDecodeError); the rest as words ("default" is no fault).
# No leading \w* in the pattern: it made every word start a backtracking scan (3x the parse time).
_ALARM = re.compile(
    r"error|exception|\b(?:fail(?:s|ed|ure|ing)?|faults?|time ?outs?|timed out|abort(?:s|ed|ing)?|fatal|critical|panic|corrupt\w*|"
    r"unrecoverable|hung|stuck|lost|refused|down|offline|not responding|bug|oops|can.t recover|unable to)\b",
    re.IGNORECASE,
)
# Kernel priority of a line when its format carries one: /dev/kmsg "3,123,456,-;" (or "3,123,456;",
# no flags: parsing.timestamps.KMSG_HEADER), dmesg -x "kern  :err   :", printk's "<3>".
_DMESG_X = re.compile(r"^\w+\s*:(emerg|alert|crit|err|warn|notice|info|debug)\s*:")
_ANGLE = re.compile(r"^<(\d)>")
_LEVELS = {"emerg": 0, "alert": 1, "crit": 2, "err": 3, "warn": 4, "notice": 5, "info": 6, "debug": 7}
# err (3) or worse is alarming whatever the words.
ALARM_PRIORITY = 3


def kernel_priority(raw: str) -> int | None:
    """The syslog level (0 emerg .. 7 debug) the line's own format states, or None."""
    first = raw[:1]
    if first.isdigit():
        m = KMSG_HEADER.match(raw)
        return int(m.group(1)) & 7 if m else None
    if first == "<":
        m = _ANGLE.match(raw)
        return int(m.group(1)) if m else None
    if first.isalpha():
        m = _DMESG_X.match(raw)
        return _LEVELS[m.group(1)] if m else None
    return None


# Substrings one of which every _ALARM match holds: a plain scan rejects most lines before the regex.
QUICK = ("error", "exception", "fail", "fault", "time", "abort", "fatal", "critical", "panic", "corrupt", "unrecoverable",
          "hung", "stuck", "lost", "refused", "down", "offline", "not responding", "bug", "oops", "recover", "unable")
# Literals on the lowered line (a trie regex, parsing.line.any_of): ~1.5 us a line, where the
# case-blind word regex alone costs 18.
_QUICK_RE = any_of(QUICK)


def looks_alarming(message: str, raw: str | None = None) -> bool:
    """Words of trouble in the message, or a kernel priority of err or worse on the raw line."""
    if _QUICK_RE.search(message.lower()) and _ALARM.search(message):
        return True
    prio = kernel_priority(raw) if raw else None
    return prio is not None and prio <= ALARM_PRIORITY
