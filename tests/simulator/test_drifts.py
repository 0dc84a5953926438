"""Slow drifts in the simulator (simulator.drifts): labelled, gradual, and without any rule's cue."""

from __future__ import annotations

import statistics

import pytest

from faultlens.events.command import Command
from faultlens.simulator import FaultPlan, SimConfig, simulate
from faultlens.simulator.drifts import Drift

CFG = SimConfig(nodes=8, gpus=4, seed=11, sample_interval_s=10.0, noise=False, job="job-drift")


def _run(*drifts, duration=1500.0):
    run = simulate(CFG, FaultPlan(), duration=duration, drifts=drifts)
    return run, list(run.events())


def _gpu_series(events, node, gpu, key):
    return [(e.ts - CFG.start_ts, e.data["gpus"][gpu][key]) for e in events
            if e.source == "gpu" and e.kind == "sample" and e.node == node]


def _compute(events, ranks):
    return [(e.ts - CFG.start_ts, e.data["compute_s"]) for e in events if e.kind == "step" and e.data["rank"] in ranks]


def _mean(series, t0, t1):
    return statistics.mean(v for t, v in series if t0 <= t < t1)


def test_a_gpu_sag_is_labelled_fail_slow_and_sags_clocks_and_power_together_without_a_throttle_flag():
    run, events = _run(Drift("gpu_sag", t=300, node="n002", gpu=1, ramp_s=600))
    [label] = run.labels
    assert (label["fault"], label["drift"], label["nodes"], label["ranks"]) == ("fail_slow", "gpu_sag", ["n002"], [9])
    assert label["onset"] == CFG.start_ts + 300
    clock, power = _gpu_series(events, "n002", 1, "sm_clock_mhz"), _gpu_series(events, "n002", 1, "power_w")
    peer_clock = _gpu_series(events, "n003", 1, "sm_clock_mhz")
    # Before: like its peers. At full depth (after the 600 s ramp): about 10 % down, both signals.
    assert abs(_mean(clock, 0, 300) / _mean(peer_clock, 0, 300) - 1) < 0.02
    assert 0.86 < _mean(clock, 960, 1500) / _mean(clock, 0, 300) < 0.94
    assert 0.84 < _mean(power, 960, 1500) / _mean(power, 0, 300) < 0.96
    # Half-way down the ramp it is still inside the healthy spread of clocks across the fleet.
    half = [v for t, v in clock if 540 <= t < 660]
    healthy = [v for n in ("n000", "n001", "n003") for t, v in _gpu_series(events, n, 1, "sm_clock_mhz")]
    assert min(healthy) < statistics.mean(half)
    sag_rows = [e.data["gpus"][1] for e in events if e.source == "gpu" and e.node == "n002" and e.ts > CFG.start_ts + 960]
    assert not any({"hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake"} & set(g["throttle"]) for g in sag_rows)
    slow, peer = _compute(events, {9}), _compute(events, {13})
    assert 1.05 < _mean(slow, 960, 1500) / _mean(peer, 960, 1500) < 1.12


def test_compute_creep_adds_three_percent_an_hour():
    run, events = _run(Drift("compute_creep", t=0, node="n001"), duration=3600.0)
    [label] = run.labels
    assert label["drift"] == "compute_creep" and label["ranks"] == [4, 5, 6, 7]
    ratio_early = _mean(_compute(events, {4, 5, 6, 7}), 0, 600) / _mean(_compute(events, {8, 9, 10, 11}), 0, 600)
    ratio_late = _mean(_compute(events, {4, 5, 6, 7}), 3000, 3600) / _mean(_compute(events, {8, 9, 10, 11}), 3000, 3600)
    # From ~0.25 % (first 10 min) to ~2.75 % (last 10 min): 2.5 % apart, give or take the noise.
    assert 0.015 < ratio_late - ratio_early < 0.035


def test_an_eviction_of_the_drifting_machine_ends_the_drift():
    run, events = _run(Drift("compute_creep", t=0, node="n001", rate_per_h=0.5), duration=900.0)
    effect = next(ep.extra["drift_effect"] for ep in run.cluster.episodes.values())
    run.cluster.apply(Command(job=CFG.job, action="evict", nodes=("n001",), issued_at=run.cluster.now,
                              expires_at=run.cluster.now + 60, reason="test", diagnosis_id="d1", id="c1"))
    assert effect.t1 <= run.cluster.now and "n001" not in run.cluster.slots


def test_stack_answers_during_a_small_drift_are_mostly_the_healthy_mix():
    run = simulate(CFG, FaultPlan(), duration=600.0, drifts=(Drift("gpu_sag", t=0, node="n002", gpu=1, ramp_s=60),))
    run.cluster.advance(CFG.start_ts + 200)  # full depth: rank 9 computes 8 % slower
    healthy = {r: ("grad_sync" if r % 3 else "compute") for r in range(run.cluster.world)}
    answers = [run.cluster.stack_states() for _ in range(200)]
    straggler = sum(a != healthy for a in answers)
    assert 0 < straggler < 40  # about 0.8 × 8 % of snapshots catch rank 9 still computing
    assert all(a[9] == "compute" for a in answers if a != healthy)


@pytest.mark.parametrize("bad", [dict(kind="melt"), dict(node="x1"), dict(clock_depth=1.5), dict(t=-1)])
def test_a_bad_drift_is_a_clear_error(bad):
    with pytest.raises(ValueError):
        Drift(**{"kind": "gpu_sag", "t": 0, "node": "n001", **bad})


def test_a_nic_decay_is_labelled_nic_and_shows_in_the_port_counters_under_the_burst_threshold():
    run, events = _run(Drift("nic_decay", t=120, node="n003", port=2, ramp_s=600), duration=900.0)
    [label] = run.labels
    assert (label["fault"], label["drift"], label["nodes"], label["ranks"]) == ("nic", "nic_decay", ["n003"], [])

    def port(e, dev):
        return next(p for p in e.data["ports"] if p["device"] == dev)

    nets = [e for e in events if e.source == "net" and e.node == "n003" and e.ts >= CFG.start_ts + 60]
    late = [e for e in nets if e.ts >= CFG.start_ts + 780]
    per_min = sum(port(e, "mlx5_2")["deltas"]["symbol_error"] or 0 for e in late) / ((len(late) * 5.0) / 60)
    assert 40 < per_min < 100  # ~72 a minute at full strength: under the rule's 100 per minute
    share = [(port(e, "mlx5_2")["rates"]["rx_bytes"] or 0) / max(1.0, port(e, "mlx5_0")["rates"]["rx_bytes"] or 0)
             for e in late if (port(e, "mlx5_0")["rates"]["rx_bytes"] or 0) > 1e8]
    assert share and statistics.median(share) < 0.85  # it carries less than its sibling rail
    assert all(port(e, "mlx5_2")["state"] == "ACTIVE" for e in nets)


def test_drift_specs_from_the_command_line():
    from faultlens.simulator.drifts import parse_drift

    assert parse_drift("compute_creep:n004@1200") == Drift("compute_creep", t=1200.0, node="n004")
    for bad in ("gpu_sag", "gpu_sag:n003", "gpu_sag:n003@soon", "melt:n003@10"):
        with pytest.raises(ValueError, match="KIND:NODE@SECONDS"):
            parse_drift(bad)
