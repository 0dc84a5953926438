"""Expected verdicts against today's diagnoses (diagnosis.replay.expect): what is missing, extra, changed,
and which healthy machines an unexpected eviction names; the expect file's shape."""

from __future__ import annotations

import pytest

from faultlens.diagnosis.replay.expect import (
    ExpectError,
    Verdict,
    compare,
    expect_path,
    read_expect,
    trace_of,
    verdicts_of,
    write_expect,
)
from faultlens.events.diagnosis_record import Diagnosis

T = 1_767_225_600.0


def _d(fault, onset, nodes, action="evict", job="j"):
    return Diagnosis(job=job, ts=T + onset + 5, onset=T + onset, fault=fault, action=action, nodes=tuple(nodes))


def _v(fault, onset, nodes, action="evict", job="j", slack=60):
    return Verdict(job, fault, tuple(sorted(nodes)), action, T + onset - slack, T + onset + slack)


def test_todays_verdicts_leave_out_record_only_and_stack_requests_and_keep_alerts():
    found = [_d("gpu_lost", 100, ["n2", "n1"]), _d("gpu_thermal", 50, ["n3"], action="none"),
             _d("job_hang", 300, [], action="capture_stacks"), _d("node_silent", 400, ["n4"], action="alert")]
    got = verdicts_of(found, slack_s=30)
    assert [(v.fault, v.nodes, v.action) for v in got] == [("gpu_lost", ("n1", "n2"), "evict"),
                                                           ("node_silent", ("n4",), "alert")]
    assert got[0].onset_from == T + 70 and got[0].onset_to == T + 130


def test_the_same_verdicts_pass():
    found = [_d("gpu_lost", 100, ["n1"]), _d("nic", 900, ["n2"], action="alert")]
    result = compare(verdicts_of(found), found)
    assert result.ok and len(result.matched) == 2 and not result.healthy_evicted


def test_missing_extra_and_a_healthy_machine_evicted():
    expected = [_v("gpu_lost", 100, ["n1"])]
    found = [_d("nic", 500, ["n7"])]
    result = compare(expected, found)
    assert not result.ok
    assert [v.fault for v in result.missing] == ["gpu_lost"]
    assert [d.fault for d in result.extra] == ["nic"]
    assert result.healthy_evicted == (("j", "n7"),)


def test_other_nodes_or_action_in_the_window_is_a_change_and_the_new_node_is_named():
    result = compare([_v("job_hang", 100, ["n1"])], [_d("job_hang", 110, ["n1", "n5"])])
    assert not result.missing and not result.extra
    (change,) = result.changed
    assert change.what == ("nodes",) and result.healthy_evicted == (("j", "n5"),)
    result = compare([_v("cuda_error", 100, ["n1"], action="evict")],
                     [_d("cuda_error", 100, ["n1"], action="stop_time_diagnosis")])
    assert result.changed[0].what == ("action",) and not result.healthy_evicted


def test_an_onset_outside_the_window_is_a_change_of_onset_not_a_miss():
    result = compare([_v("gpu_lost", 100, ["n1"])], [_d("gpu_lost", 400, ["n1"])])
    assert [c.what for c in result.changed] == [("onset",)] and not result.missing and not result.extra


def test_an_extra_alert_is_a_difference_but_evicts_nobody():
    result = compare([], [_d("nic", 100, ["n1"], action="alert")])
    assert not result.ok and not result.healthy_evicted


def test_two_verdicts_of_one_class_pair_with_the_nearest_onsets():
    expected = [_v("user_code", 100, ["n1"], action="rollback"), _v("user_code", 460, ["n1"], action="rollback")]
    found = [_d("user_code", 470, ["n1"], action="rollback"), _d("user_code", 90, ["n1"], action="rollback")]
    assert compare(expected, found).ok
    assert not compare(expected, found[:1]).ok


def test_the_file_round_trips_with_its_header_and_names(tmp_path):
    trace = tmp_path / "incident.parquet"
    verdicts = [_v("gpu_lost", 100, ["n1"]), _v("nic", 200, ["n2"], action="alert")]
    path = write_expect(expect_path(trace), verdicts, trace=trace.name)
    assert path == tmp_path / "incident.parquet.expect.jsonl" and trace_of(path) == trace
    assert read_expect(path) == verdicts
    empty = write_expect(tmp_path / "healthy.parquet.expect.jsonl", [], trace="healthy.parquet")
    assert read_expect(empty) == [] and empty.read_text().count("\n") == 1


@pytest.mark.parametrize("line, says", [
    ('{"job": "j", "fault": "gpu_lost"}', "a verdict needs"),
    ('{"job": "j", "fault": "gpu_gone", "nodes": [], "action": "evict", "onset_from": 1, "onset_to": 2}', "unknown fault"),
    ('{"job": "j", "fault": "gpu_lost", "nodes": [], "action": "zap", "onset_from": 1, "onset_to": 2}', "unknown action"),
    ('{"job": "j", "fault": "gpu_lost", "nodes": "n1", "action": "evict", "onset_from": 1, "onset_to": 2}', "nodes"),
    ('{"job": "j", "fault": "gpu_lost", "nodes": [], "action": "evict", "onset_from": 3, "onset_to": 2}', "after"),
    ("not json", "not valid JSON"),
])
def test_a_bad_line_is_named_with_its_place(tmp_path, line, says):
    path = tmp_path / "t.parquet.expect.jsonl"
    path.write_text('{"faultlens_expect": 1}\n' + line + "\n")
    with pytest.raises(ExpectError, match=says) as info:
        read_expect(path)
    assert f"{path}:2" in str(info.value)
