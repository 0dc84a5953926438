"""The `stack`/`recorder_dump` event: a rank's torch Flight Recorder dump, bounded to fit the bus.

What a trainer sends (trainer_hooks.hook, from torch's own dump) and what the simulated cluster
sends (simulator.recorder, from its schedule of collectives) go through the same two functions,
so both carry the same fields under the same size bound (docs/events.md, source `stack`):

* :func:`bound`: the dump's JSON cut to ``max_bytes`` (256 KiB): the newest entries are what a
  hang verdict reads, so each entry's frames go first, then the oldest entries, ``truncated: true``;
* :func:`recorder_payload`: the event's ``data``.

Pure: no torch, no Kafka. The reading side is diagnosis.stacks.flight_recorder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

RECORDER_KIND = "recorder_dump"
MAX_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class BoundedDump:
    text: str  # the recorder's JSON, possibly cut to its newest entries
    entries: int  # entries kept
    truncated: bool  # frames or older entries were dropped to fit


def bound(text: str, max_bytes: int = MAX_BYTES) -> BoundedDump | None:
    """``text`` cut to ``max_bytes``: frames dropped first, then the oldest entries; None if unreadable."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    entries = obj.get("entries") if isinstance(obj, dict) else None
    if not isinstance(entries, list):
        return None
    if len(text.encode()) <= max_bytes:
        return BoundedDump(text, len(entries), False)
    for e in entries:
        if isinstance(e, dict):
            e.pop("frames", None)
    keep = len(entries)
    while True:
        obj["entries"] = entries[len(entries) - keep:]
        out = json.dumps(obj, separators=(",", ":"))
        if len(out.encode()) <= max_bytes or keep == 0:
            return BoundedDump(out, keep, True)
        # Shrink in proportion, not one entry at a time: a 20,000-entry dump fits in a few passes.
        keep = min(keep - 1, int(keep * max_bytes / len(out.encode())))


def recorder_payload(rank: int, pid: int, dump: BoundedDump, request_id: str | None) -> dict[str, Any]:
    """The ``data`` of a ``stack``/``recorder_dump`` event (events.payloads checks the same keys)."""
    return {"rank": rank, "pid": pid, "dump": dump.text, "entries": dump.entries, "truncated": dump.truncated,
            "request_id": request_id}


__all__ = ["RECORDER_KIND", "MAX_BYTES", "BoundedDump", "bound", "recorder_payload"]
