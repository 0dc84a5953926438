"""Slow drifts: the drift features and the drift judge (diagnosis.peers.drift_features, diagnosis.peers.anomaly).

The fleet below is written by hand with the noise a real H100 job shows (boost clocks stepping
down 15 MHz at a time with load, power swinging ±45 W and capping at 700 W with the clock shed
that goes with it, a fixed per-machine offset in compute time, a shared ±3 % per step, the odd
slow batch on one rank), sampled every 10 s as the bench does.
"""

from __future__ import annotations

import math
import random

import pytest

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.peers.anomaly import CORROBORATED, PeerAnomalyDetector
from faultlens.diagnosis.peers.drift_features import DriftFeatures, node_drift, peer_drift_z, relative
from faultlens.diagnosis.peers.failslow import FailSlowRounds
from faultlens.diagnosis.peers.features import FeatureWindows
from faultlens.events.diagnosis_record import Diagnosis
from tests.diagnosis.diag_events import JOB, T0, gpu, sample, step, topology

N_NODES = 12


def _fleet(minutes: int, seed: int, *, sag: tuple[str, float] | None = None, creep: tuple[str, float] | None = None,
           job_slowdown_at: float | None = None):
    """Findings of a PeerAnomalyDetector with the peer model on, over ``minutes`` of a job.

    ``sag=(node, onset_s)``: GPU 1 of the node loses 10 % clocks and power and its rank 8 %
    compute over 30 minutes. ``creep=(node, onset_s)``: the node computes 3 % slower per hour.
    ``job_slowdown_at``: every node computes 6 % slower from then on (a slower data shard)."""
    rng = random.Random(seed)
    offsets = {f"n{i:03d}": rng.gauss(0, 0.006) for i in range(N_NODES)}
    fw, det = FeatureWindows(10.0), PeerAnomalyDetector(10.0, drift=True)
    found = []
    for t in range(0, minutes * 60, 10):
        common = 1.0 + 0.03 * rng.gauss(0, 1) + (0.06 if job_slowdown_at is not None and t >= job_slowdown_at else 0.0)
        stall = rng.randrange(N_NODES) if rng.random() < 0.01 else None
        for i in range(N_NODES):
            node = f"n{i:03d}"
            s_sag = min(1.0, max(0.0, (t - sag[1]) / 1800.0)) if sag and node == sag[0] else 0.0
            hours = max(0.0, (t - creep[1]) / 3600.0) if creep and node == creep[0] else 0.0
            gpus = []
            for g in range(2):
                power = 600.0 + rng.gauss(0, 45)
                clock = 1980 - 15 * math.floor(abs(rng.gauss(0, 1.41)) * 3)
                if power >= 698:
                    power, clock = 699.0, clock - 180
                if g == 1 and s_sag:
                    power, clock = power * (1 - 0.10 * s_sag), math.floor(clock * (1 - 0.10 * s_sag))
                gpus.append(gpu(g, sm_clock_mhz=clock, power_w=round(power, 1), temp_c=round(rng.gauss(65, 2), 1)))
            compute = 8.0 * (1 + offsets[node]) * common * (1 + 0.006 * rng.gauss(0, 1))
            compute *= (1 + 0.08 * s_sag) * (1 + 0.03 * hours) * (rng.uniform(1.3, 2.0) if stall == i else 1.0)
            for e in (sample(t, node, gpus), step(t + 5, node, i, t // 10, compute_s=round(compute, 4))):
                for w in fw.observe(e):
                    det.observe_window(w)
        found += det.tick(T0 + t)
    return found + det.flush()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_healthy_noisy_fleet_raises_no_drift_suspect(seed):
    # Including a job-wide slowdown half-way: every node moves, so none moves away from its peers.
    assert _fleet(75, seed, job_slowdown_at=2400.0) == []


def test_a_gpu_whose_clocks_and_power_sag_together_is_ranked_as_a_suspect():
    found = _fleet(60, 4, sag=("n005", 1500.0))
    assert found, "the sag went unseen"
    first = found[0]
    assert (first.fault, first.action, first.nodes, first.entity) == ("fail_slow", "capture_stacks", ("n005",), "drift")
    assert {f.nodes for f in found} == {("n005",)}
    assert 0.5 <= first.confidence < CORROBORATED  # above stack-round requests, below what may stand alone
    assert "SM clocks" in first.detail and "drift suspect 1 of 1" in first.detail
    # Seen while the sag is still shallow: well before the 30-minute ramp ends.
    assert T0 + 1500 < first.ts <= T0 + 1500 + 1200


def test_compute_time_creeping_3_percent_an_hour_is_ranked_as_a_suspect():
    found = _fleet(75, 5, creep=("n008", 600.0))
    assert [(f.nodes, f.action) for f in found][:1] == [(("n008",), "capture_stacks")]
    assert "compute time crept up" in found[0].detail
    assert found[0].ts <= T0 + 600 + 3600  # under 3 % slower, long before a 10 s window could tell


def test_the_peer_model_alone_never_evicts():
    # Both drifts stay under the single-window threshold: whatever the drift judge and the forest
    # say about them asks for stacks or alerts a person, and never stands as an eviction alone.
    found = _fleet(75, 4, sag=("n005", 900.0), creep=("n008", 300.0))
    assert {f.entity for f in found} >= {"drift", "drift-alert"}
    assert {f.action for f in found} <= {"capture_stacks", "alert"}
    assert all(f.confidence < CORROBORATED for f in found)


def test_a_drift_suspicion_without_stacks_becomes_an_alert_not_an_eviction():
    book = JobBook()
    book.update(topology(n=4, gpus=2))
    rounds = FailSlowRounds(book)
    suspicion = Diagnosis(job=JOB, ts=T0 + 100, onset=T0 + 40, fault="fail_slow", action="capture_stacks",
                          nodes=("n002",), confidence=0.6, detail="n002 drifted away from its peers")
    out = rounds.observe_diagnosis(suspicion)
    assert [d.action for d in out] == ["capture_stacks"]  # the first stack round is asked for
    verdicts = [d for t in range(101, 200) for d in rounds.tick(T0 + t) if d.action != "capture_stacks"]
    assert [(d.action, d.nodes) for d in verdicts] == [("alert", ("n002",))]


def test_drift_features_measure_against_the_node_own_baseline_and_the_peers():
    # A node that was always 2 % slower (silicon) is no drift; one that became 2 % slower is.
    series = lambda lvl0, lvl1: [(60.0 * k, {"compute": lvl0 if k < 20 else lvl1}) for k in range(40)]  # noqa: E731
    feats = [node_drift(f"n{i}", series(0.02 if i == 0 else 0.0, 0.02 if i in (0, 1) else 0.0), {"compute": 0.02 if i == 0 else 0.0})
             for i in range(6)]
    z = {f.node: zz for f, zz in zip(feats, peer_drift_z(feats), strict=True)}
    assert z["n1"]["excess_compute"] >= 5 and abs(z["n0"]["excess_compute"]) < 1
    assert feats[1].slope["compute"] > 0 and isinstance(feats[1], DriftFeatures)
    assert relative({"compute_s": 8.4, "sm_clock_ratio": 0.9}, {"compute_s": 8.0, "sm_clock_ratio": 1.0}) == \
        pytest.approx({"compute": 0.05, "clock": 0.1})


def test_the_engine_switch_turns_the_peer_model_off():
    from faultlens.cli import build_parser
    from faultlens.engine_flags import engine_config

    assert not engine_config(build_parser().parse_args(["analyze", "t.parquet", "--no-peer-model"])).peer_model
    assert engine_config(build_parser().parse_args(["analyze", "t.parquet"])).peer_model
    on, off = Engine(EngineConfig()), Engine(EngineConfig(peer_model=False))
    assert on._lane("j").stage.anomaly.drift is not None and on._lane("j").stage.anomaly.use_forest
    assert off._lane("j").stage.anomaly.drift is None and not off._lane("j").stage.anomaly.use_forest


def test_the_fast_forest_scorer_gives_scikit_learn_s_scores():
    import numpy as np
    from sklearn.ensemble import IsolationForest

    from faultlens.diagnosis.peers.peer_forest import ForestScorer

    # To the last digit, not approximately: a row's outlier flag is a comparison with a cut, and a
    # score one ulp off could flip it. Features subsampled or not, a batch of rows or one alone.
    for seed, max_features in ((0, 1.0), (3, 0.5), (7, 1.0)):
        rng = np.random.default_rng(seed)
        train = rng.normal(size=(600, 6))
        model = IsolationForest(n_estimators=50, random_state=seed, max_features=max_features).fit(train)
        rows = np.vstack([rng.normal(size=(200, 6)), rng.normal(5.0, 1.0, size=(50, 6))])
        scorer = ForestScorer(model)
        assert np.array_equal(scorer.score_samples(rows), model.score_samples(rows))
        assert np.array_equal(scorer.score_samples(rows[:1]), model.score_samples(rows[:1]))
        assert np.array_equal(scorer.score_samples(train), model.score_samples(train))
