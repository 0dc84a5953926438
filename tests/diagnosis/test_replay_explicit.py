"""Replay: each explicit fault class from a simulated trace → the right diagnosis, node and action."""

import pytest

from faultlens.simulator.plan import FaultPlan
from tests.diagnosis.sim_replay import replay

EXPECTED = {
    "gpu_lost": {"evict"},
    "gpu_memory": {"evict", "evict_reset_gpu"},
    "nvlink": {"evict", "evict_reset_gpu"},
    "gpu_reset_required": {"evict", "evict_reset_gpu"},
    "gpu_thermal": {"evict"},
    "nic": {"evict"},
    "kernel": {"restart", "evict"},
    "host_oom": {"restart"},
    "cuda_error": {"stop_time_diagnosis"},
    "nccl_error": {"reattempt"},
    "app_fault": {"reattempt"},
    "node_silent": {"evict"},
    "user_code": {"rollback"},
    "nan_loss": {"stop_time_diagnosis"},
    "loss_spike": {"stop_time_diagnosis"},
}


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_replay_explicit_fault(tmp_path, fault):
    found, labels, t0 = replay(tmp_path, FaultPlan().fail_at(fault, t=150, node="n002"))
    [label] = labels
    mine = [d for d in found if d.fault == fault]
    assert mine, f"no {fault} diagnosis; got {[(d.fault, d.nodes) for d in found]}"
    first = mine[0]
    assert first.action in EXPECTED[fault], first
    if label["nodes"] and first.nodes:
        assert set(first.nodes) <= set(label["nodes"]), (first.nodes, label["nodes"])
    assert label["onset"] - 30 <= first.ts <= label["onset"] + 120
    # nothing else is blamed: every scored diagnosis is this fault
    assert {d.fault for d in found} == {fault}, [(d.fault, d.nodes, d.detail[:80]) for d in found if d.fault != fault]
    if fault in ("user_code", "nan_loss", "loss_spike"):
        assert all(d.action not in ("evict", "evict_reset_gpu", "inspect_hardware") for d in found)
