"""The event-time merge as it held records before runs (issue 56), for equivalence tests: one heap
of every held record, a pop per record let go, and each record's offset let go alone."""

from __future__ import annotations

import heapq

from faultlens.events.event_time import WatermarkMerge


def one_heap(merge: WatermarkMerge) -> WatermarkMerge:
    """``merge`` holding its records the old way (its marks, watermarks and releases unchanged)."""
    heap: list[tuple] = []

    def hold(partition, entries: list[tuple]) -> None:
        merge._held += len(entries)
        for entry in entries:
            heapq.heappush(heap, entry)

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
            state.released.add(offset)
            while state.offsets and state.offsets[0] in state.released:
                state.released.discard(heapq.heappop(state.offsets))
        merge._held -= len(gone)
        return gone

    merge._hold, merge._take = hold, take  # type: ignore[method-assign]
    return merge
