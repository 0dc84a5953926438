"""`faultlens rules diff`: today's rules and a changed set side by side over a trace (issue 55)."""

from __future__ import annotations

import json

import pytest

from bench.testbed.waves import write_parquet
from faultlens.cli import main
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.rules_diff import compare


def _d(fault, action, nodes, group=None, job="j", rule=None):
    return Diagnosis(job=job, ts=1.0, onset=1.0, fault=fault, action=action, nodes=tuple(nodes), group=group, rule=rule)


def test_compare_counts_gains_losses_and_changed_actions_per_rule():
    current = [_d("nvlink", "alert", [], "wave:rack=r1", rule="xid.74"), _d("gpu_lost", "evict", ["n5"], rule="gpu_lost"),
               _d("nic", "alert", ["n2"], rule="nic"), _d("nvlink", "evict", ["n7"], rule="nvlink.counters")]
    changed = [_d("nvlink", "evict", ["n1"], rule="xid.74"), _d("nvlink", "evict", ["n5"], rule="xid.74"),
               _d("gpu_lost", "evict", ["n5"], rule="gpu_lost"), _d("nic", "evict", ["n2"], rule="nic"),
               _d("nvlink", "evict", ["n7"], rule="nvlink.counters"), _d("job_hang", "evict", ["n3"])]
    diff = compare(current, changed, culprits={("j", "n5"), ("j", "n7")})
    xid = diff.rules["xid.74"]  # one rule of the class: the counters' rule of the same class is apart
    assert (xid.current, xid.changed, len(xid.gained), len(xid.lost)) == (1, 2, 2, 1)
    assert diff.rules["nvlink.counters"].same and diff.rules["gpu_lost"].same
    assert [(a.action, b.action) for a, b in diff.rules["nic"].action_changed] == [("alert", "evict")]
    assert [d.nodes for d in diff.rules["job_hang"].gained] == [("n3",)]  # no rule named: its class
    assert diff.evicted_current == {("j", "n5"), ("j", "n7")}
    assert diff.healthy_evicted == {("j", "n1"), ("j", "n2"), ("j", "n3")}
    assert diff.healthy_evicted_by("xid.74") == {("j", "n1")} and diff.healthy_evicted_by("nic") == {("j", "n2")}
    assert diff.healthy_evicted_by("gpu_lost") == set()  # n5 is the culprit
    assert compare(current, changed).healthy_evicted == set()  # no ground truth: nobody known healthy


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    out = tmp_path_factory.mktemp("rules_diff")
    path = write_parquet("fabric_reset", out, nodes=16, culprit="n0005", duration=200)
    off = out / "off.toml"
    off.write_text("[wave]\nwindow_s = 0.0\n")  # waves turned off: every machine judged alone
    return path, off


def test_turning_waves_off_would_evict_healthy_machines_and_exits_1(fabric, capsys):
    path, off = fabric
    rc = main(["rules", "diff", str(path), "--thresholds", str(off), "--labels", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert out["evicted_current"] == [[path.stem, "n0005"]]  # today: the Xid 79 machine alone
    assert len(out["healthy_evicted"]) == 15 and out["healthy_evicted_current"] == []
    xid = out["rules"]["xid.74"]  # the rule the fabric reset's lines are read by
    assert len(xid["lost"]) == 1 and xid["lost"][0]["group"] == "wave:nvlink_domain=nvl-0"  # the wave ...
    assert len(xid["healthy_evicted"]) == 15  # ... lost to evictions of the 15 healthy machines
    assert out["rules"]["gpu_lost"]["healthy_evicted"] == []


def test_a_change_that_evicts_no_healthy_machine_exits_0(fabric, tmp_path, capsys):
    path, _ = fabric
    wider = tmp_path / "wider.toml"
    wider.write_text("[wave]\nwindow_s = 90.0\n")
    assert main(["rules", "diff", str(path), "--thresholds", str(wider), "--labels"]) == 0
    text = capsys.readouterr().out
    assert "healthy machines evicted: 0 now, 0 with the change" in text
    assert "= xid.74:" in text  # a wider window changes nothing the fabric reset's rule did


def test_nothing_changed_or_a_bad_file_is_said(fabric, tmp_path, capsys):
    path, off = fabric
    assert main(["rules", "diff", str(path)]) == 2
    bad = tmp_path / "bad.toml"
    bad.write_text("[wave]\nmin_nodes = 0\n")
    with pytest.raises(SystemExit, match="wave.min_nodes"):
        main(["rules", "diff", str(path), "--thresholds", str(bad)])
    assert main(["rules", "diff", str(tmp_path / "missing.parquet"), "--thresholds", str(off)]) == 2
    assert "no such file" in capsys.readouterr().err
