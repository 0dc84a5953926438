"""How far the agent read the kernel log in this boot, kept across its restarts.

An agent starts acting on kernel lines from its own start (parsing/kernel_quiet.py): the lines
before it are the machine's boot, or history an earlier agent already reported. But an agent that
was OOM-killed on a failing node, upgraded, or restarted by systemd ten seconds later would then
ignore the Xid 79 or the mlx5 link-down logged while it was down: exactly when the node fails.

So the agent keeps a mark in its spool directory: the boot id and the kernel uptime stamp of the
last kernel line it fed to its parser (the line's own clock: the kernel's printk clock and the
agent's CLOCK_MONOTONIC drift apart over days of NTP slewing). An agent that finds a mark of the
same boot reads the kernel ring from its start, drops the lines stamped at or before the mark (its
predecessor reported them) and acts on the lines after it, even those logged before its own
start. No mark, a mark of another boot, or a mark it cannot read: as before, from its start. The
same holds for the agent's own kernel source reopened after a failure (dmesg exited): it reads on
from its mark, not from the ring's end. A ``--kernel-log`` file is not read back from its start: it
holds earlier boots too, whose uptimes say nothing in this one; it is read on from the byte where
the last agent stopped (collectors/file_mark.py), and this mark's uptime decides which of those
lines act.

The mark is written (tmp + rename: a reader never sees half a mark) after each poll whose lines
published an event and at most every MARK_EVERY_S otherwise, and once more when the source stops.
A killed agent may therefore have fed, after its last mark, lines its successor reads again: the
harmless ones the parser skips again, and an event-bearing line only if the kill fell between its
publication and the mark's write. Such a line reported twice is folded by the engine's dedup (one
diagnosis, its count raised: tests/collectors/test_kernel_mark.py) while the agent was down for
less than its window (diagnosis/engine/dedup.py WINDOW_S).

No fsync: the mark only has to survive the agent's process, not the machine; a machine that
crashed boots with a new boot id, and the mark no longer applies.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any, Callable

import msgspec

from faultlens.collectors.file_mark import replace_file
from faultlens.parsing.timestamps import split_timestamp

log = logging.getLogger(__name__)

BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
MARK_FILE = "kernel-mark.json"
MARK_EVERY_S = 2.0


class Mark(msgspec.Struct, forbid_unknown_fields=False):
    boot_id: str
    uptime: float  # kernel uptime stamp (s) of the last line fed to the parser, or the agent's start
    written: float  # wall clock of the write, for a person reading the file


def read_boot_id(path: str = BOOT_ID_FILE) -> str | None:
    """This boot's id, or None where the kernel does not say (not Linux, no /proc)."""
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def line_uptime(line: str) -> float | None:
    """The kernel uptime stamp a kernel line carries (kmsg header, dmesg's ``[  12.345]``)."""
    return split_timestamp(line).mono


class KernelMark:
    """The mark of one agent's kernel source: loaded at start, kept as lines are fed."""

    def __init__(self, path: Path, *, boot_id: str | None, started_uptime: float):
        self.path = path
        self.boot_id = boot_id
        self.resume_from = self._load()  # the previous agent's mark in this boot, or None
        # Where this agent's reading starts: after the last line reported, else its own start.
        self.uptime = self.resume_from if self.resume_from is not None else started_uptime
        self._returned: float | None = None  # stamp of the last line the reader handed out
        self._written_at: float | None = None  # monotonic
        self._dirty = self.resume_from is None  # a fresh start writes its start as the first mark
        self._write_failed = False
        self._opened = False

    def live_from(self, floor: float) -> float:
        """The uptime from which a line may act: strictly after the mark (its own line was reported),
        never inside ``floor`` (the boot window)."""
        start = math.nextafter(self.resume_from, math.inf) if self.resume_from is not None else self.uptime
        return max(start, floor)

    # --- loading ---------------------------------------------------------------------------------
    def _load(self) -> float | None:
        if self.boot_id is None:
            return None  # no way to tell a restart from a new boot: act only on what follows our start
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("kernel mark %s unreadable (%s): kernel lines logged before this start are not acted on",
                        self.path, exc)
            return None
        try:
            mark = msgspec.json.decode(raw, type=Mark)
        except msgspec.DecodeError as exc:
            log.warning("kernel mark %s is not a mark (%s): kernel lines logged before this start are not acted on",
                        self.path, exc)
            return None
        if mark.boot_id != self.boot_id or not math.isfinite(mark.uptime) or mark.uptime < 0:
            return None  # another boot: its uptimes mean nothing in this one
        log.info("kernel mark: resuming this boot's kernel log after uptime %.6f s", mark.uptime)
        return mark.uptime

    # --- keeping ---------------------------------------------------------------------------------
    def open(self, open_reader: Callable[[bool], Any], *, from_start: bool, resumable: bool) -> "MarkedReader":
        """The kernel reader, through ``open_reader(from_start)``. Resuming (a mark of this boot, or
        this agent's own source reopened after a failure): the ring from its start, less the lines
        at or before the mark. ``resumable`` False (a log file holding earlier boots too, whose
        uptimes say nothing in this one): as configured."""
        resume = resumable and not from_start and (self.resume_from is not None or self._opened)
        self._opened = True
        self._returned = None  # what a failed reader handed out was not all fed
        return MarkedReader(open_reader(from_start or resume), self, self.uptime if resume else None)

    def returned(self, lines: list[str]) -> None:
        """The reader handed ``lines`` to the source (fed next)."""
        for line in reversed(lines):
            stamp = line_uptime(line)
            if stamp is not None:
                self._returned = stamp
                return

    def fed(self, published: bool, *, final: bool = False) -> None:
        """The lines handed out so far were fed and their events published: the mark may move."""
        if self._returned is not None and self._returned > self.uptime:
            self.uptime, self._dirty = self._returned, True
        if not self._dirty or self.boot_id is None:
            return
        now = time.monotonic()
        if final or published or self._written_at is None or now - self._written_at >= MARK_EVERY_S:
            self._write(now)

    def _write(self, now: float) -> None:
        try:
            replace_file(self.path, msgspec.json.encode(Mark(self.boot_id or "", self.uptime, time.time())))
        except OSError as exc:
            if not self._write_failed:
                log.warning("kernel mark %s cannot be written (%s): a restarted agent will not act on kernel "
                            "lines logged while it was down", self.path, exc)
                self._write_failed = True
        else:
            self._dirty = False
        self._written_at = now


class MarkedReader:
    """A kernel reader (``poll() -> list[str]``) that tells its mark what it handed out and, when
    resuming, drops the ring's lines stamped at or before the mark: the previous agent fed them."""

    def __init__(self, inner: Any, mark: KernelMark, skip_through: float | None):
        self.inner = inner
        self.mark = mark
        self._skip_through = skip_through
        self.skipped = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # stats, more, positions: the inner reader's

    def poll(self) -> list[str]:
        return self._pass(self.inner.poll())

    def drain(self) -> list[str]:
        drain = getattr(self.inner, "drain", None)
        return self._pass(drain()) if callable(drain) else []

    def close(self) -> None:
        self.inner.close()

    def _pass(self, lines: list[str]) -> list[str]:
        if self._skip_through is not None and lines:
            # The ring is in stamp order: skip up to the first line after the mark, then pass all.
            for i, line in enumerate(lines):
                stamp = line_uptime(line)
                if stamp is not None and stamp > self._skip_through:
                    self._skip_through = None
                    self.skipped += i
                    lines = lines[i:]
                    break
            else:
                self.skipped += len(lines)
                lines = []
        self.mark.returned(lines)
        return lines
