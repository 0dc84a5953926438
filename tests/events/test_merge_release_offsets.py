"""The merge's offsets let go (WatermarkMerge._release_offsets): its quick way, the lowest held offsets
popped at once when they are the ones let go (issue 56), must leave every partition holding what the
lazy deletion a record at a time leaves, bundles' shared offsets and records let go out of offset order
included: held against that deletion on seeded random cases."""

from __future__ import annotations

import heapq
import random

from faultlens.events.event_time import WatermarkMerge
from faultlens.events.partition_mark import PartitionState


def _one_at_a_time(state: PartitionState, offsets_let_go: list[int]) -> None:
    """The general way: each offset marked released, the heap popped while its lowest is released."""
    state.held -= len(offsets_let_go)
    for offset in offsets_let_go:
        state.released.add(offset)
        while state.offsets and state.offsets[0] in state.released:
            state.released.discard(heapq.heappop(state.offsets))


def _state(held: list[int], released: set[int]) -> PartitionState:
    state = PartitionState()
    state.offsets = list(held)
    heapq.heapify(state.offsets)
    state.released = set(released)
    state.held = len(held)
    return state


def test_offsets_let_go_leave_what_the_general_way_leaves() -> None:
    rng = random.Random(56)
    merge: WatermarkMerge[None] = WatermarkMerge()
    quick = 0
    for _ in range(5000):
        n = rng.randint(1, 8)
        shape = rng.random()
        if shape < 0.4:
            held = list(range(10, 10 + n))  # plain records: one offset each
        elif shape < 0.7:
            held = sorted(rng.randint(0, 9) for _ in range(n))  # bundles: shared offsets
        else:
            held = [rng.randint(0, 6) for _ in range(n)]
        order = list(held) if rng.random() < 0.5 else rng.sample(held, len(held))  # in offset order or not
        entries = [(0.0, i, "p", offset, None) for i, offset in enumerate(order)]
        released = set() if rng.random() < 0.8 else {rng.randint(0, 9)}
        count = rng.randint(0, n)
        ours, theirs = _state(held, released), _state(held, released)
        merge._parts = {"p": ours}
        merge._release_offsets("p", entries, count)
        _one_at_a_time(theirs, order[:count])
        assert sorted(ours.offsets) == sorted(theirs.offsets)
        assert ours.released == theirs.released and ours.held == theirs.held
        assert not ours.offsets or ours.offsets[0] == min(ours.offsets)  # still a heap's lowest first
        quick += not released and sorted(order[:count]) == sorted(held)[:count] and len(set(order[:count])) == count
    assert quick > 1000  # the quick way was taken, not only the general one
