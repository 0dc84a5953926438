"""EngineConfig.wall_rate (issue 47): the wall clock moves a quiet job's time that many event
seconds a wall second past the grace, so a test judges a minute of silence in a quarter of it; at
the default of 1, the wall clock's own pace. The verdicts are those of the same event time."""

from __future__ import annotations

import time

import pytest

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from tests.diagnosis.diag_events import T0, beat, nodes, topology


def _quiet_job(rate: float) -> tuple[Engine, float]:
    """An engine that read ten seconds of beats of a 4-node job, and the wall time of the last."""
    engine = Engine(EngineConfig(grace_s=5.0, wall_rate=rate))
    engine.process(topology(n=4, gpus=1, tp=1, pp=1))
    for t in range(10):
        for n in nodes(4):
            engine.process(beat(t, n))
    return engine, time.time()


@pytest.mark.parametrize("rate", [1.0, 4.0])
def test_a_quiet_jobs_time_moves_rate_times_the_wall_clock_past_the_grace(rate):
    engine, arrived = _quiet_job(rate)
    assert engine.job_time("job-t") == T0 + 9
    engine.tick(arrived + 4.0)  # within the grace: nothing moves
    assert engine.job_time("job-t") == T0 + 9
    engine.tick(arrived + 15.0)  # 10 wall seconds past the grace
    assert engine.job_time("job-t") == pytest.approx(T0 + 9 + 10.0 * rate, abs=0.5)


def test_the_same_silence_is_judged_sooner_in_wall_time_and_the_same_in_event_time():
    found = {}
    for rate in (1.0, 4.0):
        engine, arrived = _quiet_job(rate)
        wall = arrived
        while not found.get(rate):
            wall += 1.0
            lost = [d for d in engine.tick(wall) if d.fault == "telemetry_lost"]
            if lost:
                found[rate] = (wall - arrived, lost[0].ts)
            assert wall - arrived < 300, "no telemetry_lost within 300 s of wall time"
    (wall_1, ts_1), (wall_4, ts_4) = found[1.0], found[4.0]
    assert wall_4 < wall_1 / 2  # the 30 s silence: ~12.5 wall seconds at 4x, ~35 at 1x
    assert ts_4 == pytest.approx(ts_1, abs=4.0)  # judged at the same event time (a tick is 4 s there)
