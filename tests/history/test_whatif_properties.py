"""What-if ETTR properties (hypothesis): no input change moves the projection the wrong way, and the
two engines agree on scenarios nobody calibrated. These are the definition of right; the presets'
closeness to the papers' figures is a separate, documented check (test_whatif.py)."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultlens.history.whatif.closed_form import project
from faultlens.history.whatif.model import FaultClass, Recovery, Scenario
from faultlens.history.whatif.monte_carlo import simulate

seconds = st.floats(min_value=0.0, max_value=7200.0, allow_nan=False)
share = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def scenarios(draw, max_gpus: int = 200_000) -> Scenario:
    """A job with a stopping class, a degraded (slow-machine) class and a planned one."""
    stop = FaultClass("gpu_lost", draw(st.floats(1e-4, 0.05)), detect_s=draw(seconds), localise_s=draw(seconds),
                      evict_share=draw(share), over_evict=draw(st.floats(0.0, 3.0)))
    slow = FaultClass("fail_slow", draw(st.floats(0.0, 0.01)), detect_s=draw(seconds), localise_s=draw(seconds),
                      evict_share=1.0, slowdown=draw(st.floats(0.0, 0.99)), loses_work=False)
    hang = FaultClass("job_hang", draw(st.floats(0.0, 0.01)), detect_s=draw(seconds), localise_s=draw(seconds),
                      evict_share=draw(share))
    planned = FaultClass("planned", draw(st.floats(0.0, 0.005)), detect_s=0.0, evict_share=0.0, loses_work=False,
                         planned=True)
    standby = draw(st.floats(1.0, 600.0))
    recovery = Recovery(standby_s=standby, requeue_s=standby + draw(st.floats(0.0, 1800.0)),
                        restart_s=draw(st.floats(1.0, 1200.0)), hot_update_s=draw(st.floats(1.0, 300.0)))
    return Scenario(gpus=draw(st.integers(8, max_gpus)), days=draw(st.floats(1.0, 60.0)),
                    faults=(stop, slow, hang, planned), checkpoint_stall_s=draw(st.floats(0.0, 60.0)),
                    checkpoint_interval_s=draw(st.floats(30.0, 7200.0)), recovery=recovery,
                    spares=draw(st.integers(0, 50)))


def _ettr(s: Scenario) -> float:
    return project(s).ettr


# A fixed interval isolates the model; the optimum is checked with the search's own tolerance.
EPS = 1e-12
# Derandomized unless FAULTLENS_HYPOTHESIS_EXPLORE is set: CI must not fail on a draw no run before
# it made (a person explores with the variable set, and pins what they find as a test below).
DERANDOMIZE = not os.environ.get("FAULTLENS_HYPOTHESIS_EXPLORE")
FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=DERANDOMIZE)


@FAST
@given(scenarios(), st.sampled_from(["gpu_lost", "fail_slow", "job_hang"]), st.sampled_from(["detect_s", "localise_s"]),
       st.floats(1.0, 100_000.0))
def test_slower_detection_or_localisation_never_raises_ettr(s, name, field, more):
    f = {x.name: x for x in s.faults}[name]
    slower = s.with_fault(name, **{field: getattr(f, field) + more})
    assert _ettr(slower) <= _ettr(s) + EPS
    # ... with each job at its own optimum interval too (the search is good to ~1e-9).
    assert project(replace(slower, checkpoint_interval_s=None)).ettr <= project(replace(s, checkpoint_interval_s=None)).ettr + 1e-7


@FAST
@given(scenarios(), st.sampled_from(["standby_s", "requeue_s", "restart_s", "hot_update_s"]), st.floats(1.0, 5000.0))
def test_slower_recovery_never_raises_ettr(s, field, more):
    r = s.recovery
    changed = {field: getattr(r, field) + more}
    if field == "standby_s":   # a warm standby is never slower than a requeue
        changed["requeue_s"] = max(r.requeue_s, r.standby_s + more)
    assert _ettr(replace(s, recovery=replace(r, **changed))) <= _ettr(s) + EPS


@FAST
@given(scenarios(), st.integers(1, 50))
def test_fewer_spares_never_raise_ettr(s, fewer):
    assert _ettr(replace(s, spares=max(0, s.spares - fewer))) <= _ettr(s) + EPS


@FAST
@given(scenarios(), st.sampled_from(["gpu_lost", "job_hang"]), st.floats(1.0001, 20.0))
def test_a_higher_rate_of_a_fault_that_loses_work_never_raises_ettr(s, name, k):
    f = {x.name: x for x in s.faults}[name]
    assert _ettr(s.with_fault(name, rate=f.rate * k + 1e-4)) <= _ettr(s) + EPS


@FAST
@given(scenarios(), st.floats(1.0001, 20.0))
def test_a_higher_rate_of_slow_machines_never_raises_ettr(s, k):
    # A slow machine evicted without saving first. One whose trainer saves first is a checkpoint as
    # well as a cost, and more of them can help a job whose restarts are cheap (docs/ettr.md, Limits).
    s = s.with_fault("fail_slow", loses_work=True)
    f = {x.name: x for x in s.faults}["fail_slow"]
    assert _ettr(s.with_fault("fail_slow", rate=f.rate * k + 1e-4)) <= _ettr(s) + EPS


@FAST
@given(scenarios(), st.floats(0.0, 0.99))
def test_a_slower_slow_machine_never_raises_ettr(s, slowdown):
    f = {x.name: x for x in s.faults}["fail_slow"]
    lo, hi = sorted((f.slowdown, slowdown))
    assert _ettr(s.with_fault("fail_slow", slowdown=hi)) <= _ettr(s.with_fault("fail_slow", slowdown=lo)) + EPS


@FAST
@given(scenarios())
def test_the_breakdown_adds_up(s):
    p = project(s)
    assert abs(p.lost() - (1 - p.ettr)) < 1e-9
    assert all(v >= -1e-12 for phases in p.breakdown.values() for v in phases.values())


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=DERANDOMIZE)
@given(scenarios(max_gpus=30_000))
def test_the_two_engines_agree(s):
    # The closed form is a steady state, the Monte Carlo a job: one that starts with no slow machine in
    # flight and keeps its last, unfinished stretch, which in a job of a dozen faults is points of
    # ETTR (docs/ettr.md, Limits). So the job is as long as ~1,000 faults take (at most a year), and
    # the engines agree within the interval and 0.3 points (the pool's Poisson approximation) or one
    # more interval. Before issue 59 this allowed 4 intervals at <= 10 days, and a 3.4-point error
    # in the model passed it.
    per_day = project(s).faults_expected / s.days
    s = replace(s, days=min(365.0, max(1.0, 1000 / per_day)) if per_day > 0 else 1.0)
    p = project(s)
    mc = simulate(s, runs=60, seed=11)
    lo, hi = mc.ci
    slack = max(0.003, hi - lo)
    assert lo - slack <= p.ettr <= hi + slack, (p.ettr, mc.ci)


def test_the_engines_agree_when_faults_outpace_checkpoints():
    # ~63 stopping faults a day on 3,750 nodes (one every ~23 min) against a 54-min checkpoint interval,
    # and a fail-slow class whose localisation takes 75 min. The closed form said 0.177 (Monte Carlo
    # 0.135-0.143): it weighed the work a slow machine's eviction saves by the mean speed, when that
    # stretch ran at the slow machine's; now 0.1353 (issue 59; the exact cases: test_whatif_speed.py).
    stop = FaultClass("gpu_lost", 0.01675178322348252, detect_s=0.0, localise_s=0.0, evict_share=0.0)
    slow = FaultClass("fail_slow", 0.0033557308155995075, detect_s=0.0, localise_s=4506.5408618889605,
                      evict_share=1.0, slowdown=0.9023030773700585, loses_work=False)
    hang = FaultClass("job_hang", 0.0, detect_s=0.0, evict_share=0.0)
    planned = FaultClass("planned", 0.0, detect_s=0.0, evict_share=0.0, loses_work=False, planned=True)
    s = Scenario(gpus=29998, days=10.0, faults=(stop, slow, hang, planned), checkpoint_interval_s=3265.0,
                 checkpoint_stall_s=0.0, recovery=Recovery(standby_s=1.0, requeue_s=1.0, restart_s=1.0,
                                                           hot_update_s=1.0), spares=0)
    p = project(s)
    lo, hi = simulate(s, runs=60, seed=11).ci
    # Held tighter than the property's 4 intervals (0.034 here, which the old 0.177 missed by 0.0002).
    assert lo - 0.003 <= p.ettr <= hi + 0.003, (p.ettr, (lo, hi))



def _explored(gpus, days, stop, slow, hang, planned, interval, stall, recovery, spares) -> Scenario:
    """stop: (rate, detect, localise, evict share, over-evicted); slow: (rate, detect, localise, slowdown),
    evicted after saving; hang: (rate, detect, localise, evict share); recovery: (standby, requeue,
    restart, hot update)."""
    r, d, lo, e, o = stop
    faults = [FaultClass("gpu_lost", r, detect_s=d, localise_s=lo, evict_share=e, over_evict=o),
              FaultClass("fail_slow", slow[0], detect_s=slow[1], localise_s=slow[2], slowdown=slow[3], loses_work=False),
              FaultClass("job_hang", hang[0], detect_s=hang[1], localise_s=hang[2], evict_share=hang[3])]
    if planned:
        faults.append(FaultClass("planned", planned, detect_s=0.0, evict_share=0.0, loses_work=False, planned=True))
    return Scenario(gpus=gpus, days=days, faults=tuple(faults), checkpoint_interval_s=interval, checkpoint_stall_s=stall,
                    recovery=Recovery(*recovery), spares=spares)


# Found with FAULTLENS_HYPOTHESIS_EXPLORE=1 (issue 59: 1,500 draws, each job ~1,000 faults long): the
# worst draw of each of the five families the pre-fix closed form missed (it weighed a slow machine's
# saved stretch by the mean speed), with that closed form's answer and the Monte Carlo's interval.
EXPLORED = {
    # pre-fix 0.0521, Monte Carlo 0.0161 [0.0151, 0.0172]: a slow machine every ~2.5 h found in 46 min
    "10450 GPUs": _explored(10450, 21.0, (0.05, 1.9, 0.3, 0.906, 0.377), (0.00746, 0.0, 2774.0, 0.852),
                            (0.00746, 2.0, 5879.0, 0.313), 0.0, 7199.0, 43.0, (83.2, 83.2, 241.0, 161.0), 34),
    # pre-fix 0.0757, Monte Carlo 0.0488 [0.0471, 0.0505]: slow machines at a tenth of full speed for ~2 h
    "30000 GPUs": _explored(30000, 52.0, (0.00507, 600.0, 1.0, 0.0, 0.0), (0.00318, 3770.0, 3293.0, 0.9),
                            (0.00286, 7153.0, 0.0, 0.415), 0.0, 6995.0, 14.8, (598.0, 925.0, 67.0, 69.0), 35),
    # pre-fix 0.2192, Monte Carlo 0.2051 [0.2024, 0.2079]: a slow machine at 3 % of full speed
    "5875 GPUs": _explored(5875, 116.0, (0.0191, 5729.0, 2013.0, 0.99, 1.9), (0.00795, 0.0, 1630.0, 0.97),
                           (0.0, 0.0, 0.0, 0.0), 0.0, 7199.0, 57.0, (42.0, 581.0, 416.0, 1.5), 16),
    # pre-fix 0.0284, Monte Carlo 0.0215 [0.0208, 0.0222]: a mild slowdown (40 %), many stops
    "18641 GPUs": _explored(18641, 27.0, (0.0492, 391.0, 0.0, 0.687, 0.417), (0.00558, 0.0, 1509.0, 0.399),
                            (0.00403, 0.0, 4099.0, 0.0), 0.00154, 7166.0, 16.3, (600.0, 2400.0, 56.0, 234.0), 12),
    # pre-fix 0.0751, Monte Carlo 0.0704 [0.0690, 0.0717]: slow machines found in ~3 h, planned restarts
    "18370 GPUs": _explored(18370, 59.0, (0.00793, 0.0, 4688.0, 0.808, 0.139), (0.00464, 7200.0, 3869.0, 0.457),
                            (0.00822, 3777.0, 1.0, 0.625), 0.00257, 6420.0, 1.5, (546.0, 546.0, 974.0, 2.54), 19),
}


@pytest.mark.parametrize("name", sorted(EXPLORED))
def test_the_engines_agree_where_exploring_found_them_apart(name):
    s = EXPLORED[name]
    p = project(s)
    lo, hi = simulate(s, runs=60, seed=11).ci
    assert lo - 0.003 <= p.ettr <= hi + 0.003, (p.ettr, (lo, hi))
