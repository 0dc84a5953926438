"""Follow log files like ``tail -F``: globs, rotation (a new inode at the path), truncation, partial lines.

:meth:`FileFollower.poll` is one non-blocking step that returns the complete lines written since
the last step, so the rotation and truncation logic is tested without threads or sleeps; the
agent calls it in a loop.

- A file that exists when the follower starts is read from its end (``from_start`` reads it all),
  or from where an earlier agent's follower stopped when ``resume`` has its mark
  (collectors/file_mark.py); a file that appears later (a new glob match, or the new file after a
  rotation) is read from the start, since everything in it is new.
- Rotation: when the path names a different inode, the rest of the old file is read to its end
  first, then the new file from its start; the old one is read on until the new one has bytes
  (a writer appends to the old file until it reopens the path: rename, then a HUP).
- Truncation (size below the read position, ``copytruncate`` or ``> file``): read again from 0;
  also when the writer wrote past the read position before the next poll (the 64 bytes before it
  are no longer the bytes read there), which ``tail -F`` misses.
- A line without its newline yet is held until the newline comes (a block-buffered writer flushes
  mid-line and ends it minutes later); when a rotated file is done with, when the file vanishes
  or when the reader stops (:meth:`FileFollower.drain`) it is emitted as is, since nothing more
  will be appended to it. Across a truncation it is kept and joined to what the writer appends next.
"""

from __future__ import annotations

import glob
import logging
import os
from dataclasses import dataclass, field
from typing import BinaryIO, Iterable, Mapping

from faultlens.collectors.file_mark import FilePosition, resume_offset, rotated_sibling

log = logging.getLogger(__name__)

# A "line" longer than this without a newline is cut: a runaway writer (binary garbage, a
# progress bar without newlines) must not grow the agent's memory without bound.
MAX_LINE_BYTES = 64 * 1024
_READ_CHUNK = 1024 * 1024
# At most this much of one file per poll: a writer faster than the reader (a log flood) must not
# grow one poll's list of lines without bound. ``more`` says the poll stopped short.
MAX_BYTES_PER_POLL = 4 * 1024 * 1024
# How much of what was read last is compared to the file at each poll, to see a truncation that
# the writer hid by writing past our position: one pread of this many bytes a file a poll.
_MARK_BYTES = 64


def line_pieces(raw: bytes) -> list[bytes]:
    """One line as read (no newline) → what is emitted: its ``\\r`` (a CRLF writer) dropped, and
    cut into pieces of at most MAX_LINE_BYTES rather than dropping the tail: the tail may hold the
    error text. Shared with the ``dmesg`` reader (collectors/kernel_follower.py)."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return [raw[i:i + MAX_LINE_BYTES] for i in range(0, len(raw), MAX_LINE_BYTES)] or [raw]


def cut_partial(partial: bytes) -> tuple[list[bytes], bytes]:
    """An unterminated line held for its newline: the MAX_LINE_BYTES pieces to emit now (memory
    stays bounded under a runaway writer), and the rest to hold."""
    pieces = []
    while len(partial) > MAX_LINE_BYTES:
        pieces.append(partial[:MAX_LINE_BYTES])
        partial = partial[MAX_LINE_BYTES:]
    return pieces, partial


@dataclass
class _Tail:
    path: str
    file: BinaryIO
    inode: int
    pos: int = 0
    partial: bytes = b""
    last: bytes = b""  # the bytes just before ``pos``: still there, or the file was cut and regrew
    cut_head: bool = False  # read from mid-line: the first line read is a fragment, dropped


@dataclass
class FollowerStats:
    lines: int = 0
    rotations: int = 0
    truncations: int = 0
    cut_lines: int = 0  # lines longer than MAX_LINE_BYTES, cut
    undecodable: int = 0  # lines with bytes that are not UTF-8 (replaced, still emitted)
    errors: list[str] = field(default_factory=list)


def _gone(tail: _Tail) -> bool:
    """The file ``tail`` reads has no name left (deleted, not renamed)."""
    try:
        return os.fstat(tail.file.fileno()).st_nlink == 0
    except OSError:
        return True


class FileFollower:
    """Tails every file matching ``patterns``; ``poll()`` → ``[(path, line), ...]`` (no newline)."""

    def __init__(self, patterns: Iterable[str], *, from_start: bool = False,
                 resume: Mapping[str, FilePosition] | None = None):
        self.patterns = list(patterns)
        self._resume = dict(resume or {})
        self.stats = FollowerStats()
        self._tails: dict[str, _Tail] = {}
        # Rotated files still read: the writer appends to the old file until it reopens the path.
        self._rotated: dict[str, _Tail] = {}
        self._first_scan = True
        self._from_start = from_start
        self.more = False  # the last poll stopped short of a file's end (read on at once)

    def positions(self) -> dict[str, int]:
        """Byte offset read so far in each followed file."""
        return {path: tail.pos for path, tail in self._tails.items()}

    def paths(self) -> list[str]:
        return sorted(self._tails)

    def marks(self) -> dict[str, FilePosition]:
        """Where a restarted follower reads on in each file: after the last complete line handed
        out. While a rotated file is still read, its position, not the new file's (the successor
        finds it beside the path by its inode and reads its rest first)."""
        out = {}
        for path, tail in {**self._tails, **self._rotated}.items():
            pos = tail.pos - len(tail.partial)
            start = max(0, pos - _MARK_BYTES)
            try:
                before = os.pread(tail.file.fileno(), pos - start, start)
            except OSError:
                continue
            out[path] = FilePosition(tail.inode, pos, before.hex())
        return out

    def poll(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        self.more = False
        self._discover(out)  # opens, reads nothing: a rotated file's last lines come first
        for old in list(self._rotated.values()):
            self._read(old, out)
            if self._moved_on(old):
                self._retire(old, out)
        for tail in list(self._tails.values()):
            self._step(tail, out)
        self._first_scan = False
        return out

    def drain(self) -> list[tuple[str, str]]:
        """Every held unterminated last line, as is: the reader is stopping and nothing will finish
        them. A trainer killed mid-write (SIGKILL, the OOM killer) leaves its last block-buffered
        flush without a newline; those are often the words that say why it died."""
        out: list[tuple[str, str]] = []
        for tail in [*self._rotated.values(), *self._tails.values()]:
            self._emit_partial(tail, out)
        return out

    def close(self) -> None:
        for tail in [*self._rotated.values(), *self._tails.values()]:
            tail.file.close()
        self._tails.clear()
        self._rotated.clear()

    # --- internals ---------------------------------------------------------------------------------
    def _discover(self, out: list[tuple[str, str]]) -> None:
        for pattern in self.patterns:
            matches = glob.glob(pattern) if glob.has_magic(pattern) else [pattern]
            for path in matches:
                if path in self._tails or not os.path.isfile(path):
                    continue
                at_end = self._first_scan and not self._from_start
                if at_end and path in self._resume:
                    tail = self._open_resumed(path, self._resume.pop(path))
                else:
                    tail = self._open(path, at_end)
                    if tail is not None:
                        log.info("following %s from %s", path, "its end" if at_end else "the start")
                if tail is not None:
                    self._tails[path] = tail

    def _open_resumed(self, path: str, mark: FilePosition) -> _Tail | None:
        """``path`` as an earlier follower left it: read on from its mark; rotated since, the old
        file's rest first (where it lies now), then the new one from its start; cut, from its start."""
        tail = self._open(path, at_end=False)
        if tail is None:
            return None
        if tail.inode == mark.inode:
            self._seek(tail, mark, "its mark")
            return tail
        old_path = rotated_sibling(path, mark.inode)
        old = self._open(old_path, at_end=False) if old_path else None
        if old is not None:
            if self._seek(old, mark, f"its mark, rotated to {old_path}"):
                old.path = path  # read as the path's rotated file: retired once the new one has bytes
                self._rotated[path] = old
            else:
                old.file.close()  # another file that took the inode: not ours to read
        log.info("following %s from the start: rotated while no agent ran", path)
        return tail

    def _seek(self, tail: _Tail, mark: FilePosition, where: str) -> bool:
        """``tail`` (opened at 0) moved to ``mark``; False where the file no longer holds what was
        read before the mark (cut or replaced: it stays at 0)."""
        size = os.fstat(tail.file.fileno()).st_size
        pos = resume_offset(tail.file.fileno(), mark, size)
        if pos is None:
            log.info("%s does not hold what was read before its mark: cut or replaced while no agent ran", tail.path)
            return False
        if pos > mark.pos:
            log.warning("%s: %d bytes written while no agent ran, more than are read back; reading the last %d",
                        tail.path, size - mark.pos, size - pos)
            # Mid-line: what is read up to the next newline is the end of a line whose start is not read.
            tail.pos = pos
            tail.cut_head = self._before(tail)[-1:] != b"\n"
        tail.file.seek(pos)
        tail.pos = pos
        tail.last = self._before(tail)
        log.info("following %s from %s (byte %d)", tail.path, where, pos)
        return True

    def _open(self, path: str, at_end: bool) -> _Tail | None:
        try:
            f = open(path, "rb")
        except OSError as exc:
            self._error(f"{path}: {exc}")
            return None
        st = os.fstat(f.fileno())
        pos = st.st_size if at_end else 0
        f.seek(pos)
        tail = _Tail(path, f, st.st_ino, pos)
        tail.last = self._before(tail)
        return tail

    @staticmethod
    def _before(tail: _Tail) -> bytes:
        start = max(0, tail.pos - _MARK_BYTES)
        try:
            return os.pread(tail.file.fileno(), tail.pos - start, start)
        except OSError:
            return b""

    def _step(self, tail: _Tail, out: list[tuple[str, str]]) -> None:
        try:
            st = os.stat(tail.path)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            self._error(f"{tail.path}: {exc}")
            return
        # Whatever the path now names, the open handle still reaches the file we were reading.
        size = os.fstat(tail.file.fileno()).st_size
        # A file cut and written past where we were between two polls (copytruncate, then a fast
        # writer) is no smaller; the bytes before our position then differ from those we read.
        if size < tail.pos or (tail.last and self._before(tail) != tail.last):
            self.stats.truncations += 1
            log.info("%s was truncated; reading it again from the start", tail.path)
            tail.file.seek(0)
            tail.pos, tail.last = 0, b""
            # The held head of a line stays: under copytruncate the writer (block-buffered stdout
            # flushes mid-line) goes on with that line's tail at the new start, so joining them is
            # the line it wrote; dropping the head tore it (a real kern.log, cut mid-line: the
            # Xid line lost its date and host, tests/outside/test_outside_logs.py).
        self._read(tail, out)
        if st is None or st.st_ino != tail.inode:
            del self._tails[tail.path]
            if _gone(tail):
                # Removed: read to its end above; its unterminated last line is final now.
                self._emit_partial(tail, out)
                tail.file.close()
                return
            self.stats.rotations += 1
            log.info("%s was rotated; following the new file", tail.path)
            # Until the writer reopens the path (logrotate's postrotate HUP, a restarted trainer)
            # it appends to the old file: it is read on until the new one has something in it
            # (renamed, not yet re-created: until the path has a file with bytes).
            if (earlier := self._rotated.pop(tail.path, None)) is not None:
                self._retire(earlier, out)
            self._rotated[tail.path] = tail
            new = self._open(tail.path, at_end=False) if st is not None else None
            if new is not None:
                self._tails[tail.path] = new
                if self._moved_on(tail):
                    self._retire(tail, out)
                self._read(new, out)

    def _moved_on(self, old: _Tail) -> bool:
        """The writer of the rotated ``old`` writes elsewhere now: the file at its path has bytes,
        or ``old`` was deleted (an open deleted file must not hold its disk space)."""
        new = self._tails.get(old.path)
        try:
            return _gone(old) or (new is not None and os.fstat(new.file.fileno()).st_size > 0)
        except OSError:
            return True

    def _retire(self, old: _Tail, out: list[tuple[str, str]]) -> None:
        """A rotated file done with: its last bytes read, its unterminated last line final now."""
        self._read(old, out)
        self._emit_partial(old, out)
        old.file.close()
        if self._rotated.get(old.path) is old:
            del self._rotated[old.path]

    def _read(self, tail: _Tail, out: list[tuple[str, str]]) -> None:
        budget = MAX_BYTES_PER_POLL
        while True:
            if budget <= 0:
                self.more = True
                return
            chunk = tail.file.read(min(_READ_CHUNK, budget))
            budget -= len(chunk)
            if not chunk:
                return
            tail.pos += len(chunk)
            tail.last = (tail.last + chunk)[-_MARK_BYTES:]
            data = tail.partial + chunk
            lines = data.split(b"\n")
            tail.partial = lines.pop()
            if tail.cut_head and lines:
                del lines[0]
                tail.cut_head = False
            for raw in lines:
                self._emit(tail.path, raw, out)
            pieces, tail.partial = cut_partial(tail.partial)
            for piece in pieces:
                self.stats.cut_lines += 1
                self._emit(tail.path, piece, out)

    def _emit_partial(self, tail: _Tail, out: list[tuple[str, str]]) -> None:
        if tail.partial and not tail.cut_head:
            self._emit(tail.path, tail.partial, out)
            tail.partial = b""

    def _emit(self, path: str, raw: bytes, out: list[tuple[str, str]]) -> None:
        pieces = line_pieces(raw)
        self.stats.cut_lines += len(pieces) - 1
        for piece in pieces:
            try:
                text = piece.decode("utf-8")
            except UnicodeDecodeError:
                self.stats.undecodable += 1
                text = piece.decode("utf-8", errors="replace")
            self.stats.lines += 1
            out.append((path, text))

    def _error(self, message: str) -> None:
        # Kept short: a file we cannot read is reported in the source's status, not repeated forever.
        if message not in self.stats.errors:
            log.warning("file follower: %s", message)
            self.stats.errors = (self.stats.errors + [message])[-10:]
