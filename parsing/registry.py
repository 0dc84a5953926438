"""The parser registry: a parser per source, guessing a source from a sample of lines, and the
glue that turns raw ``line`` events (docs/design.md §2) into parsed events.

The parsers themselves (:mod:`parsing.kernel_log`, :mod:`parsing.trainer_log`) are pure and
stateful only across the lines of one multi-line record; :class:`LineEventParser` keeps one per
(job, node, source) so interleaved streams of many nodes never mix their records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.parsing.kernel_log import KernelLogParser
from faultlens.parsing.line import LogParser, OnUnrecognised, ParsedLine
from faultlens.parsing.rules import LineRule
from faultlens.parsing.trainer_log import TrainerLogParser

SOURCE_ALIASES = {"kernel": "kernel", "dmesg": "kernel", "nccl": "nccl", "trainer": "nccl"}


def parser_for(source: str, rules: Sequence[LineRule] | None = None, on_unrecognised: OnUnrecognised | None = None, *,
               live_from: float | None = None) -> LogParser:
    """A fresh parser for ``kernel`` or ``nccl`` (``trainer`` and ``dmesg`` are aliases); ``rules``
    is the line catalogue (parsing.rules.load), the shipped one when None; ``on_unrecognised`` hears
    every skipped line that looks alarming (parsing.unrecognised.UnrecognisedMiner.add);
    ``live_from`` (kernel): the uptime in seconds from which a line may act against a job, the
    agent's own start where it knows it (parsing.kernel_quiet; None: BOOT_UPTIME_S)."""
    canonical = SOURCE_ALIASES.get((source or "").strip().lower())
    if canonical == "kernel":
        return KernelLogParser(rules=rules, on_unrecognised=on_unrecognised, live_from=live_from)
    if canonical == "nccl":
        return TrainerLogParser(rules=rules, on_unrecognised=on_unrecognised)
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
    rules: Sequence[LineRule] | None = None  # the line catalogue; the shipped one when None
    # Hears (source, node, message) of every alarming line no rule took (parsing.unrecognised).
    on_unrecognised: Callable[[str, str, str], None] | None = None

    def parse(self, env: Envelope) -> list[Envelope]:
        if env.kind != "line" or env.source not in ("kernel", "nccl"):
            return [env]
        data = env.data
        # A dict first: typing.Mapping's isinstance check costs a fifth of a line's parse.
        line = data.get("line") if isinstance(data, dict) or isinstance(data, Mapping) else None
        if not isinstance(line, str):
            raise InvalidEvent("data.line", f"a line event needs a string data.line, got {type(line).__name__}")
        key = (env.job, env.node, env.source)
        stream = self.streams.get(key)
        if stream is None:
            stream = self.streams[key] = _Stream(parser_for(env.source, self.rules, self._hook(env.source, env.node)), env)
        stream.last = env
        return [
            to_envelope(p, job=env.job, node=env.node, ts=env.ts, event_id=f"{env.id}.{i}")
            for i, p in enumerate(stream.parser.feed(line, ts=env.ts))
        ]

    def _hook(self, source: str, node: str) -> OnUnrecognised | None:
        hear = self.on_unrecognised
        return None if hear is None else (lambda msg: hear(source, node, msg))

    def flush(self) -> list[Envelope]:
        """Records still open (a traceback cut off at the end of a trace), attributed to the last line seen."""
        out = []
        for stream in self.streams.values():
            env = stream.last
            for i, p in enumerate(stream.parser.flush()):
                out.append(to_envelope(p, job=env.job, node=env.node, ts=env.ts, event_id=f"{env.id}.f{i}"))
        return out
