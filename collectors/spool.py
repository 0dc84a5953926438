"""A bounded, file-backed FIFO of records waiting for the broker to come back.

While Kafka is unreachable the node agent appends every outgoing record here and sends them, in
order, when it returns. The file survives an agent restart. When the bound is hit the oldest
*droppable* records (periodic samples and heartbeats, which the next interval replaces) go first;
fault events are never dropped, so the bound is soft for them: a node that only logs faults may
grow the spool past the bound, and that is logged, because losing the evidence of a fault is
worse than a few extra megabytes of disk.

A spool that cannot write (a full disk, a read-only directory, an I/O error) keeps the agent
running: a full disk first gives back the room of the oldest samples in the file (rewritten in
place, which needs no free block); what still does not fit waits in a bounded memory tier
(collectors/spool_memory.py), oldest samples dropped first, fault records never. The state is in
:meth:`Spool.health` (the heartbeat's ``health.spool``) and said once in the log; the file is
tried again every ``RETRY_S``, and what waited in memory goes to it, in order, once it takes writes.

File format: collectors/spool_format.py. A compaction rewrites the file with the live records only
once enough of it is dead.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

from faultlens.collectors.spool_format import (
    DROPPED,
    HEADER,
    LIVE,
    SENT,
    Entry,
    SpooledRecord,
    compact_in_place,
    copy_live,
    cut_at,
    decode_payload,
    encode_payload,
    scan,
)
from faultlens.collectors.spool_memory import MemoryTier

log = logging.getLogger(__name__)

# How often a spool that could not write tries its file again.
RETRY_S = 30.0
# The memory tier's bound when the file cannot be written (at most the spool's own bound).
MEMORY_MAX_BYTES = 64 * 1024 * 1024


class SpoolBusy(RuntimeError):
    pass


@dataclass
class SpoolStats:
    appended: int = 0
    sent: int = 0
    dropped: int = 0
    over_bound: int = 0  # fault events written although the spool was over its bound
    compactions: int = 0
    recovered: int = 0  # live records found in the file at open
    torn_bytes: int = 0  # bytes of a half-written record cut off at open


class Spool:
    """``append`` at the tail, ``peek`` / ``ack`` at the head; thread-safe."""

    FILE_NAME = "spool.bin"

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int, *, retry_s: float = RETRY_S):
        if max_bytes <= 0:
            raise ValueError("spool bound must be positive")
        self.dir = Path(directory)
        self.path = self.dir / self.FILE_NAME
        self.max_bytes = max_bytes
        self.retry_s = retry_s
        self.stats = SpoolStats()
        self._lock = threading.Lock()
        self._entries: deque[Entry] = deque()
        self._live_bytes = 0
        self._drop_rounds = 0
        self._file: BinaryIO | None = None
        self._lockfile: IO[str] | None = None
        self.memory = MemoryTier(min(max_bytes, MEMORY_MAX_BYTES))
        self.error: str | None = None  # why the file cannot be written now (None: it can)
        self._next_try = 0.0
        self._open()

    def _open(self) -> None:
        """Open (or create) the file; a directory that cannot be written puts the spool in memory."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.path.touch(exist_ok=True)
            self._file = open(self.path, "r+b")
        except OSError as exc:
            self._file = None
            self._unwritable(exc, "cannot open the spool file")
            return
        if self._lockfile is None:
            try:
                self._lock_dir()
            except OSError as exc:  # a read-only directory takes no lock file: nobody else can write it either
                log.debug("spool %s: no lock file (%s)", self.dir, exc)
        # The file is the truth: index it afresh (a reopen after a failed write must not count
        # the records it already knew twice).
        self._entries, self._live_bytes = deque(), 0
        self._recover()
        if self.error is not None:
            log.warning("spool %s writable again", self.path)
        self.error = None

    # --- open ------------------------------------------------------------------------------
    def _lock_dir(self) -> None:
        """One agent per spool: two writing the same file would interleave and corrupt it."""
        self._lockfile = open(self.dir / "spool.lock", "w")
        try:
            fcntl.flock(self._lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lockfile.close()
            self._fh.close()
            self._lockfile = self._file = None
            raise SpoolBusy(f"spool {self.dir} is in use by another agent (give each agent its own --spool-dir)") from None

    def _recover(self) -> None:
        """Index the live records of an existing file; cut a torn tail (crash mid-write)."""
        self._fh.seek(0)
        data = self._fh.read()
        found = scan(data)
        self._entries, self._live_bytes = found.entries, found.live_bytes
        self.stats.recovered += len(found.entries)
        if found.end < len(data):
            self.stats.torn_bytes = len(data) - found.end
            log.warning("spool %s: cut %d bytes of a torn record at the end", self.path, len(data) - found.end)
            self._truncate(found.end)
        if self.stats.recovered:
            log.info("spool %s: %d record(s) from an earlier run wait to be sent", self.path, self.stats.recovered)
        if not self._entries:
            self._truncate(0)

    def _truncate(self, size: int) -> None:
        try:
            self._fh.truncate(size)
        except OSError as exc:
            log.debug("spool %s: could not truncate (%s)", self.path, exc)

    # --- tail --------------------------------------------------------------------------------
    def append(self, record: SpooledRecord, droppable: bool) -> bool:
        """Add a record; returns False when it was a droppable record refused by the bound."""
        payload = encode_payload(record)
        size = HEADER.size + len(payload)
        with self._lock:
            if self._file is None or len(self.memory):
                self._retry_file()
            if self._file is None or len(self.memory):
                # Behind what already waits in memory (order), or no file at all.
                return self._to_memory(record, droppable, size)
            if self._live_bytes + size > self.max_bytes:
                self._make_room(size)
                if self._live_bytes + size > self.max_bytes:
                    if droppable:
                        self.stats.dropped += 1
                        return False
                    self.stats.over_bound += 1
                    if self.stats.over_bound == 1 or self.stats.over_bound % 1000 == 0:
                        log.warning("spool over its bound of %d bytes with fault events only (%d kept over it)",
                                    self.max_bytes, self.stats.over_bound)
            if not self._write(payload, size, droppable):
                return self._to_memory(record, droppable, size)
            return True

    def _write(self, payload: bytes, size: int, droppable: bool) -> bool:
        """Append one record to the file; on a full disk give back the oldest samples' room and try
        once more. False: the file cannot take it (the spool now says why)."""
        for attempt in (1, 2):
            offset = self._fh.seek(0, os.SEEK_END)
            try:
                self._fh.write(HEADER.pack(len(payload), zlib.crc32(payload), LIVE) + payload)
                self._fh.flush()
            except OSError as exc:
                self._file = cut_at(self._fh, self.path, offset)  # a buffered writer may have put part of it on disk
                if attempt == 1 and exc.errno in (errno.ENOSPC, errno.EDQUOT) and self._free_disk(size):
                    continue
                self._unwritable(exc, "cannot write the spool file")
                return False
            self._entries.append(Entry(offset, size, droppable))
            self._live_bytes += size
            self.stats.appended += 1
            return True
        return False

    def _free_disk(self, size: int) -> bool:
        """Disk full: drop the oldest droppable records in the file and rewrite it in place (that
        needs no new block). True when something was freed."""
        if self._file is None:
            return False
        goal = max(size, self._live_bytes // 4)
        freed = 0
        kept: deque[Entry] = deque()
        for entry in self._entries:
            if entry.droppable and freed < goal:
                freed += entry.size
                self._live_bytes -= entry.size
                self.stats.dropped += 1
            else:
                kept.append(entry)
        if not freed:
            return False
        self._entries = kept
        try:
            self._compact_in_place()
        except OSError as exc:
            log.error("spool %s: could not rewrite the file in place (%s)", self.path, exc)
            return False
        log.warning("spool %s: disk full; dropped the oldest samples (%d bytes) to keep fault records", self.path, freed)
        return True

    def _to_memory(self, record: SpooledRecord, droppable: bool, size: int) -> bool:
        kept = self.memory.append(record, droppable, size)
        if self.memory.over_bound and self.memory.over_bound % 1000 == 1:
            log.warning("spool memory tier over its bound with fault records only (%d kept over it)",
                        self.memory.over_bound)
        return kept

    def _unwritable(self, exc: OSError, what: str) -> None:
        first = self.error is None
        self.error = f"{what}: {exc.strerror or exc}"
        self._next_try = time.monotonic() + self.retry_s
        if first:
            log.error("spool %s: %s (%s); records wait in memory (bound %d bytes, oldest samples dropped first, "
                      "faults kept) and the file is tried again every %.0fs", self.dir, what, exc,
                      self.memory.max_bytes, self.retry_s)

    def _retry_file(self) -> None:
        """Every RETRY_S: reopen the file if needed, and move what waits in memory into it, in order."""
        if time.monotonic() < self._next_try:
            return
        self._next_try = time.monotonic() + self.retry_s
        if self._file is None:
            try:
                self._open()
            except SpoolBusy as exc:  # another agent took the directory meanwhile: stay in memory
                self.error = str(exc)
                return
            if self._file is None:
                return
        while (first := self.memory.first()) is not None:
            record, droppable = first
            payload = encode_payload(record)
            if not self._write(payload, HEADER.size + len(payload), droppable):
                return
            self.memory.pop()
        if self.error is not None:
            log.warning("spool %s takes writes again", self.path)
        self.error = None

    def _make_room(self, size: int) -> None:
        """Drop the oldest droppable records until ``size`` fits with 10 % to spare, then compact."""
        target = max(0, int(self.max_bytes * 0.9) - size)
        kept: deque[Entry] = deque()
        dropped = 0
        for entry in self._entries:
            if entry.droppable and self._live_bytes > target:
                self._mark(entry, DROPPED)
                self._live_bytes -= entry.size
                dropped += 1
            else:
                kept.append(entry)
        if dropped:
            self._entries = kept
            self.stats.dropped += dropped
            self._drop_rounds += 1
            if self._drop_rounds == 1 or self._drop_rounds % 100 == 0:
                log.warning("spool full (%d bytes): dropping the oldest samples (%d so far)",
                            self.max_bytes, self.stats.dropped)
            self._compact()

    # --- head ----------------------------------------------------------------------------------
    def peek(self, n: int) -> list[SpooledRecord]:
        """The oldest ``n`` live records, in order (not removed until :meth:`ack`)."""
        with self._lock:
            out: list[SpooledRecord] = []
            for entry in self._entries:
                if len(out) >= n:
                    break
                self._fh.seek(entry.offset + HEADER.size)
                out.append(decode_payload(self._fh.read(entry.size - HEADER.size)))
            if len(out) < n:
                out.extend(self.memory.peek(n - len(out)))
            return out

    def ack(self, n: int) -> None:
        """The oldest ``n`` records were delivered: mark them sent, compact when the file is mostly sent."""
        with self._lock:
            from_file = min(n, len(self._entries))
            try:
                for _ in range(from_file):
                    entry = self._entries.popleft()
                    self._mark(entry, SENT)
                    self._live_bytes -= entry.size
                    self.stats.sent += 1
                if self._file is not None:
                    if not self._entries:
                        self._fh.truncate(0)
                    elif self._file_size() > 2 * self._live_bytes + 1024 * 1024:
                        self._compact()
                    self._fh.flush()
            except OSError as exc:
                # A sent mark that cannot be written: at worst the record is sent again after a
                # restart (consumers fold duplicates by id).
                self._unwritable(exc, "cannot mark records sent")
            taken = min(n - from_file, len(self.memory))
            self.memory.pop(taken)
            self.stats.sent += taken

    def __len__(self) -> int:
        # No lock: the heartbeat reads it, and must not wait behind a slow disk write.
        return len(self._entries) + len(self.memory)

    @property
    def live_bytes(self) -> int:
        return self._live_bytes + self.memory.bytes

    def health(self) -> dict[str, object]:
        """For the heartbeat (``health.spool``): depth, bytes, drops, and whether the file takes writes."""
        return {"depth": len(self._entries) + len(self.memory), "bytes": self.live_bytes,
                "dropped": self.stats.dropped + self.memory.dropped, "in_memory": len(self.memory),
                "over_bound": self.stats.over_bound + self.memory.over_bound,
                "writable": self.error is None, "error": self.error}

    def close(self) -> None:
        with self._lock:
            if len(self.memory):
                log.error("spool %s: %d record(s) held in memory are lost at exit (the file could not take them: %s)",
                          self.dir, len(self.memory), self.error)
            if self._file is not None:
                try:
                    self._fh.flush()
                    os.fsync(self._fh.fileno())
                except OSError as exc:
                    log.error("spool %s: could not flush at exit (%s)", self.path, exc)
                self._fh.close()
            if self._lockfile is not None:
                self._lockfile.close()

    # --- internals -----------------------------------------------------------------------------
    @property
    def _fh(self) -> BinaryIO:
        """The spool file, where the caller is on the file's side (append went to memory when it is closed)."""
        if self._file is None:
            raise RuntimeError(f"spool {self.path}: the file is not open")
        return self._file

    def _file_size(self) -> int:
        return self._fh.seek(0, os.SEEK_END)

    def _compact_in_place(self) -> None:
        self._entries = compact_in_place(self._fh, self._entries)
        self.stats.compactions += 1

    def _mark(self, entry: Entry, state: int) -> None:
        # The state byte is the last byte of the header.
        self._fh.seek(entry.offset + HEADER.size - 1)
        self._fh.write(bytes([state]))

    def _compact(self) -> None:
        """Rewrite the file with the live records only (atomic rename); on a full disk, in place."""
        tmp = self.path.with_suffix(".tmp")
        try:
            with open(tmp, "wb") as out:
                new_entries = copy_live(self._fh, self._entries, out)
                os.fsync(out.fileno())
        except OSError as exc:
            try:
                tmp.unlink()
            except OSError:
                pass
            log.warning("spool %s: no room for a compacted copy (%s); compacting in place", self.path, exc)
            self._compact_in_place()
            return
        self._fh.close()
        os.replace(tmp, self.path)
        self._file = open(self.path, "r+b")
        self._entries = new_entries
        self.stats.compactions += 1
