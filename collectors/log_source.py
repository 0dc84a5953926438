"""A log source of the node agent: lines from a reader → a stateful parser per stream → envelopes.

The reader is anything with ``poll() -> list[(stream, line)]`` (a :class:`FileFollower` over the
trainer's logs, a kernel reader wrapped by :func:`keyed`). Each stream (a file path, the kernel
ring) gets its own parser, because parsers join multi-line records (a Python traceback) and two
files interleaved would tear them apart. A parser that sees no line for ``flush_idle_s`` is
flushed, so the last traceback of a crashed trainer is not held back waiting for a next line.

A line the parser chokes on is counted as garbled and skipped: one bad line never stops the
source, and never loses the lines around it.

Floods are folded here (collectors/flood_fold.py): the first event of a kind goes out at once,
its repeats as one event per interval with a ``count``, and a repeated line skips the parser.
A reader that stopped short of the end (``more``: it caps what one poll returns, so memory stays
bounded while it catches up) is polled again at once instead of after ``poll_s``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from faultlens.collectors.flood_fold import Folder
from faultlens.events.envelope import Envelope, InvalidEvent, new_id
from faultlens.parsing.line import LogParser
from faultlens.parsing.registry import to_envelope as parsed_to_envelope

log = logging.getLogger(__name__)


class LineReader(Protocol):
    def poll(self) -> list[tuple[str, str]]: ...
    def close(self) -> None: ...


ToEnvelope = Callable[..., Envelope]


@dataclass
class LogSourceStats:
    lines: int = 0
    events: int = 0
    garbled: int = 0  # lines the parser raised on, or whose event was not a valid envelope


class keyed:
    """Adapts a reader whose ``poll()`` returns plain lines to ``(stream, line)`` pairs."""

    def __init__(self, reader: Any, stream: str):
        self.reader = reader
        self.stream = stream

    def poll(self) -> list[tuple[str, str]]:
        return [(self.stream, line) for line in self.reader.poll()]

    def drain(self) -> list[tuple[str, str]]:
        drain = getattr(self.reader, "drain", None)
        return [(self.stream, line) for line in drain()] if callable(drain) else []

    @property
    def more(self) -> bool:
        return bool(getattr(self.reader, "more", False))

    def positions(self) -> dict[str, int]:
        positions = getattr(self.reader, "positions", None)
        return positions() if callable(positions) else {self.stream: getattr(getattr(self.reader, "stats", None), "lines", 0)}

    def close(self) -> None:
        self.reader.close()


class LogSource:
    """One agent source; ``run(stop)`` polls until ``stop`` is set (runs in its own thread)."""

    def __init__(self, name: str, open_reader: Callable[[], LineReader], parser_factory: Callable[[], LogParser],
                 *, job: str, node: str, publish: Callable[[Envelope], Any], poll_s: float = 0.2,
                 flush_idle_s: float = 2.0, to_envelope: ToEnvelope | None = None,
                 fold: Folder | None = None, fold_lines: bool = True,
                 on_fed: Callable[..., Any] | None = None):
        self.name = name
        self.open_reader = open_reader
        self.parser_factory = parser_factory
        self.job = job
        self.node = node
        self.publish = publish
        self.poll_s = poll_s
        self.flush_idle_s = flush_idle_s
        self.to_envelope = to_envelope or parsed_to_envelope
        self.stats = LogSourceStats()
        self._parsers: dict[str, LogParser] = {}
        self._last_line: dict[str, float] = {}
        self._lock = threading.Lock()
        self.folder = fold if fold is not None else (Folder() if fold_lines else None)
        self.last_poll: float | None = None  # monotonic
        self._started = time.monotonic()
        self._reader: Any = None
        # Told after each poll's lines were fed (whether they published an event) and at the stop
        # (``final=True``): the kernel source's mark of how far it read (collectors/kernel_mark.py).
        self.on_fed = on_fed

    def run(self, stop: threading.Event) -> None:
        reader = self._reader = self.open_reader()
        try:
            while True:
                events = self.stats.events
                for stream, line in reader.poll():
                    self.feed(stream, line)
                now = time.monotonic()
                self.last_poll = now
                self.flush_idle(now)
                self._publish_folds(now)
                if self.on_fed is not None:
                    self.on_fed(self.stats.events > events)
                if getattr(reader, "more", False):
                    if stop.is_set():
                        break
                    continue  # behind the writer: read on at once
                if stop.wait(self.poll_s):
                    break
            # Last lines that arrived before the stop, the unterminated last lines the reader
            # holds (nothing will finish them now), then whatever the parsers still hold.
            drain = getattr(reader, "drain", None)
            for stream, line in [*reader.poll(), *(drain() if callable(drain) else ())]:
                self.feed(stream, line)
            self.flush_all()
            self._publish_folds(time.monotonic(), all_=True)
            if self.on_fed is not None:
                self.on_fed(True, final=True)
        finally:
            reader.close()

    def counters(self) -> dict[str, int]:
        """Lines read, events sent, lines skipped as garbled (by this source or by the parsers)."""
        parser_garbled = sum(getattr(getattr(p, "stats", None), "garbled", 0) for p in self._parsers.values())
        out = {"lines": self.stats.lines, "events": self.stats.events, "garbled": self.stats.garbled + parser_garbled}
        if self.folder is not None:
            out["folded"] = self.folder.stats.folded_lines
            out["folded_events"] = self.folder.stats.folded_events
        return out

    def health(self) -> dict[str, Any]:
        """For the heartbeat: counters, how long ago it last read, and where its reader stands."""
        out: dict[str, Any] = dict(self.counters())
        last = self.last_poll if self.last_poll is not None else self._started
        out["poll_age_s"] = round(time.monotonic() - last, 3)
        positions = getattr(self._reader, "positions", None)
        if callable(positions):
            try:
                out["positions"] = positions()
            except Exception:  # noqa: BLE001 - a position is a nicety; the beat goes on without it
                pass
        return out

    def _publish_folds(self, now: float, all_: bool = False) -> None:
        if self.folder is None:
            return
        for event in self.folder.due(now, all_=all_):
            self.publish(event)

    # --- the pure-ish part, driven directly by tests ------------------------------------------
    def feed(self, stream: str, line: str) -> None:
        parser = self._parsers.get(stream)
        if parser is None:
            parser = self._parsers[stream] = self.parser_factory()
        self.stats.lines += 1
        if self.folder is not None and self.folder.cached(line, time.time()):
            return  # a repeat of a line already folded: counted, not parsed
        self._last_line[stream] = time.monotonic()
        try:
            parsed = parser.feed(line)
        except Exception as exc:  # a parser bug on one line must not silence the source
            self._garbled(stream, exc)
            return
        self._emit(parsed, line)

    def flush_idle(self, now: float) -> None:
        for stream, last in list(self._last_line.items()):
            if now - last >= self.flush_idle_s:
                del self._last_line[stream]
                self._flush(stream)

    def flush_all(self) -> None:
        for stream in list(self._parsers):
            self._flush(stream)

    def _flush(self, stream: str) -> None:
        try:
            parsed = self._parsers[stream].flush()
        except Exception as exc:
            self._garbled(stream, exc)
            return
        self._emit(parsed)

    def _emit(self, parsed: list[Any], line: str | None = None) -> None:
        # A line that became exactly one event of its own (not a multi-line record) may be cached.
        single = line if line is not None and parsed and len(parsed) == 1 and \
            getattr(parsed[0], "data", {}).get("line") == line else None
        for p in parsed or ():
            now = time.time()
            stamp = getattr(p, "ts", None)
            try:
                try:
                    event = self.to_envelope(p, job=self.job, node=self.node, ts=stamp if stamp is not None else now,
                                             event_id=new_id())
                except InvalidEvent as exc:
                    if exc.field != "ts":
                        raise
                    # The line's own clock is implausible (a syslog line without a year): the
                    # time it was read is the best we have.
                    event = self.to_envelope(p, job=self.job, node=self.node, ts=now, event_id=new_id())
            except (InvalidEvent, TypeError, ValueError) as exc:
                self._garbled("event", exc)
                continue
            if self.folder is not None and not self.folder.admit(event, single, time.monotonic()):
                continue
            self.stats.events += 1
            self.publish(event)

    def _garbled(self, stream: str, exc: BaseException) -> None:
        self.stats.garbled += 1
        if self.stats.garbled <= 5 or self.stats.garbled % 1000 == 0:
            log.warning("%s: skipped a line of %s (%d so far): %s", self.name, stream, self.stats.garbled, exc)
