"""A bounded, file-backed FIFO of records waiting for the broker to come back.

While Kafka is unreachable the node agent appends every outgoing record here and sends them, in
order, when it returns. The file survives an agent restart. When the bound is hit the oldest
*droppable* records (periodic samples and heartbeats, which the next interval replaces) go first;
fault events are never dropped, so the bound is soft for them: a node that only logs faults may
grow the spool past the bound, and that is logged, because losing the evidence of a fault is
worse than a few extra megabytes of disk.

File format: a sequence of records, each ``>IIB`` header (payload length, CRC32 of the payload,
state) followed by the payload ``>HH`` (topic length, key length) + topic + key + value. The state
byte is rewritten in place (live → dropped / sent), so marks survive a restart without rewriting
the file; a compaction rewrites the file with the live records only once enough of it is dead.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
import zlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">IIB")
_FIELDS = struct.Struct(">HH")
_LIVE, _DROPPED, _SENT = 0, 1, 2
# A record bigger than this is garbage in the file (a torn header), not a real event.
_MAX_RECORD = 64 * 1024 * 1024

# Events the next interval replaces; everything else is (possible) evidence of a fault.
DROPPABLE_KINDS = frozenset({("gpu", "sample"), ("host", "sample"), ("heartbeat", "beat"), ("net", "sample")})


def is_droppable(source: str, kind: str) -> bool:
    return (source, kind) in DROPPABLE_KINDS or source == "heartbeat"


class SpoolBusy(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class SpooledRecord:
    topic: str
    key: bytes | None
    value: bytes


@dataclass
class _Entry:
    offset: int
    size: int  # header + payload bytes in the file
    droppable: bool


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

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int):
        if max_bytes <= 0:
            raise ValueError("spool bound must be positive")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / self.FILE_NAME
        self.max_bytes = max_bytes
        self.stats = SpoolStats()
        self._lock = threading.Lock()
        self._entries: deque[_Entry] = deque()
        self._live_bytes = 0
        self._drop_rounds = 0
        self.path.touch(exist_ok=True)
        self._file = open(self.path, "r+b")
        self._lock_dir()
        self._recover()

    # --- open ------------------------------------------------------------------------------
    def _lock_dir(self) -> None:
        """One agent per spool: two writing the same file would interleave and corrupt it."""
        self._lockfile = open(self.dir / "spool.lock", "w")
        try:
            fcntl.flock(self._lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lockfile.close()
            self._file.close()
            raise SpoolBusy(f"spool {self.dir} is in use by another agent (give each agent its own --spool-dir)") from None

    def _recover(self) -> None:
        """Index the live records of an existing file; cut a torn tail (crash mid-write)."""
        self._file.seek(0)
        data = self._file.read()
        pos = 0
        while pos + _HEADER.size <= len(data):
            length, crc, state = _HEADER.unpack_from(data, pos)
            end = pos + _HEADER.size + length
            if length > _MAX_RECORD or end > len(data):
                break
            payload = data[pos + _HEADER.size:end]
            if zlib.crc32(payload) != crc:
                break
            if state == _LIVE:
                rec = _decode_payload(payload)
                self._entries.append(_Entry(pos, end - pos, _record_droppable(rec)))
                self._live_bytes += end - pos
                self.stats.recovered += 1
            pos = end
        if pos < len(data):
            self.stats.torn_bytes = len(data) - pos
            log.warning("spool %s: cut %d bytes of a torn record at the end", self.path, len(data) - pos)
            self._file.truncate(pos)
        if self.stats.recovered:
            log.info("spool %s: %d record(s) from an earlier run wait to be sent", self.path, self.stats.recovered)
        if not self._entries:
            self._file.truncate(0)

    # --- tail --------------------------------------------------------------------------------
    def append(self, record: SpooledRecord, droppable: bool) -> bool:
        """Add a record; returns False when it was a droppable record refused by the bound."""
        payload = _encode_payload(record)
        size = _HEADER.size + len(payload)
        with self._lock:
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
            offset = self._file.seek(0, os.SEEK_END)
            self._file.write(_HEADER.pack(len(payload), zlib.crc32(payload), _LIVE) + payload)
            self._file.flush()
            self._entries.append(_Entry(offset, size, droppable))
            self._live_bytes += size
            self.stats.appended += 1
            return True

    def _make_room(self, size: int) -> None:
        """Drop the oldest droppable records until ``size`` fits with 10 % to spare, then compact."""
        target = max(0, int(self.max_bytes * 0.9) - size)
        kept: deque[_Entry] = deque()
        dropped = 0
        for entry in self._entries:
            if entry.droppable and self._live_bytes > target:
                self._mark(entry, _DROPPED)
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
            out = []
            for entry in self._entries:
                if len(out) >= n:
                    break
                self._file.seek(entry.offset + _HEADER.size)
                out.append(_decode_payload(self._file.read(entry.size - _HEADER.size)))
            return out

    def ack(self, n: int) -> None:
        """The oldest ``n`` records were delivered: mark them sent, compact when the file is mostly sent."""
        with self._lock:
            for _ in range(min(n, len(self._entries))):
                entry = self._entries.popleft()
                self._mark(entry, _SENT)
                self._live_bytes -= entry.size
                self.stats.sent += 1
            if not self._entries:
                self._file.truncate(0)
            elif self._file_size() > 2 * self._live_bytes + 1024 * 1024:
                self._compact()
            self._file.flush()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def live_bytes(self) -> int:
        return self._live_bytes

    def close(self) -> None:
        with self._lock:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._lockfile.close()

    # --- internals -----------------------------------------------------------------------------
    def _file_size(self) -> int:
        return self._file.seek(0, os.SEEK_END)

    def _mark(self, entry: _Entry, state: int) -> None:
        # The state byte is the last byte of the header.
        self._file.seek(entry.offset + _HEADER.size - 1)
        self._file.write(bytes([state]))

    def _compact(self) -> None:
        """Rewrite the file with the live records only (atomic rename)."""
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as out:
            new_entries: deque[_Entry] = deque()
            for entry in self._entries:
                self._file.seek(entry.offset)
                raw = self._file.read(entry.size)
                new_entries.append(_Entry(out.tell(), entry.size, entry.droppable))
                out.write(raw)
            out.flush()
            os.fsync(out.fileno())
        self._file.close()
        os.replace(tmp, self.path)
        self._file = open(self.path, "r+b")
        self._entries = new_entries
        self.stats.compactions += 1


def _encode_payload(record: SpooledRecord) -> bytes:
    topic = record.topic.encode()
    key = record.key if record.key is not None else b""
    # A key of None and an empty key both travel as empty: producers here always key by node/job.
    return _FIELDS.pack(len(topic), len(key)) + topic + key + record.value


def _decode_payload(payload: bytes) -> SpooledRecord:
    tlen, klen = _FIELDS.unpack_from(payload, 0)
    start = _FIELDS.size
    topic = payload[start:start + tlen].decode()
    key = payload[start + tlen:start + tlen + klen]
    return SpooledRecord(topic, key or None, payload[start + tlen + klen:])


def _record_droppable(record: SpooledRecord) -> bool:
    """Droppability of a record found in the file at open: read it back from the envelope."""
    from streams.events import InvalidEvent, decode

    try:
        event = decode(record.value)
    except InvalidEvent:
        return False
    return is_droppable(event.source, event.kind)
