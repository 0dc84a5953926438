"""Replay: what must NOT be diagnosed (healthy noise, a single NIC flap, user errors as evictions)."""

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.simulator import lines
from faultlens.simulator.plan import FaultPlan
from tests.diagnosis.diag_events import ev, topology
from tests.diagnosis.sim_replay import replay


def test_replay_healthy_trace_gives_no_findings(tmp_path):
    found, labels, _ = replay(tmp_path, FaultPlan(), nodes=8, duration=900, seed=11)
    assert labels == []
    assert found == [], [(d.fault, d.nodes, d.detail[:100]) for d in found]


def test_replay_single_nic_flap_is_tolerated():
    e = Engine(EngineConfig(implicit=False))
    e.process(topology(n=4, gpus=2))
    pci = "0000:5e:00.0"
    out = []
    for t, text in ((10.0, lines.mlx5_module_event(pci)), (10.01, lines.mlx5_link(pci, "ib0", up=False)),
                    (14.0, lines.mlx5_module_event(pci, "Cable plugged")), (14.01, lines.mlx5_link(pci, "ib0", up=True))):
        out += e.process(ev(t, "n001", "kernel", "line", line=f"[ 9999.000000] {text}"))
    assert out + e.flush() == []


def test_replay_user_code_error_rolls_back_without_eviction(tmp_path):
    found, [label], _ = replay(tmp_path, FaultPlan().fail_at("user_code", t=150, node="n001"))
    assert [d.action for d in found] == ["rollback"]


def test_replay_nan_from_data_stops_without_eviction(tmp_path):
    found, [label], _ = replay(tmp_path, FaultPlan().fail_at("nan_loss", t=150))
    assert found and all(d.fault == "nan_loss" and d.action == "stop_time_diagnosis" for d in found)
