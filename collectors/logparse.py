"""What every log parser shares: the parsed record, the counters, line hygiene, and the glue that
turns raw ``line`` events (DESIGN.md §2) into parsed events.

The parsers themselves (:mod:`collectors.kernel_log`, :mod:`collectors.trainer_log`) are pure and
stateful only across the lines of one multi-line record; :class:`LineEventParser` keeps one per
(job, node, source) so interleaved streams of many nodes never mix their records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol

from streams.events import Envelope, InvalidEvent

# A line longer than this is a runaway (binary, a dumped tensor): only its head is examined.
MAX_LINE = 8192
# The raw line kept in an event's data; enough for any real log record.
MAX_KEPT = 4096

SOURCE_ALIASES = {"kernel": "kernel", "dmesg": "kernel", "nccl": "nccl", "trainer": "nccl"}

_BAD_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")


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

    def as_dict(self) -> dict[str, int]:
        return {"lines": self.lines, "recognised": self.recognised, "skipped": self.skipped, "garbled": self.garbled, "events": self.events}


class LogParser(Protocol):
    source: str
    stats: ParserStats

    def feed(self, line: str) -> list[ParsedLine]: ...

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
    bad = len(_BAD_CHARS.findall(line))
    if bad:
        if bad * 4 > len(line) or "\x00" in line and bad * 10 > len(line):
            return None
        line = _BAD_CHARS.sub("", line)
    return line


def common(line: str, fault: str, action: str, severity: str, **extra: Any) -> dict[str, Any]:
    """The keys every parsed event carries (docs/events.md), then the kind's own."""
    data: dict[str, Any] = {"line": line[:MAX_KEPT], "fault": fault, "action": action, "severity": severity}
    data.update(extra)
    return data


def parser_for(source: str) -> LogParser:
    """A fresh parser for ``kernel`` or ``nccl`` (``trainer`` and ``dmesg`` are aliases)."""
    canonical = SOURCE_ALIASES.get((source or "").strip().lower())
    if canonical == "kernel":
        from collectors.kernel_log import KernelLogParser

        return KernelLogParser()
    if canonical == "nccl":
        from collectors.trainer_log import TrainerLogParser

        return TrainerLogParser()
    raise ValueError(f"no log parser for source {source!r} (one of kernel, nccl, trainer)")


_KERNEL_HINTS = re.compile(
    r"NVRM:|\bkernel: |mlx5_core|nvidia-nvswitch|pcieport|\bEDAC\b|\bmce: |segfault at|Out of memory|oom-kill|"
    r"soft lockup|blocked for more than|^\[\s*\d+\.\d+\]|^\d,\d+,\d+,[-c+];"
)
_TRAINER_HINTS = re.compile(
    r"NCCL (?:WARN|INFO)|ProcessGroupNCCL|Traceback \(most recent call last\)|^\[rank\d+\]|torch\.distributed|"
    r"CUDA error|\bloss\b|^\s+File \"|Error: |\[default\d+\]:"
)


def guess_source(lines: Iterable[str]) -> str:
    """``kernel`` or ``nccl`` from the look of a sample of lines; a tie goes to ``nccl``."""
    kernel = trainer = 0
    for line in lines:
        if not isinstance(line, str):
            continue
        if _KERNEL_HINTS.search(line):
            kernel += 1
        if _TRAINER_HINTS.search(line):
            trainer += 1
    return "kernel" if kernel > trainer else "nccl"


def to_envelope(parsed: ParsedLine, *, job: str, node: str, ts: float, event_id: str) -> Envelope:
    """The event for one parsed record (raises InvalidEvent on a bad job/node/ts, like any envelope)."""
    return Envelope(ts=ts, job=job, node=node, source=parsed.source, kind=parsed.kind, data=parsed.data, id=event_id)


@dataclass
class _Stream:
    parser: LogParser
    last: Envelope


@dataclass
class LineEventParser:
    """Parses raw ``line`` events on the way in; every other event passes through unchanged.

    Parsed events get ids derived from the raw event's id (``{id}.{i}``), so a replayed or
    redelivered raw line yields the same ids and dedup downstream holds.
    """

    streams: dict[tuple[str, str, str], _Stream] = field(default_factory=dict)

    def parse(self, env: Envelope) -> list[Envelope]:
        if env.kind != "line" or env.source not in ("kernel", "nccl"):
            return [env]
        line = env.data.get("line") if isinstance(env.data, Mapping) else None
        if not isinstance(line, str):
            raise InvalidEvent("data.line", f"a line event needs a string data.line, got {type(line).__name__}")
        key = (env.job, env.node, env.source)
        stream = self.streams.get(key)
        if stream is None:
            stream = self.streams[key] = _Stream(parser_for(env.source), env)
        stream.last = env
        return [
            to_envelope(p, job=env.job, node=env.node, ts=env.ts, event_id=f"{env.id}.{i}")
            for i, p in enumerate(stream.parser.feed(line))
        ]

    def flush(self) -> list[Envelope]:
        """Records still open (a traceback cut off at the end of a trace), attributed to the last line seen."""
        out = []
        for stream in self.streams.values():
            env = stream.last
            for i, p in enumerate(stream.parser.flush()):
                out.append(to_envelope(p, job=env.job, node=env.node, ts=env.ts, event_id=f"{env.id}.f{i}"))
        return out
