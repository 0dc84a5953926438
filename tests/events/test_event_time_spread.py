"""The event clock's spread of a job's offsets (q3 - q1), taken when judges() asks instead of at every
estimate (issue 56), must place every event where the clock that took it at every estimate placed
it: held against such a clock (the quartiles of the job's recent offsets, as statistics gives them,
recorded at each estimate) on seeded live runs whose spread crosses the bound it is judged by."""

from __future__ import annotations

import random
import statistics

import pytest

from faultlens.events.event_clock import EventClock

WALL = 1_800_000_000.0


class EagerSpread(EventClock):
    """The clock as it was: the spread taken from the offsets at every estimate of a job."""

    def __init__(self) -> None:
        super().__init__()
        self.eager: dict[str, float] = {}

    def observe(self, job: str, node: str, ts: float, record_ts: float | None, wall_now: float) -> None:
        new, dirty = (job, node) not in self._nodes, self._job_dirty.get(job, 0)
        super().observe(job, node, ts, record_ts, wall_now)
        if (new or dirty) and self._job_dirty.get(job) == 0:  # an estimate: its count starts again
            recent = list(self._job_recent[job])
            q = statistics.quantiles(recent, n=4) if len(recent) > 1 else [0, 0, 0]
            self.eager[job] = q[2] - q[0]

    def _spread(self, job: str) -> float:
        return self.eager.get(job, float("inf"))


def _run(seed: int, clock: EventClock) -> list:
    """Judgements, placements and the spread behind them in a live run: two jobs of 5 nodes, one clock 400 s off; the
    offsets' noise swells past the bound's quarter and falls back, so judges() turns both ways."""
    rng = random.Random(seed)
    out: list = []
    record_ts = WALL
    for second in range(400):
        noise = 120.0 if 120 <= second < 220 else 2.0
        batch = []
        for job in ("a", "b"):
            for n in range(5):
                record_ts += 0.1
                skew = -400.0 if (job, n) == ("a", 3) else 0.0
                ts = record_ts + skew + rng.uniform(-noise, noise) * (rng.random() < 0.3)
                batch.append((job, f"n{n}", ts, record_ts))
        for job, node, ts, rts in batch:  # a poll: all observed, then placed
            clock.observe(job, node, ts, rts, rts + 0.05)
        for job, node, ts, rts in batch:
            out.append((clock.judges(job), clock.moved(job, node, ts, rts, rts + 0.05), clock._spread(job)))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_spread_taken_when_asked_places_as_the_spread_taken_at_every_estimate(seed):
    lazy, eager = _run(seed, EventClock()), _run(seed, EagerSpread())
    assert lazy == eager
    judged = [j for j, _, _ in lazy]
    assert any(judged) and not all(judged[len(judged) // 2 :])  # the spread's test decided both ways
    assert any(at is not None and at.skew_s is not None and abs(at.skew_s) > 300 for _, at, _ in lazy)  # a clock moved
