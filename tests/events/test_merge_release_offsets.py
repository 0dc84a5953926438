"""The merge's offsets let go (WatermarkMerge._release_offsets): a partition's offsets held are a sorted
list, a copy an offset a record (a bundle's events share its offset), and each record let go takes one copy
(issue 56: its prefix cut at once where they are the lowest held, nearly always). Held on seeded random
cases against a count of what is held, and against the heap with lazy deletion it replaced: the same
commit (the lowest held) wherever that heap was right, and the heap's stuck copy where it was not."""

from __future__ import annotations

import heapq
import random
from collections import Counter

from faultlens.events.event_time import WatermarkMerge
from faultlens.events.partition_mark import PartitionState


def _heap_lowest(held: list[int], let_go: list[int]) -> int | None:
    """The old way: a heap of the offsets held, each let go marked in a set, popped while its lowest is marked."""
    heap, released = list(held), set()
    heapq.heapify(heap)
    for offset in let_go:
        released.add(offset)
        while heap and heap[0] in released:
            released.discard(heapq.heappop(heap))
    return heap[0] if heap else None


def test_offsets_let_go_leave_one_copy_less_each_and_the_heaps_commit_where_it_was_right() -> None:
    rng = random.Random(56)
    merge: WatermarkMerge[None] = WatermarkMerge()
    quick = differs = 0
    for _ in range(5000):
        n = rng.randint(1, 8)
        shape = rng.random()
        if shape < 0.4:
            held = list(range(10, 10 + n))  # plain records: one offset each
        elif shape < 0.7:
            held = sorted(rng.randint(0, 9) for _ in range(n))  # bundles: shared offsets
        else:
            held = [rng.randint(0, 6) for _ in range(n)]
        order = list(held) if rng.random() < 0.5 else rng.sample(held, len(held))  # let go in offset order or not
        entries = [(0.0, i, "p", offset, None) for i, offset in enumerate(order)]
        count = rng.randint(0, n)
        state = PartitionState(held=n, offsets=sorted(held))
        merge._parts = {"p": state}
        merge._release_offsets("p", entries, count)
        left = Counter(held) - Counter(order[:count])
        assert state.offsets == sorted(left.elements()) and state.held == n - count
        lowest = state.offsets[0] if state.offsets else None
        heap = _heap_lowest(held, order[:count])
        if heap != lowest:  # the heap's set counted a bundle's copies once: one stayed, below all held
            differs += 1
            assert heap is not None and heap not in left and (lowest is None or heap < lowest)
            assert Counter(order[:count])[heap] > 1
        quick += sorted(order[:count]) == sorted(held)[:count]
    assert quick > 1000 and differs > 0


def test_a_bundle_let_go_before_a_lower_offset_leaves_no_copy_held() -> None:
    """Offset 3 a record at t=30, offset 5 a bundle of two events at t=10 and 20: the bundle goes first."""
    merge: WatermarkMerge[str] = WatermarkMerge(max_idle_s=100)
    merge.assign(["p"], 0.0)
    merge.add_run("p", [3, 5, 5], [30.0, 10.0, 20.0], ["r3", "b5a", "b5b"], 0.0)
    merge.add_run("q", [0], [20.0], ["q0"], 0.0)
    assert merge.release(1.0, {"p": True, "q": True}) == ["b5a", "b5b", "q0"]
    assert merge.lowest_held_offset("p") == 3
    merge.add_run("q", [1], [40.0], ["q1"], 2.0)
    merge.add_run("p", [6], [45.0], ["r6"], 2.0)
    assert merge.release(3.0, {"p": True, "q": True}) == ["r3", "q1"]
    assert merge.lowest_held_offset("p") == 6  # the heap stopped at 5 for good: none of it held
    assert _heap_lowest([3, 5, 5, 6], [5, 5, 3]) == 5


def test_offsets_arriving_out_of_order_are_held_in_order() -> None:
    """A replay or a rebalance hands a partition offsets below those held, and a poll's may be out of order."""
    merge: WatermarkMerge[int] = WatermarkMerge()
    merge.assign(["p"], 0.0)
    merge.add_run("p", [10, 11, 12], [1.0, 2.0, 3.0], [10, 11, 12], 0.0)
    merge.add_run("p", [4, 2, 11], [1.5, 0.5, 2.5], [4, 2, 11], 0.0)
    merge.add("p", 7, 0.7, 7, 0.0)
    assert merge._parts["p"].offsets == [2, 4, 7, 10, 11, 11, 12]
    assert merge.lowest_held_offset("p") == 2
    assert merge.drain() == [2, 7, 10, 4, 11, 11, 12]
    assert merge.lowest_held_offset("p") is None
