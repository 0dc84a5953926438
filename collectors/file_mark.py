"""How far the agent read each followed log file, kept across its restarts.

A follower opened at a file's end (collectors/file_follower.py) misses every line written while no
agent ran: the trainer's NCCL error or the kern.log Xid printed in the ten seconds systemd took to
restart an OOM-killed agent, exactly when the node fails. So each file source keeps a mark in the
spool directory, per file: its inode, the byte offset of the last complete line fed to the parser,
and the bytes just before that offset. A restarted agent that finds the same file (same inode, at
least that long, the same bytes before the offset) reads on from the offset; one whose file was
rotated while it was down reads the rest of the old file where it now lies (a sibling in the same
directory with the marked inode, ``kern.log.1``) and the new file from its start; one whose file was
truncated or replaced in place reads it from its start. A file the mark does not name (a new glob
match) is read as before. Lines after a mark are new to the pipeline whatever their age: the
kernel parser still decides by their own uptime stamp whether they act (parsing/kernel_quiet.py), so a
kern.log read on across a reboot records the new boot's lines and acts on none of them.

At most RESUME_MAX_BYTES of a file are read back: an agent down for a day on a chatty host starts
that far before the end (said in its log), since the stream's value is the present.

The mark is written (tmp + rename) after each poll whose lines published an event, at most every
MARK_EVERY_S otherwise, and once more when the source stops, like the kernel source's uptime mark
(collectors/kernel_mark.py), with the same consequence: a killed agent's successor may read again
what was fed after the last write, and the engine's dedup folds an event reported twice.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Mapping, Protocol, TypeVar

import msgspec

log = logging.getLogger(__name__)

MARK_EVERY_S = 2.0
RESUME_MAX_BYTES = 16 * 1024 * 1024


class Marked(Protocol):
    def marks(self) -> dict[str, "FilePosition"]: ...


M = TypeVar("M", bound=Marked)


class FilePosition(msgspec.Struct, frozen=True):
    inode: int
    pos: int  # the byte after the last complete line handed out
    before: str  # hex of up to 64 bytes before ``pos``: the same file, not one cut and regrown


class _Marks(msgspec.Struct, forbid_unknown_fields=False):
    files: dict[str, FilePosition]
    written: float  # wall clock of the write, for a person reading the file


def replace_file(path: Path, data: bytes) -> None:
    """``path`` holds ``data``, all or nothing (tmp + rename): a reader never sees half a mark. No
    fsync: a mark only has to survive the agent's process, not the machine."""
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_bytes(data)
    os.replace(tmp, path)


def mark_path(spool_dir: Path | str, source: str) -> Path:
    return Path(spool_dir) / f"file-mark-{source}.json"


def resume_offset(fd: int, position: FilePosition, size: int) -> int | None:
    """Where to read on in the open file ``fd`` of ``size`` bytes that has the marked inode: the
    marked offset if the file still holds the bytes read before it, else None (cut and regrown:
    read it from its start). Never further back than RESUME_MAX_BYTES before the end."""
    before = bytes.fromhex(position.before)
    if size < position.pos or position.pos < len(before):
        return None
    try:
        if os.pread(fd, len(before), position.pos - len(before)) != before:
            return None
    except OSError:
        return None
    return max(position.pos, size - RESUME_MAX_BYTES)


def rotated_sibling(path: str, inode: int) -> str | None:
    """The file in ``path``'s directory that has ``inode``: where logrotate moved it while no agent
    ran (``kern.log.1``, ``train.log-20261129``). A compressed copy is another inode: not found."""
    folder = os.path.dirname(path) or "."
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.path != path and entry.is_file(follow_symlinks=False) \
                        and entry.inode() == inode:
                    return entry.path
    except OSError:
        return None
    return None


class FileMarks:
    """One file source's marks: loaded at start (``resume``), kept as its follower reads."""

    def __init__(self, path: Path):
        self.path = path
        self.resume: dict[str, FilePosition] = self._load()
        self._follower: Marked | None = None  # the follower now reading
        self._last: dict[str, FilePosition] = dict(self.resume)
        self._written_at: float | None = None  # monotonic
        self._write_failed = False

    def follow(self, follower: M) -> M:
        """Registers the follower whose positions the marks keep; returns it. A follower opened
        again after a failure is given the latest marks as its ``resume``."""
        self._follower = follower
        return follower

    @property
    def following(self) -> bool:
        """A follower of this agent read before: one opened now is a reopening after a failure."""
        return self._follower is not None

    def latest(self) -> Mapping[str, FilePosition]:
        return dict(self._last)

    def _load(self) -> dict[str, FilePosition]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.warning("file mark %s unreadable (%s): its files are read from their end", self.path, exc)
            return {}
        try:
            marks = msgspec.json.decode(raw, type=_Marks)
        except msgspec.DecodeError as exc:
            log.warning("file mark %s is not a mark (%s): its files are read from their end", self.path, exc)
            return {}
        log.info("file mark: reading on %d file(s) from where the last agent stopped", len(marks.files))
        return dict(marks.files)

    def fed(self, published: bool, *, final: bool = False) -> None:
        """The lines handed out so far were fed (their events published): the marks may move."""
        follower = self._follower
        if follower is None:
            return
        now = time.monotonic()
        if not (final or published or self._written_at is None or now - self._written_at >= MARK_EVERY_S):
            return
        current = follower.marks()
        # A file no longer followed (rotated away, deleted) keeps no mark; one followed keeps its own.
        if current == self._last and self._written_at is not None:
            self._written_at = now
            return
        self._last = current
        self._write(now)

    def _write(self, now: float) -> None:
        try:
            replace_file(self.path, msgspec.json.encode(_Marks(self._last, time.time())))
        except OSError as exc:
            if not self._write_failed:
                log.warning("file mark %s cannot be written (%s): a restarted agent will not read what was "
                            "logged while it was down", self.path, exc)
                self._write_failed = True
        self._written_at = now
