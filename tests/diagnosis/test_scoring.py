import json

from faultlens.cli import main
from faultlens.diagnosis.replay.scoring import score
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.simulator.plan import FaultPlan
from tests.diagnosis.sim_replay import replay

T = 1767225600.0


def _d(fault, ts, nodes, action="evict", **kw):
    return Diagnosis(job="j", ts=T + ts, onset=T + ts, fault=fault, action=action, nodes=tuple(nodes), **kw)


def _l(fault, onset, nodes):
    return {"job": "j", "fault": fault, "nodes": list(nodes), "ranks": [], "onset": T + onset}


def test_matching_by_class_node_and_time():
    labels = [_l("gpu_lost", 100, ["n1"]), _l("nic", 500, ["n2"])]
    diags = [
        _d("gpu_lost", 101, ["n1"]),  # match, 1 s
        _d("gpu_lost", 102, ["n1"]),  # match too (a repeat is not wrong)
        _d("nic", 530, ["n3"]),  # wrong node: false positive, n3 blamed
        _d("nic", 1500, ["n2"]),  # too late
        _d("fail_slow", 50, ["n4"], action="capture_stacks", confidence=0.3),  # a request: not scored
        _d("gpu_memory", 10, ["n5"], action="none"),  # record-only: not scored
    ]
    s = score(diags, labels, window_s=600)
    gl, nic = s.classes["gpu_lost"], s.classes["nic"]
    assert (gl.precision, gl.recall, gl.latencies) == (1.0, 1.0, [1.0])
    assert (nic.precision, nic.recall) == (0.0, 0.0)
    o = s.overall()
    assert o["precision"] == 0.5 and o["recall"] == 0.5 and o["healthy_nodes_blamed"] == 2  # n3, and n2 late
    assert "fail_slow" not in s.classes and "gpu_memory" not in s.classes


def test_group_eviction_holding_the_culprit_is_over_eviction_not_healthy_blame():
    labels = [_l("job_hang", 100, ["n2"])]
    diags = [_d("job_hang", 190, ["n2", "n3"], group="pp:1"), _d("job_hang", 300, ["n5", "n6"], group="pp:2")]
    s = score(diags, labels)
    c = s.classes["job_hang"]
    assert (c.group_checked, c.group_holds) == (1, 1)
    assert s.over_evicted_nodes == 1  # n3, evicted with the culprit's group on purpose
    assert c.true_positives == 1 and s.healthy_nodes_blamed == 2  # n5 and n6: a group without the culprit


def test_score_json_contract_on_a_simulated_trace(tmp_path, capsys):
    replay(tmp_path, FaultPlan().fail_at("gpu_lost", t=150, node="n001").fail_at("nic", t=150, node="n003"))
    assert main(["score", str(tmp_path / "trace.parquet"), "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    *classes, overall = lines
    assert {c["fault"] for c in classes} == {"gpu_lost", "nic"}
    for key in ("precision", "recall", "detection_latency_p50_s", "detection_latency_p99_s", "healthy_nodes_blamed"):
        assert key in overall
    assert overall["precision"] == 1.0 and overall["recall"] == 1.0 and overall["healthy_nodes_blamed"] == 0


def test_analyze_prints_json_lines(tmp_path, capsys):
    replay(tmp_path, FaultPlan().fail_at("gpu_lost", t=150, node="n001"))
    assert main(["analyze", str(tmp_path / "trace.parquet"), "--findings-only"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert [(r["fault"], r["nodes"], r["action"]) for r in rows] == [("gpu_lost", ["n001"], "evict")]


def test_missing_trace_is_a_clear_error(tmp_path, capsys):
    assert main(["score", str(tmp_path / "nope.parquet")]) == 2
    assert "nope.parquet" in capsys.readouterr().err
