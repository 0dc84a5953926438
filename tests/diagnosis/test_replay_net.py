"""The network rules end to end on simulated traces: every network fault found on its node, a
healthy run blames nobody, and a hang's verdict quotes the job's RDMA silence."""

from __future__ import annotations

import pytest

from faultlens.diagnosis.engine.core import Engine
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.replay.scoring import score
from faultlens.simulator import SimConfig, simulate
from faultlens.simulator.faults import NIC_VARIANTS
from faultlens.simulator.plan import FaultPlan


def net_plan(seed: int) -> FaultPlan:
    plan = FaultPlan()
    for i, v in enumerate(NIC_VARIANTS):
        plan.fail_at("nic", node=f"n{(3 * i + seed) % 8:03d}", t=150 + 200 * i, detail=v)
    # After the degrading link (ends by t=1290, a restart): a hang needs steps after a restart to be seen.
    return plan.fail_at("job_hang", node="n001", t=1500)


@pytest.fixture(scope="module", params=[3, 4])
def net_run(request):
    cfg = SimConfig(nodes=8, gpus=4, seed=request.param, job="job-net-replay")
    run = simulate(cfg, net_plan(request.param), duration=2200)
    events = list(run.events())
    return cfg, events, run.labels, analyze(events, Engine())


def test_every_network_fault_is_found_on_its_node_and_no_healthy_node_is_evicted(net_run):
    _, _, labels, diags = net_run
    s = score(diags, labels)
    nic = s.classes["nic"]
    assert (nic.labels, nic.detected, nic.precision) == (len(NIC_VARIANTS), len(NIC_VARIANTS), 1.0)
    assert s.overall()["healthy_nodes_evicted"] == 0 and not s.unmatched


def test_each_eviction_says_which_port_and_counter(net_run):
    _, _, _, diags = net_run
    evictions = [d for d in diags if d.fault == "nic" and d.action == "evict"]
    assert evictions and all(d.evidence and ("mlx5_" in d.detail or "0000:" in d.detail) for d in evictions)
    assert any("transport errors" in d.detail for d in evictions)  # the black-holing rail
    assert any("error burst" in d.detail or "error bursts" in d.detail for d in evictions)


def test_a_hang_verdict_quotes_the_network_silence_and_is_decided_by_the_gpus(net_run):
    _, _, _, diags = net_run
    hang = [d for d in diags if d.fault == "job_hang" and d.action != "capture_stacks"]
    assert hang and all("network: RDMA traffic of the whole job is near zero" in d.detail for d in hang)
    assert all("GPUs idle" in d.detail or "stack" in d.detail for d in hang)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_healthy_run_raises_no_network_diagnosis(seed):
    cfg = SimConfig(nodes=8, gpus=8, seed=seed, job="job-net-healthy")
    events = list(simulate(cfg, FaultPlan(), duration=1800).events())
    assert sum(e.source == "net" for e in events) == 8 * 1800 // 5
    diags = analyze(events, Engine())
    assert not [d for d in diags if d.fault == "nic"]  # not even an alert
    assert not [d for d in diags if d.action not in ("none",)]
