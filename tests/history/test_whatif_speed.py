"""The work a restart keeps or loses while slow machines are being found (issue 59): small cases with
an answer by hand, held to both engines, and the closed form's integral held to quadrature."""

from __future__ import annotations

import math

import pytest

from faultlens.history.whatif.closed_form import _run_moments, project
from faultlens.history.whatif.model import DAY_S, FaultClass, Recovery, Scenario
from faultlens.history.whatif.monte_carlo import simulate
from faultlens.history.whatif.speed import mean_speed, slow_classes, unsaved_work

FREE = Recovery(standby_s=0.0, requeue_s=0.0, restart_s=0.0, hot_update_s=0.0)


def test_a_job_that_never_checkpoints_keeps_only_what_slow_evictions_save():
    # One machine: 72 stops a day (one per 1,200 s of running), 24 slow machines a day (one per 3,600 s),
    # each found in 1,800 s at a tenth of full speed; free restarts, no checkpoint ever completes. By
    # hand: restarts are Poisson at L = 96 a day; only an eviction keeps work (the trainer saves first),
    # a quarter of the restarts, and it keeps the stretch back to the last restart, U ~ Exp(L). Its last
    # 1,800 s ran at 0.1 (that machine was in); before that nothing was slow (a machine that came earlier
    # would have been evicted since, a restart). So ETTR = 1/4 x L x E[0.1 min(U, D) + (U - D)+]
    # = 1/4 x (1 - 0.9 (1 - e^(-L D))) = 1/4 x (0.1 + 0.9 e^-2) = 0.05545.
    # Weighing that stretch by the mean speed (before issue 59) said 1/4 x (1 - 0.9 (1 - e^-0.5)) = 0.161.
    stop = FaultClass("gpu_lost", 72.0, detect_s=0.0, evict_share=0.0)
    slow = FaultClass("fail_slow", 24.0, detect_s=0.0, localise_s=1800.0, slowdown=0.9, loses_work=False)
    s = Scenario(gpus=8, days=20.0, faults=(stop, slow), checkpoint_interval_s=20 * DAY_S, checkpoint_stall_s=0.0,
                 recovery=FREE, spares=0)
    by_hand = 0.25 * (0.1 + 0.9 * math.exp(-2.0))
    assert project(s).ettr == pytest.approx(by_hand, rel=1e-12)
    lo, hi = simulate(s, runs=100, seed=1).ci
    assert lo <= by_hand <= hi
    assert not lo <= 0.25 * (1 - 0.9 * -math.expm1(-0.5)) <= hi


def test_a_slow_machine_evicted_without_saving_loses_a_stretch_run_at_its_speed():
    # The same job where the eviction does not save (the slow machine kills the step): nothing is ever
    # kept, and both the stops and the evictions lose all they find. The work lost at an eviction is
    # by hand 0.1 min(U, D) + (U - D)+ over the mean 1 / L: 1/L x (1 - 0.9 (1 - e^(-L D))).
    stop = FaultClass("gpu_lost", 72.0, detect_s=0.0, evict_share=0.0)
    slow = FaultClass("fail_slow", 24.0, detect_s=0.0, localise_s=1800.0, slowdown=0.9, loses_work=True)
    s = Scenario(gpus=8, days=20.0, faults=(stop, slow), checkpoint_interval_s=20 * DAY_S, checkpoint_stall_s=0.0,
                 recovery=FREE, spares=0)
    lam = s.fault_rate_s()
    partial = _run_moments(lam, s.checkpoint_interval_s, 0.0)[2]
    assert unsaved_work(s, lam, s.checkpoint_interval_s, 0.0, partial, slow) == pytest.approx(
        (1 - 0.9 * -math.expm1(-2.0)) / lam, rel=1e-12)
    assert project(s).ettr == pytest.approx(0.0, abs=1e-12)


def test_the_stretch_integral_is_the_quadrature_of_its_definition():
    # Two slow levels, a stall, checkpoints that do complete: unsaved_work against a numerical integral
    # of E[speed y back | no restart since] x P(y back is unsaved compute), by its definition.
    quad = pytest.importorskip("scipy.integrate").quad
    faults = (FaultClass("gpu_lost", 0.02, detect_s=60.0),
              FaultClass("fail_slow", 0.004, detect_s=300.0, localise_s=2400.0, slowdown=0.6, loses_work=False),
              FaultClass("thermal", 0.006, detect_s=100.0, localise_s=500.0, slowdown=0.3, loses_work=True))
    s = Scenario(gpus=8000, days=10.0, faults=faults, checkpoint_interval_s=1500.0, checkpoint_stall_s=400.0)
    lam, tau, stall = s.fault_rate_s(), 1500.0, 400.0
    period = tau + stall
    slow = slow_classes(s, lam)

    def speed(y: float, at: str | None) -> float:
        # By the largest slowdown in flight: P(nothing at least this slow in flight), largest first;
        # ``at`` is in flight over its last D.
        out, above = 0.0, 1.0
        for level in (0.6, 0.3):
            inside = [(mu, d) for sd, mu, d in slow.values() if sd >= level]
            forced = at is not None and slow[at][0] >= level and y < slow[at][2]
            none = 0.0 if forced else math.exp(-sum(mu * max(0.0, d - y) for mu, d in inside))
            out += (1 - level) * (above - none)
            above = none
        return out + above

    def density(y: float) -> float:
        return (math.exp(-lam * y) - math.exp(-lam * min(y + tau, period))) / -math.expm1(-lam * period)

    partial = _run_moments(lam, tau, stall)[2]
    assert quad(density, 0, period, points=[stall])[0] == pytest.approx(partial, rel=1e-9)
    assert speed(0.0, None) == pytest.approx(mean_speed(s, lam), rel=1e-12)
    for f in (None, faults[1], faults[2]):
        name = f.name if f is not None else None
        want = quad(lambda y, name=name: speed(y, name) * density(y), 0, period, points=[stall, 600.0, 2700.0], limit=200)[0]
        assert unsaved_work(s, lam, tau, stall, partial, f) == pytest.approx(want, rel=1e-8)
