"""`faultlens check` as a user runs it on Parquet traces (the foreign fixtures written out), and the
pytest plugin collecting *.expect.jsonl files: expect, pass, a changed verdict fails with a diff."""

from __future__ import annotations

import json
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench.testbed import foreign
from tests.in_process import faultlens_main
from tests.progress import run_watched

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "tests" / "fixtures" / "foreign" / "expect"


# Nothing printed, written or computed for this long: stuck, not slow (a busy machine only slows
# the CPU clock run_watched watches); the outer limit is under pytest's own 300 s.
STALL_S = 120.0


def _faultlens_process(*argv):
    """`python -m faultlens ARGV` as a user runs it: the test of the command line itself runs it once."""
    return run_watched([sys.executable, "-m", "faultlens", *map(str, argv)], stall_s=STALL_S, cpu=True, limit_s=280)


# The rest through main() in this process (tests/in_process.py): ten interpreters importing pyarrow
# and the engine anew were ~2.5 CPU-s each, the check itself ~0.6.
_faultlens = faultlens_main


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    out = tmp_path_factory.mktemp("traces")
    return {name: foreign.write_parquet(name, out) for name in ("xid_two_sources", "healthy")}


def test_expect_then_check_then_a_changed_verdict_fails_with_a_diff(traces, tmp_path):
    trace = tmp_path / "incident.parquet"
    shutil.copy(traces["xid_two_sources"], trace)
    wrote = _faultlens_process("check", "--expect", trace)
    assert wrote.returncode == 0, wrote.stderr
    expect = tmp_path / "incident.parquet.expect.jsonl"
    lines = [json.loads(x) for x in expect.read_text().splitlines()]
    assert lines[0]["faultlens_expect"] == 1
    assert [(v["fault"], v["nodes"], v["action"]) for v in lines[1:]] == [("gpu_memory", ["n001"], "evict_reset_gpu")]
    assert "1 verdict(s)" in wrote.stdout and "gpu_memory" in wrote.stdout

    ok = _faultlens("check", trace)
    assert ok.returncode == 0 and ok.stdout.startswith("ok"), ok.stdout + ok.stderr

    # someone's threshold change now evicts n002 instead: a change, and n002 named as a healthy machine evicted
    expect.write_text(expect.read_text().replace('"nodes":["n001"],"action":"evict_reset_gpu"',
                                                 '"nodes":["n002"],"action":"evict_reset_gpu"'))
    junit = tmp_path / "junit.xml"
    bad = _faultlens("check", tmp_path, "--junit", junit)  # a folder: its expect files
    assert bad.returncode == 1
    assert "FAIL" in bad.stdout and "~ changed" in bad.stdout and "nodes [n002] → [n001]" in bad.stdout
    assert "evicted: foreign-xid_two_sources n001" in bad.stdout
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == "1" and suite.get("failures") == "1"
    assert "nodes [n002] → [n001]" in suite.find("testcase/failure").text

    as_json = _faultlens("check", trace, "--json")
    result = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and result["ok"] is False and result["changed"][0]["changed"] == ["nodes"]


def test_a_trace_that_must_stay_quiet_fails_on_any_acting_diagnosis(traces, tmp_path):
    # The healthy trace's committed expect file (no verdicts) put beside a trace with a fault in it.
    trace = tmp_path / "healthy.parquet"
    shutil.copy(traces["xid_two_sources"], trace)
    shutil.copy(EXAMPLES / "healthy.parquet.expect.jsonl", tmp_path)
    out = _faultlens("check", trace)
    assert out.returncode == 1 and "+ extra    foreign-xid_two_sources gpu_memory" in out.stdout


def test_no_expect_file_or_an_unreadable_trace_is_an_error_not_a_pass(tmp_path):
    (tmp_path / "t.parquet").write_bytes(b"not parquet")
    out = _faultlens("check", tmp_path / "t.parquet")
    assert out.returncode == 2 and "faultlens check --expect" in out.stdout
    (tmp_path / "t.parquet.expect.jsonl").write_text('{"faultlens_expect": 1}\n')
    out = _faultlens("check", tmp_path / "t.parquet")
    assert out.returncode == 2 and "cannot read the trace" in out.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    out = _faultlens("check", empty)
    assert out.returncode == 2 and "nor a *.parquet trace to write one for" in out.stderr


def test_pytest_plugin_collects_every_expect_file_as_a_test(traces, tmp_path):
    suite = tmp_path / "incidents"
    suite.mkdir()
    for name, trace in traces.items():
        shutil.copy(trace, suite)
        shutil.copy(EXAMPLES / f"{name}.parquet.expect.jsonl", suite)
    # a second copy of the Xid incident whose reviewed verdict names another machine
    shutil.copy(traces["xid_two_sources"], suite / "changed.parquet")
    (suite / "changed.parquet.expect.jsonl").write_text(
        (EXAMPLES / "xid_two_sources.parquet.expect.jsonl").read_text().replace('["n001"]', '["n009"]'))
    # An install registers the plugin through its entry point; an install older than the entry point needs -p.
    from importlib.metadata import entry_points

    installed = any(e.value == "faultlens.pytest_plugin" for e in entry_points(group="pytest11"))
    load = [] if installed else ["-p", "faultlens.pytest_plugin"]
    out = run_watched([sys.executable, "-m", "pytest", *load, "-p", "no:cacheprovider", "-o", "addopts=", "-q",
                       str(suite)], stall_s=STALL_S, cpu=True, limit_s=280, cwd=tmp_path)
    assert "2 passed" in out.stdout and "1 failed" in out.stdout, out.stdout[-3000:]
    assert "nodes [n009] → [n001]" in out.stdout


def test_the_plugin_is_registered_as_an_entry_point():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"faultlens": "faultlens.pytest_plugin"}


def test_expect_on_a_folder_writes_one_file_per_trace_and_a_quiet_trace_expects_nothing(traces, tmp_path):
    shutil.copy(traces["healthy"], tmp_path)
    wrote = _faultlens("check", "--expect", tmp_path)
    assert wrote.returncode == 0, wrote.stderr
    from faultlens.diagnosis.replay.expect import read_expect

    assert read_expect(tmp_path / "healthy.parquet.expect.jsonl") == []
    assert _faultlens("check", tmp_path).returncode == 0


def test_a_folder_with_traces_but_no_expect_file_says_the_command_that_writes_them(traces, tmp_path):
    shutil.copy(traces["healthy"], tmp_path)
    out = _faultlens("check", tmp_path)
    assert out.returncode == 2
    assert f"no *.expect.jsonl under {tmp_path}" in out.stderr
    assert f"faultlens check --expect {tmp_path / 'healthy.parquet'}" in out.stderr, out.stderr
    # One of two with an expect file: the other is named as not checked, with its command.
    shutil.copy(traces["xid_two_sources"], tmp_path)
    assert _faultlens("check", "--expect", tmp_path / "healthy.parquet").returncode == 0
    out = _faultlens("check", tmp_path)
    assert out.returncode == 0 and "1 of 1 trace(s) as expected" in out.stderr
    assert f"1 trace(s) not checked, having no expect file: write it with\n  faultlens check --expect " \
           f"{tmp_path / 'xid_two_sources.parquet'}" in out.stderr, out.stderr


def test_expect_keeps_an_expect_file_that_exists_unless_forced(traces, tmp_path):
    trace = tmp_path / "incident.parquet"
    shutil.copy(traces["xid_two_sources"], trace)
    expect = tmp_path / "incident.parquet.expect.jsonl"
    reviewed = '{"faultlens_expect": 1, "trace": "incident.parquet", "onset_slack_s": 60}\n'  # a person said: nothing
    expect.write_text(reviewed)
    kept = _faultlens("check", "--expect", trace)
    assert kept.returncode == 2 and expect.read_text() == reviewed
    assert "exists (maybe reviewed by hand): kept" in kept.stderr and "--force replaces it" in kept.stderr
    as_json = _faultlens("check", "--expect", "--json", trace)
    assert as_json.returncode == 2 and json.loads(as_json.stdout) == {"trace": str(trace), "expect": str(expect), "kept": True}
    # Found in a folder: kept with the same note, the folder's other traces written, not an error.
    shutil.copy(traces["healthy"], tmp_path)
    in_folder = _faultlens("check", "--expect", tmp_path)
    assert in_folder.returncode == 0 and expect.read_text() == reviewed and "kept" in in_folder.stderr
    assert (tmp_path / "healthy.parquet.expect.jsonl").exists()
    forced = _faultlens("check", "--expect", "--force", trace)
    assert forced.returncode == 0 and '"action":"evict_reset_gpu"' in expect.read_text()
