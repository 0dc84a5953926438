"""Replay: a hang and a fail-slow node from simulated traces → the evicted group holds the culprit."""

from faultlens.simulator.plan import FaultPlan
from tests.diagnosis.sim_replay import replay


def _final(found, fault):
    return [d for d in found if d.fault == fault and d.action in ("evict", "inspect_hardware")]


def test_replay_fail_slow_suspicion_then_degrader_group(tmp_path):
    found, [label], t0 = replay(tmp_path, FaultPlan().fail_at("fail_slow", t=150, node="n002"), nodes=8)
    suspicions = [d for d in found if d.fault == "fail_slow" and d.action == "capture_stacks"]
    assert suspicions and set(suspicions[0].nodes) <= set(label["nodes"])
    assert "peer median" in suspicions[0].detail and suspicions[0].confidence < 1
    evicted = _final(found, "fail_slow")
    assert evicted and set(label["nodes"]) <= set(evicted[0].nodes)
    assert {d.fault for d in found} == {"fail_slow"}


def test_replay_job_hang_evicts_a_group_holding_the_culprit(tmp_path):
    found, [label], t0 = replay(tmp_path, FaultPlan().fail_at("job_hang", t=150, node="n002"), nodes=8)
    evicted = _final(found, "job_hang")
    assert evicted, [(d.fault, d.action, d.nodes) for d in found]
    assert set(label["nodes"]) <= set(evicted[0].nodes)
    assert {d.fault for d in found} == {"job_hang"}
