"""The step path's placing of a step in its node's open window by stored bounds (issue 56): every time
between a window's bounds is one ``floor(ts / window_s) * window_s`` puts there, and the bounds reach
the window's edges where rounding lets them, so nearly every step takes the two compares."""

from __future__ import annotations

import math
import random

import pytest

from faultlens.diagnosis.peers.features import FeatureWindows, _bounds
from faultlens.events.envelope import Envelope


def _start(ts: float, window_s: float) -> float:
    return math.floor(ts / window_s) * window_s


@pytest.mark.parametrize("window_s", [10.0, 0.1, 3.7, 1e-3, 60.0, 7.0 / 3.0])
def test_every_time_between_the_bounds_is_the_windows_and_the_bounds_reach_its_edges(window_s):
    seeded = random.Random(56)
    for _ in range(400):
        ts = seeded.choice([1_767_225_600.0, 1_700_000_000.0, 0.0, 12.5]) + seeded.uniform(0, 1e5)
        if seeded.random() < 0.5:  # a time at a window's edge, or an ulp beside it
            ts = _start(ts, window_s)
            ts = seeded.choice([ts, math.nextafter(ts, math.inf), math.nextafter(ts, -math.inf)])
        start = _start(ts, window_s)
        lo, hi = _bounds(start, window_s, ts)
        assert lo <= ts <= hi
        assert _start(lo, window_s) == start and _start(hi, window_s) == start
        for t in (seeded.uniform(lo, hi), math.nextafter(lo, math.inf), math.nextafter(hi, -math.inf)):
            if lo <= t <= hi:
                assert _start(t, window_s) == start
        # the edges: at most a few ulps short of where the window starts and ends
        assert lo <= start + 8 * math.ulp(start + window_s)
        assert hi >= start + window_s - 8 * math.ulp(start + window_s)


def _step(ts: float, node: str, rank: int, t: float | None) -> Envelope:
    data = {"rank": rank, "step": int(ts), "loss": 2.0, "step_time_s": t, "compute_s": None if t is None else t / 2}
    return Envelope(ts=ts, job="j", node=node, source="train", kind="step", data=data)


def test_windows_of_steps_at_and_beside_the_edges_are_those_the_floor_places():
    """Steps an ulp either side of each window's edges, stragglers of closed windows among them: each
    window holds the steps the floor formula puts in it, and a straggler none."""
    seeded = random.Random(57)
    fw = FeatureWindows(10.0)
    events, closed = [], []
    t0 = 1_767_225_600.0
    for w in range(30):
        edge = t0 + 10.0 * w
        for ts in (edge, math.nextafter(edge, -math.inf), math.nextafter(edge, math.inf), edge + seeded.uniform(0, 10),
                   math.nextafter(edge + 10.0, -math.inf)):
            events.append(_step(ts, f"n{seeded.randrange(3)}", seeded.randrange(8), seeded.choice([0.5, 1.0, None])))
    for e in events:
        closed += fw.observe(e)
    closed += fw.flush()
    want: dict[tuple[str, float], set[int]] = {}
    newest: dict[str, float] = {}
    for e in events:
        start = _start(e.ts, 10.0)
        if start < newest.get(e.node, -math.inf):
            continue  # a straggler of a closed window: not counted
        newest[e.node] = start
        want.setdefault((e.node, start), set()).add(e.data["rank"])
    assert {(w.node, w.start): set(w.ranks) for w in closed} == want
    assert all(len(w.evidence) <= 4 for w in closed)
