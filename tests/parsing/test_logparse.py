"""Shared parsing glue: parser_for, guess_source, to_envelope, LineEventParser, and `faultlens parse`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.testbed import log_samples as S
from faultlens.events.envelope import Envelope, InvalidEvent, decode, encode
from faultlens.parsing.kernel_log import KernelLogParser
from faultlens.parsing.line import ParsedLine, clean_line
from faultlens.parsing.registry import LineEventParser, guess_source, parser_for, to_envelope
from faultlens.parsing.trainer_log import TrainerLogParser

TS = 1795342272.0


def test_parser_for_sources_and_aliases():
    assert isinstance(parser_for("kernel"), KernelLogParser)
    assert isinstance(parser_for("nccl"), TrainerLogParser)
    assert isinstance(parser_for("trainer"), TrainerLogParser)
    with pytest.raises(ValueError, match="no log parser"):
        parser_for("gpu")


def test_guess_source():
    assert guess_source(S.FALLEN_MULTILINE + [S.OOM_KILL, S.MLX_LINK_DOWN]) == "kernel"
    assert guess_source(S.TRACEBACK_USER + [S.WATCHDOG_NEW, S.NCCL_WARN_IB]) == "nccl"
    assert guess_source(S.KERNEL_BENIGN) == "kernel"


def test_clean_line():
    assert clean_line("ok line\n") == "ok line"
    assert clean_line("one bad\x07 byte") == "one bad byte"
    assert clean_line("\x00\x01\x02\x03") is None
    assert clean_line(b"NVRM: bytes \xff") == "NVRM: bytes "
    assert clean_line(None) is None


def test_to_envelope_round_trips_through_the_wire_format():
    parsed = KernelLogParser().feed(S.XID_95)[0]
    env = to_envelope(parsed, job="j1", node="n001", ts=TS, event_id="raw-1.0")
    back = decode(encode(env))
    assert (back.source, back.kind, back.id, back.job, back.node, back.ts) == ("kernel", "xid", "raw-1.0", "j1", "n001", TS)
    assert back.data["xid"] == 95 and back.data["fault"] == "gpu_memory"


def test_to_envelope_rejects_a_bad_clock():
    parsed = ParsedLine("kernel", "xid", {"line": "x", "fault": "unknown", "action": "none", "severity": "info"})
    with pytest.raises(InvalidEvent):
        to_envelope(parsed, job="j", node="n", ts=12.0, event_id="x")


def _line(i: int, line: str, *, node: str = "n001", source: str = "kernel") -> Envelope:
    return Envelope(ts=TS + i, job="j1", node=node, source=source, kind="line", data={"line": line}, id=f"raw{node}{i}")


def test_line_event_parser_parses_lines_and_passes_other_events_through():
    lp = LineEventParser()
    other = Envelope(ts=TS, job="j1", node="n001", source="gpu", kind="sample", data={"gpus": []})
    assert lp.parse(other) == [other]
    assert lp.parse(_line(0, S.KERNEL_BENIGN[0])) == []
    out = lp.parse(_line(1, S.XID_48))
    assert [(e.kind, e.id, e.ts, e.node, e.job) for e in out] == [("xid", "rawn0011.0", TS + 1, "n001", "j1")]


def test_line_event_parser_keeps_multiline_state_per_node():
    lp = LineEventParser()
    a = [_line(i, line, node="n001", source="nccl") for i, line in enumerate(S.TRACEBACK_USER)]
    b = [_line(i, line, node="n002", source="nccl") for i, line in enumerate(S.TRACEBACK_USER)]
    out = []
    for x, y in zip(a, b, strict=True):
        out += lp.parse(x) + lp.parse(y)
    assert sorted(e.node for e in out) == ["n001", "n002"]
    assert all(e.kind == "exception" and e.data["rank"] == 3 for e in out)


def test_line_event_parser_flush_returns_open_records():
    lp = LineEventParser()
    for i, line in enumerate(S.TRACEBACK_TRUNCATED):
        assert lp.parse(_line(i, line, source="nccl")) == []
    out = lp.flush()
    assert len(out) == 1 and out[0].data["truncated"] and out[0].id == "rawn0011.f0"


def test_line_event_parser_rejects_a_line_event_without_a_line():
    lp = LineEventParser()
    bad = Envelope(ts=TS, job="j", node="n", source="kernel", kind="line", data={"text": 3})
    with pytest.raises(InvalidEvent, match="data.line"):
        lp.parse(bad)


def test_redelivered_line_gives_the_same_ids():
    first = LineEventParser().parse(_line(5, S.XID_13))
    again = LineEventParser().parse(_line(5, S.XID_13))
    assert [e.id for e in first] == [e.id for e in again]


# -- the command ----------------------------------------------------------------------------
def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "FAULTLENS_NODE": "node-x"}
    env.pop("FAULTLENS_JOB", None)
    return subprocess.run([sys.executable, "-m", "faultlens", "parse", *args], input=stdin, capture_output=True, env=env, timeout=60)


def test_cli_parse_kernel_file(tmp_path):
    log = tmp_path / "kern.log"
    lines = S.KERNEL_BENIGN + S.FALLEN_MULTILINE + [S.XID_13, S.MLX_LINK_DOWN]
    log.write_bytes(("\n".join(lines) + "\n").encode() + b"\x00\x01\x02\x03\xff\xfe\x00\n")
    os.utime(log, (TS, TS))
    r = _cli(str(log), "--job", "llm-7b")
    assert r.returncode == 0, r.stderr
    events = [json.loads(x) for x in r.stdout.splitlines()]
    assert [e["kind"] for e in events] == ["gpu_lost", "xid", "link_down"]
    assert all(e["job"] == "llm-7b" and e["node"] == "node-x" and e["source"] == "kernel" for e in events)
    assert events[0]["ts"] == TS  # monotonic only: the file's mtime
    assert events[1]["ts"] == 1795342272.0  # dmesg -T stamp on the Xid 13 line
    assert all({"fault", "action"} <= e["data"].keys() for e in events)
    assert b"recognised" in r.stderr and b"1 garbled" in r.stderr


def test_cli_parse_stdin_guesses_trainer():
    r = _cli("-", stdin=("\n".join(S.TRACEBACK_USER + [S.WATCHDOG_OLD]) + "\n").encode())
    assert r.returncode == 0, r.stderr
    kinds = [json.loads(x)["kind"] for x in r.stdout.splitlines()]
    assert kinds == ["exception", "nccl_timeout"]
    assert b"source nccl" in r.stderr


def test_cli_parse_trainer_alias_env_job_and_valid_envelopes(tmp_path):
    log = tmp_path / "rank3.log"
    log.write_text("\n".join([S.WATCHDOG_NEW, S.LAST_WORK, *S.TRAINER_BENIGN, *S.TRACEBACK_TRUNCATED]) + "\n")
    env = {**os.environ, "FAULTLENS_NODE": "node-y", "FAULTLENS_JOB": "job-from-env"}
    r = subprocess.run([sys.executable, "-m", "faultlens", "parse", str(log), "--source", "trainer"], capture_output=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    events = [decode(x) for x in r.stdout.splitlines()]  # each line is a valid envelope
    assert [(e.kind, e.job, e.node, e.source) for e in events] == [
        ("nccl_timeout", "job-from-env", "node-y", "nccl"),
        ("nccl_timeout", "job-from-env", "node-y", "nccl"),
        ("exception", "job-from-env", "node-y", "nccl"),  # the truncated traceback, closed at the end
    ]
    assert events[1].data["last_completed"] == 1234
    assert len({e.id for e in events}) == 3


def test_cli_parse_missing_file_is_a_clear_error(tmp_path):
    r = _cli(str(tmp_path / "nope.log"))
    assert r.returncode == 1
    assert b"cannot read" in r.stderr and r.stdout == b""
