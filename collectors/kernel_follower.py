"""Where the kernel's log comes from on this node: ``/dev/kmsg``, a log file, or ``dmesg --follow``.

Each reader has one method, ``poll() -> list[str]``, that never blocks long and returns the lines
that arrived since the last call; :class:`collectors.log_source.LogSource` hands them to the
kernel log parser. Lines keep their own time prefix (the kmsg ``pri,seq,usec,flags;`` header or
dmesg's ``[  12.345678]``), which the parser reads.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import shutil
import subprocess
from dataclasses import dataclass
from typing import Mapping

from faultlens.collectors.file_follower import FileFollower, cut_partial, line_pieces
from faultlens.collectors.file_mark import FilePosition

log = logging.getLogger(__name__)

KMSG_PATH = "/dev/kmsg"
# The kernel returns one record per read() and fails with EINVAL when the buffer is too small;
# records are at most about 8 KiB (PRINTK_MESSAGE_MAX).
_KMSG_READ = 16 * 1024


def kmsg_line(record: bytes) -> str | None:
    """The log line of one ``/dev/kmsg`` record: the header and first line, without the
    `` KEY=value`` continuation lines. ``None`` for a record that is not ``pri,seq,usec,flags;text``."""
    text = record.decode("utf-8", errors="replace")
    first, _, _ = text.partition("\n")
    header, sep, _message = first.partition(";")
    if not sep:
        return None
    fields = header.split(",")
    if len(fields) < 4 or not all(f.isdigit() for f in fields[:3]):
        return None
    return first


@dataclass
class KernelReaderStats:
    lines: int = 0
    garbled: int = 0  # records or lines that were not log lines
    overrun: int = 0  # times the kernel overwrote records before we read them (EPIPE)
    cut_lines: int = 0  # dmesg lines longer than MAX_LINE_BYTES, cut (as the file follower cuts them)


class KmsgReader:
    """``/dev/kmsg``: starts at the end of the ring buffer unless ``from_start``."""

    name = "kmsg"

    def __init__(self, path: str = KMSG_PATH, from_start: bool = False):
        self.path = path
        self.stats = KernelReaderStats()
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        if not from_start:
            os.lseek(self._fd, 0, os.SEEK_END)
        self.more = False

    def positions(self) -> dict[str, int]:
        return {self.path: self.stats.lines}

    def poll(self) -> list[str]:
        out: list[str] = []
        self.more = False
        while True:
            if len(out) >= 10_000:
                self.more = True  # a flood: the rest on the next poll, at once
                break
            try:
                record = os.read(self._fd, _KMSG_READ)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    # Records were overwritten before we read them; the next read goes on.
                    self.stats.overrun += 1
                    continue
                raise
            if not record:
                break
            line = kmsg_line(record)
            if line is None:
                self.stats.garbled += 1
                continue
            self.stats.lines += 1
            out.append(line)
        return out

    def close(self) -> None:
        os.close(self._fd)


class KernelFileReader:
    """A kernel log file (``/var/log/kern.log``, ``/var/log/messages``), followed across rotation."""

    name = "file"

    def __init__(self, path: str, from_start: bool = False, resume: Mapping[str, FilePosition] | None = None):
        self.path = path
        self.stats = KernelReaderStats()
        self._follower = FileFollower([path], from_start=from_start, resume=resume)

    def marks(self) -> dict[str, FilePosition]:
        return self._follower.marks()

    @property
    def more(self) -> bool:
        return self._follower.more

    def positions(self) -> dict[str, int]:
        return self._follower.positions()

    def poll(self) -> list[str]:
        lines = [line for _, line in self._follower.poll()]
        self.stats.lines += len(lines)
        return lines

    def drain(self) -> list[str]:
        lines = [line for _, line in self._follower.drain()]
        self.stats.lines += len(lines)
        return lines

    def close(self) -> None:
        self._follower.close()


class DmesgReader:
    """``dmesg --follow-new`` (or ``--follow`` with ``from_start``) as a child process."""

    name = "dmesg"

    def __init__(self, from_start: bool = False, binary: str | None = None):
        binary = binary or shutil.which("dmesg")
        if not binary:
            raise OSError("dmesg not found")
        self.stats = KernelReaderStats()
        # --decode keeps each record's level on the line ("kern  :err   : "): parsing.severity reads it.
        self._proc = subprocess.Popen([binary, "--decode", "--follow" if from_start else "--follow-new"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert self._proc.stdout is not None
        self._out = self._proc.stdout
        os.set_blocking(self._out.fileno(), False)
        self._partial = b""

    def poll(self) -> list[str]:
        ready, _, _ = select.select([self._out], [], [], 0)
        if not ready:
            if self._proc.poll() is not None:
                self._exited()
            return []
        chunk = self._out.read() or b""
        if not chunk and self._proc.poll() is not None:
            self._exited()
        lines = (self._partial + chunk).split(b"\n")
        cut, self._partial = cut_partial(lines.pop())
        # As the file follower reads a line: no \r, at most MAX_LINE_BYTES a piece (a runaway
        # line must not grow the agent's memory, nor reach the parser whole).
        pieces = [piece for raw in lines for piece in line_pieces(raw)] + cut
        self.stats.cut_lines += len(pieces) - len(lines)
        out = [piece.decode("utf-8", errors="replace") for piece in pieces]
        self.stats.lines += len(out)
        return out

    def _exited(self) -> None:
        err = self._proc.stderr.read().decode(errors="replace").strip() if self._proc.stderr else ""
        raise OSError(f"dmesg exited with status {self._proc.returncode}: {err or 'no message'}")

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def open_kernel_reader(kernel_log: str | None = None, from_start: bool = False,
                       kmsg_path: str = KMSG_PATH, resume: Mapping[str, FilePosition] | None = None):
    """The first reader that works: an explicit ``kernel_log`` file, else /dev/kmsg, else dmesg.

    An explicit file wins over /dev/kmsg because whoever passed it chose it (a container may see
    the host's kmsg but only its own kern.log, or the reverse). Raises OSError when none works.
    """
    if kernel_log:
        return KernelFileReader(kernel_log, from_start, resume)
    try:
        return KmsgReader(kmsg_path, from_start)
    except OSError as exc:
        log.info("%s not readable (%s); trying dmesg --follow", kmsg_path, exc)
    return DmesgReader(from_start)
