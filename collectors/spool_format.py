"""The spool's file format, and what of a record may be dropped.

A sequence of records, each ``>IIB`` header (payload length, CRC32 of the payload, state)
followed by the payload ``>HH`` (topic length, key length) + topic + key + value. The state byte
is rewritten in place (live → dropped / sent), so marks survive a restart without rewriting the
file. What reads and rewrites the file as a whole lives here too (the index of an existing file,
a compaction's copy); collectors/spool.py is the queue on top.
"""

from __future__ import annotations

import struct
import zlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable

HEADER = struct.Struct(">IIB")
FIELDS = struct.Struct(">HH")
LIVE, DROPPED, SENT = 0, 1, 2
# A record bigger than this is garbage in the file (a torn header), not a real event.
MAX_RECORD = 64 * 1024 * 1024

# Events the next interval replaces; everything else is (possible) evidence of a fault.
DROPPABLE_KINDS = frozenset({("gpu", "sample"), ("host", "sample"), ("heartbeat", "beat"), ("net", "sample")})


def is_droppable(source: str, kind: str) -> bool:
    return (source, kind) in DROPPABLE_KINDS or source == "heartbeat"


@dataclass(frozen=True, slots=True)
class SpooledRecord:
    topic: str
    key: bytes | None
    value: bytes


@dataclass
class Entry:
    offset: int
    size: int  # header + payload bytes in the file
    droppable: bool


@dataclass
class Scan:
    """What an existing file holds: its live records, their bytes, and where the readable part ends
    (before ``len(data)`` when a crash tore the last record)."""

    entries: deque[Entry]
    live_bytes: int
    end: int


def scan(data: bytes) -> Scan:
    """Index the live records of a file's bytes, stopping at the first torn or corrupt record."""
    entries: deque[Entry] = deque()
    live_bytes = 0
    pos = 0
    while pos + HEADER.size <= len(data):
        length, crc, state = HEADER.unpack_from(data, pos)
        end = pos + HEADER.size + length
        if length > MAX_RECORD or end > len(data):
            break
        payload = data[pos + HEADER.size:end]
        if zlib.crc32(payload) != crc:
            break
        if state == LIVE:
            rec = decode_payload(payload)
            entries.append(Entry(pos, end - pos, record_droppable(rec)))
            live_bytes += end - pos
        pos = end
    return Scan(entries, live_bytes, pos)


def copy_live(f: BinaryIO, entries: Iterable[Entry], out: BinaryIO) -> deque[Entry]:
    """Copy the live records of ``f`` to ``out`` (a compaction's new file, flushed); their entries there."""
    moved: deque[Entry] = deque()
    for entry in entries:
        f.seek(entry.offset)
        raw = f.read(entry.size)
        moved.append(Entry(out.tell(), entry.size, entry.droppable))
        out.write(raw)
    out.flush()
    return moved


def cut_at(f: BinaryIO, path: Path, offset: int) -> BinaryIO | None:
    """Cut a half-written record off the end of the file at ``offset``: closes ``f`` (dropping what
    its buffer still holds) and returns the file reopened, or None when it cannot be."""
    try:
        f.seek(offset)
        f.truncate(offset)
    except (OSError, ValueError):
        pass
    try:
        f.close()
    except OSError:
        pass
    try:
        reopened = open(path, "r+b")
        reopened.truncate(offset)
    except OSError:
        return None
    return reopened


def compact_in_place(f: BinaryIO, entries: Iterable[Entry]) -> deque[Entry]:
    """Move the live records to the front of the same file and cut the rest: no new disk block is
    needed (records only move to lower offsets). A crash half way leaves a record the CRC check
    cuts at the next open: only used when the disk has no room for a copy."""
    pos = 0
    moved: deque[Entry] = deque()
    for entry in entries:
        if entry.offset != pos:
            f.seek(entry.offset)
            raw = f.read(entry.size)
            f.seek(pos)
            f.write(raw)
        moved.append(Entry(pos, entry.size, entry.droppable))
        pos += entry.size
    f.flush()
    f.truncate(pos)
    return moved


def encode_payload(record: SpooledRecord) -> bytes:
    topic = record.topic.encode()
    key = record.key if record.key is not None else b""
    # A key of None and an empty key both travel as empty: producers here always key by node/job.
    return FIELDS.pack(len(topic), len(key)) + topic + key + record.value


def decode_payload(payload: bytes) -> SpooledRecord:
    tlen, klen = FIELDS.unpack_from(payload, 0)
    start = FIELDS.size
    topic = payload[start:start + tlen].decode()
    key = payload[start + tlen:start + tlen + klen]
    return SpooledRecord(topic, key or None, payload[start + tlen + klen:])


def record_droppable(record: SpooledRecord) -> bool:
    """Droppability of a record found in the file at open: read it back from the envelope."""
    from faultlens.events.envelope import InvalidEvent, decode

    try:
        event = decode(record.value)
    except InvalidEvent:
        return False
    return is_droppable(event.source, event.kind)
