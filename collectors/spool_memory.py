"""The spool's last resort: records held in memory while its disk cannot take them.

A full disk or a read-only spool directory must not stop the agent nor lose a fault line. While
the file cannot be written, :class:`collectors.spool.Spool` keeps new records here, in order,
behind whatever the file still holds. The tier is bounded like the file: past ``max_bytes`` the
oldest droppable records (samples, beats) go first; fault records stay even over the bound (the
same soft bound as the file's: losing the evidence of a fault is worse than memory), and a record
refused is counted, never silently lost.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from faultlens.collectors.spool_format import SpooledRecord


@dataclass(slots=True)
class _Held:
    record: SpooledRecord
    droppable: bool
    size: int


class MemoryTier:
    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._held: deque[_Held] = deque()
        self.bytes = 0
        self.dropped = 0  # droppable records dropped to make room (oldest first) or refused
        self.over_bound = 0  # fault records kept although the tier was over its bound

    def __len__(self) -> int:
        return len(self._held)

    def append(self, record: SpooledRecord, droppable: bool, size: int) -> bool:
        """False when ``record`` is droppable and there is no room even after dropping older samples."""
        if self.bytes + size > self.max_bytes:
            self._make_room(size)
            if self.bytes + size > self.max_bytes:
                if droppable:
                    self.dropped += 1
                    return False
                self.over_bound += 1
        self._held.append(_Held(record, droppable, size))
        self.bytes += size
        return True

    def _make_room(self, size: int) -> None:
        target = max(0, int(self.max_bytes * 0.9) - size)
        kept: deque[_Held] = deque()
        for held in self._held:
            if held.droppable and self.bytes > target:
                self.bytes -= held.size
                self.dropped += 1
            else:
                kept.append(held)
        self._held = kept

    def peek(self, n: int) -> list[SpooledRecord]:
        out: list[SpooledRecord] = []
        for held in self._held:
            if len(out) >= n:
                break
            out.append(held.record)
        return out

    def first(self) -> tuple[SpooledRecord, bool] | None:
        return (self._held[0].record, self._held[0].droppable) if self._held else None

    def pop(self, n: int = 1) -> None:
        for _ in range(min(n, len(self._held))):
            self.bytes -= self._held.popleft().size
