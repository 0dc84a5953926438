"""The event-time merge as it held records before runs (issue 56), for equivalence tests: one heap
of every held record, a pop per record let go, and each record's offset let go alone from a heap of
the partition's offsets with lazy deletion (the merge's offsets before they were a sorted list)."""

from __future__ import annotations

import heapq

from faultlens.events.event_time import WatermarkMerge


def one_heap(merge: WatermarkMerge) -> WatermarkMerge:
    """``merge`` holding its records and offsets the old way (its marks, watermarks and releases unchanged)."""
    heap: list[tuple] = []
    offsets: dict = {}  # partition -> its offsets held, a min-heap with lazy deletion
    released: dict = {}  # partition -> offsets released while a lower one is still held
    revoke = merge.revoke

    def hold(partition, entries: list[tuple]) -> None:
        merge._held += len(entries)
        held = offsets.setdefault(partition, [])
        for entry in entries:
            heapq.heappush(heap, entry)
            heapq.heappush(held, entry[3])

    def take(limit: float) -> list[tuple]:
        gone = []
        while heap and (heap[0][0] <= limit or len(heap) > merge.max_held):
            merge.forced += heap[0][0] > limit
            gone.append(heapq.heappop(heap))
        for _, _, partition, offset, _ in gone:
            state = merge._parts.get(partition)
            if state is None:
                continue
            state.held -= 1
            held, let_go = offsets.setdefault(partition, []), released.setdefault(partition, set())
            let_go.add(offset)
            while held and held[0] in let_go:
                let_go.discard(heapq.heappop(held))
        merge._held -= len(gone)
        return gone

    def lowest_held_offset(partition) -> int | None:
        held = offsets.get(partition)
        return held[0] if partition in merge._parts and held else None

    def revoke_them(partitions) -> int:
        partitions = list(partitions)
        for p in partitions:  # (records held in the one heap stay there, as they did)
            offsets.pop(p, None)
            released.pop(p, None)
        return revoke(partitions)

    merge._hold, merge._take = hold, take  # type: ignore[method-assign]
    merge.lowest_held_offset, merge.revoke = lowest_held_offset, revoke_them  # type: ignore[method-assign]
    return merge
