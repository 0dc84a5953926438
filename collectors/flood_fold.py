"""Log floods folded at the source: the first line of a kind goes out at once, its repeats as one count.

A failing GPU can log the same Xid hundreds of thousands of times (docs/design.md §3: "a node that
logs 800,000 Xid 95 lines gets one diagnosis, with a count"). Sent line by line that is 800,000
events through the spool and Kafka, and the parser alone costs a core at 100,000 lines a second.
So the log source folds:

- The first event of a fold key (same source, kind, fault, code, device, rank, rule, and the same
  text after the time prefix) is published
  as it comes: folding never delays the first sign of a fault.
- Its repeats within ``interval_s`` are counted; when the interval ends one *folded* event goes
  out: the first event's payload with ``count`` (the lines it stands for), ``folded: true``,
  ``first_ts`` / ``last_ts`` and the last repeat's ``line``. A flood that goes on gives one folded
  event per interval; a key quiet for an interval is forgotten (its next line is a first again).
- Lines whose text (after the time prefix) repeats a line already folded skip the parser: a cache
  of open runs maps that text to its key (:meth:`Folder.cached`). Only a line that the parser
  turned into exactly one event of its own (not part of a multi-line record) is cached.

Other lines are parsed and sent as before, in order, never held behind a fold. Memory is bounded
by ``max_keys`` open runs (a line of a new key past it is sent unfolded).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from faultlens.events.envelope import Envelope, new_id

FOLD_INTERVAL_S = 5.0
MAX_KEYS = 512
# Time prefixes a repeated line differs by: kmsg's "pri,seq,usec,flags;", a syslog "<pri>",
# dmesg's "[  12.345678]", a syslog date and host, an ISO stamp.
_PREFIX = re.compile(
    r"(?:\d+,\d+,\d+,[^;]*;)?(?:<\d+>)?"
    r"(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ |\d{4}-\d\d-\d\d[T ][\d:.,+\-Z]+ (?:\S+ )?)?"
    r"(?:kernel: )?\s*(?:\[\s*\d+\.\d+\]\s*)?")
# Payload keys that name what a line is about (its code, its device, its rank).
_KEY_FIELDS = ("xid", "sxid", "code", "gpu", "pci", "device", "port", "rank", "rule", "server")


def body(line: str) -> str:
    """The line without the time prefix its repeats differ by."""
    m = _PREFIX.match(line)
    return line[m.end():] if m else line


def fold_key(event: Envelope) -> tuple[Any, ...]:
    """What a repeat shares with its first: the event's kind, the fields naming its code and
    device, and its line's exact text after the time prefix. Numbers are not masked: lines that
    differ in a rank, a pid, a sequence or an event counter are different events (the first
    failing rank is read from exactly such lines), so only true repeats fold, and a different
    message is never held back."""
    d = event.data
    return (event.source, event.kind, d.get("fault"), *(str(d.get(k)) for k in _KEY_FIELDS),
            body(str(d.get("line") or "")))


@dataclass(slots=True)
class _Run:
    first: Envelope
    started: float  # monotonic: the interval this run counts in
    count: int = 0
    first_ts: float = 0.0
    last_ts: float = 0.0
    last_line: str = ""
    bodies: set[str] = field(default_factory=set)


@dataclass
class FoldStats:
    folded_lines: int = 0  # lines counted into a fold instead of being sent
    folded_events: int = 0  # folded events sent
    cached_lines: int = 0  # of those, lines that skipped the parser
    unfolded_overflow: int = 0  # lines of a new key sent unfolded because MAX_KEYS runs were open


class Folder:
    def __init__(self, interval_s: float = FOLD_INTERVAL_S, max_keys: int = MAX_KEYS):
        self.interval_s = interval_s
        self.max_keys = max_keys
        self.stats = FoldStats()
        self._runs: dict[tuple[Any, ...], _Run] = {}
        self._cache: dict[str, tuple[Any, ...]] = {}  # line body → the open run it repeats

    def cached(self, line: str, now_ts: float) -> bool:
        """Count ``line`` into its run without parsing it, when its text repeats a folded line."""
        key = self._cache.get(body(line))
        if key is None:
            return False
        run = self._runs.get(key)
        if run is None:
            return False
        self._count(run, line, now_ts)
        self.stats.cached_lines += 1
        return True

    def admit(self, event: Envelope, line: str | None, now: float) -> bool:
        """True: publish ``event`` now (the first of its key in this interval, or no room to fold).
        False: it was counted into its run. ``line``: the single raw line it came from, if any
        (its text is then cached so its repeats skip the parser)."""
        key = fold_key(event)
        run = self._runs.get(key)
        if run is None:
            if len(self._runs) >= self.max_keys:
                self.stats.unfolded_overflow += 1
                return True
            run = self._runs[key] = _Run(event, now)
            if line is not None:
                self._remember(run, key, line)
            return True
        self._count(run, event.data.get("line") or line or "", event.ts)
        if line is not None:
            self._remember(run, key, line)
        return False

    def due(self, now: float, *, all_: bool = False) -> list[Envelope]:
        """The folded events of runs whose interval ended (every run with ``all_``)."""
        out = []
        for key, run in list(self._runs.items()):
            if not all_ and now - run.started < self.interval_s:
                continue
            if run.count:
                out.append(self._folded(run))
                self.stats.folded_events += 1
            if run.count and not all_:
                run.count, run.started = 0, now  # the flood goes on: a new interval
                continue
            del self._runs[key]
            for b in run.bodies:
                self._cache.pop(b, None)
        return out

    @property
    def open_runs(self) -> int:
        return len(self._runs)

    # --- internals -----------------------------------------------------------------------------
    def _remember(self, run: _Run, key: tuple[Any, ...], line: str) -> None:
        if len(run.bodies) < 8:  # a few variants (pids) per run; bounded
            b = body(line)
            run.bodies.add(b)
            self._cache[b] = key

    def _count(self, run: _Run, line: str, ts: float) -> None:
        if not run.count:
            run.first_ts = ts
        run.count += 1
        run.last_ts = ts
        run.last_line = line
        self.stats.folded_lines += 1

    @staticmethod
    def _folded(run: _Run) -> Envelope:
        data = dict(run.first.data)
        data.update(count=run.count, folded=True, first_ts=run.first_ts, last_ts=run.last_ts)
        if run.last_line:
            data["line"] = run.last_line
        first = run.first
        return Envelope(ts=run.last_ts or time.time(), job=first.job, node=first.node, source=first.source,
                        kind=first.kind, data=data, id=new_id())
