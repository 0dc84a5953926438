"""What every log parser shares: the parsed record, the counters, the parser interface and line
hygiene. The parsers (:mod:`parsing.kernel_log`, :mod:`parsing.trainer_log`) import this module and
:mod:`parsing.registry` imports them, so the arrows only point one way."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

from faultlens.parsing import needles

# A line longer than this is a runaway (binary, a dumped tensor): only its head is examined.
MAX_LINE = 8192
# The raw line kept in an event's data; enough for any real log record.
MAX_KEPT = 4096



_BAD_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")
# A terminal's colour and cursor codes (ECMA-48 CSI: ESC [ parameters final byte), as a logger that
# believes it writes to a terminal puts them around "Traceback" or a level word: the whole sequence
# goes, not just its ESC, or "[31mTraceback (most recent call last):" hides the traceback's start.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


@dataclass(frozen=True)
class ParsedLine:
    """One recognised record: ``kind`` and ``data`` per docs/events.md; ``ts`` epoch seconds when
    the line carried a wall clock, ``mono`` seconds since boot when it carried that."""

    source: str
    kind: str
    data: dict[str, Any]
    ts: float | None = None
    mono: float | None = None


@dataclass
class ParserStats:
    """Every fed line lands in exactly one of recognised / skipped / garbled."""

    lines: int = 0
    recognised: int = 0
    skipped: int = 0
    garbled: int = 0
    events: int = 0
    # Skipped lines that look like trouble (parsing.alarm): a rule may be missing for them.
    alarming: int = 0
    # Recognised lines that are known noise (parsing/benign.toml): no event.
    benign: int = 0
    # Recognised lines taken by their subsystem's class (parsing/subsystems.toml) or by the model.
    by_subsystem: int = 0
    by_model: int = 0
    # Lines whose events are recorded, not acted on: logged at boot (parsing.kernel_quiet), or a
    # rule's line that says itself it is information or corrected.
    boot: int = 0
    quieted: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"lines": self.lines, "recognised": self.recognised, "skipped": self.skipped, "garbled": self.garbled, "events": self.events,
                "alarming": self.alarming, "benign": self.benign, "by_subsystem": self.by_subsystem, "by_model": self.by_model, "boot": self.boot, "quieted": self.quieted}


# Called with each skipped line that looks alarming (its message without the clock).
OnUnrecognised = Callable[[str], None]


class LogParser(Protocol):
    source: str
    stats: ParserStats
    on_unrecognised: OnUnrecognised | None

    def feed(self, line: str, *, ts: float | None = None) -> list[ParsedLine]: ...

    def flush(self) -> list[ParsedLine]: ...


def clean_line(line: Any) -> str | None:
    """The printable text of a raw line, or None when it is garbage (binary, mostly control bytes).

    A few stray control bytes (a torn write) are dropped and the rest still parsed, so a good
    record with one bad byte is not lost.
    """
    if isinstance(line, (bytes, bytearray)):
        line = bytes(line).decode("utf-8", errors="replace")
    if not isinstance(line, str):
        return None
    line = line[:MAX_LINE].rstrip("\r\n")
    if line.isprintable() and "\ufffd" not in line:  # the common case, checked in C
        return line
    if "\x1b" in line:
        line = _ANSI.sub("", line)
        if line.isprintable() and "\ufffd" not in line:
            return line
    bad = len(_BAD_CHARS.findall(line))
    if bad:
        if bad * 4 > len(line) or "\x00" in line and bad * 10 > len(line):
            return None
        line = _BAD_CHARS.sub("", line)
    return line


def any_of(literals: Iterable[str]) -> re.Pattern[str]:
    """A regex that finds any of ``literals`` (a prefilter: which one is not said; its match is not
    the literal): a trie entered at each literal's rarest character (parsing.needles), built once
    per set. A third of a plain trie's cost over the kernel pre-filter's 300 literals, which in
    turn was half of ``any(map(text.__contains__, literals))`` over 30-50. Its alternation is not
    grouped: ``pattern + "|x"`` stays one that the engine skips to by its first characters."""
    return needles.scan(frozenset(literals)).pattern


def common(line: str, fault: str, action: str, severity: str, **extra: Any) -> dict[str, Any]:
    """The keys every parsed event carries (docs/events.md), then the kind's own."""
    data: dict[str, Any] = {"line": line[:MAX_KEPT], "fault": fault, "action": action, "severity": severity}
    data.update(extra)
    return data
