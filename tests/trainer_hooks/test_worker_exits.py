"""trainer_hooks/worker_exits.py with torch's own ProcessFailure, the node agent's parser and the
real diagnosis engine: what `faultlens run` reports of failed workers is diagnosed, and a rank that
died with no word (os._exit) is blamed, not the peer that then lost its connection (issue 58)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from faultlens.diagnosis.engine import Engine
from faultlens.trainer_hooks.worker_exits import exit_summary, failure_events, sympathetic
from tests.diagnosis.diag_events import T0, ev
from tests.trainer_hooks.test_torchrun_faultlens_run_broker import ROOT

pytest.importorskip("torch")

PEER_LOST = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:26006: "
             "Connection reset by peer. This is typically caused by a remote worker hanging")


def recorded(tmp_path, name: str, code: str) -> str:
    """The error file a real worker process leaves: the hook's excepthook, an uncaught exception."""
    path = tmp_path / f"{name}.json"
    env = {**os.environ, "TORCHELASTIC_ERROR_FILE": str(path), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", "from faultlens.trainer_hooks.worker_exits import record_uncaught\n"
                          f"record_uncaught()\n{code}"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" in out.stderr  # still printed as before
    return str(path)


def failure(local_rank: int, exitcode: int, error_file: str = "<N/A>"):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    return ProcessFailure(local_rank=local_rank, pid=1000 + local_rank, exitcode=exitcode, error_file=error_file)


def diagnose(events) -> list:
    engine = Engine()
    placement = ev(0, "-", "job", "topology", tp=1, pp=1, dp=2,
                   ranks=[{"rank": r, "node": "n000", "tp": 0, "pp": 0, "dp": r} for r in (0, 1)])
    return [d for e in [placement, *events] for d in engine.process(e)] + engine.flush()


def test_a_recorded_exception_is_reported_and_diagnosed(tmp_path):
    cuda = recorded(tmp_path, "r0", "raise RuntimeError('CUDA error: an illegal memory access was encountered')")
    failures = {0: failure(0, 1, cuda)}
    assert exit_summary(0, failures[0]) == {
        "rank": 0, "local_rank": 0, "pid": 1000, "exit_code": 1, "signal": None,
        "error": "RuntimeError: CUDA error: an illegal memory access was encountered"}
    events = failure_events("job-t", "n000", failures, now=T0 + 10)
    assert {e.node for e in events} == {"n000"} and {e.data.get("rank") for e in events} == {0}
    [d] = [d for d in diagnose(events) if d.fault == "cuda_error"]
    assert d.nodes == ("n000",)


def test_a_rank_that_died_with_no_word_is_blamed_not_the_peer_that_lost_it(tmp_path):
    lost = recorded(tmp_path, "r0", f"raise RuntimeError({PEER_LOST!r})")
    # rank 0 lost its peer (torch then stopped it: SIGTERM); rank 1 left by os._exit(1), no error file
    failures = {0: failure(0, -15, lost), 1: failure(1, 1)}
    assert sympathetic(failures[0]) and not sympathetic(failures[1])
    events = failure_events("job-t", "n000", failures, now=T0 + 10)
    assert events[0].kind == "worker_failed" and events[0].data["rank"] == 1 and events[0].data["wordless"] is True
    assert exit_summary(0, failures[0])["signal"] == "SIGTERM"
    blamed = [d for d in diagnose(events) if d.ranks]
    assert blamed and all(d.ranks == (1,) for d in blamed), blamed
    assert "no error of its own" in blamed[0].detail
    # Without the launcher's mark (a node agent reading torchrun's log) the rule is as it was.
    plain = [e for e in events if not e.data.get("wordless")]
    assert [d.ranks for d in diagnose(plain) if d.ranks] == [(0,)]
