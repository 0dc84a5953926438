"""`faultlens run` fails fast where torchrun does (issue 58): a missing script is one line and exit
2 before any worker; every rank exiting 2 at start (bad arguments) ends the job as torchrun would,
without waiting --crash-wait for a verdict nobody can give; a typo in an option prints `run`'s own
short usage. Real processes, no broker (nothing listens at the address given)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from faultlens.events.signing import write_key_pair
from faultlens.streams.broker import free_port
from tests.progress import run_watched
from tests.trainer_hooks.test_torchrun_faultlens_run_broker import ROOT

pytestmark = pytest.mark.skipif(__import__("importlib").util.find_spec("torch") is None, reason="needs torch")

STALL_S = 60.0  # printed nothing for this long: waiting (a crash wait), not starting


def faultlens_run(tmp_path, *argv: str):
    _, public = write_key_pair(tmp_path / "keys")
    env = {**os.environ, "FAULTLENS_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    return run_watched([sys.executable, "-m", "faultlens", "run", "--job", "ff", "--bootstrap",
                        f"127.0.0.1:{free_port()}", "--verify-key", str(public), *argv],
                       env=env, cwd=ROOT, stall_s=STALL_S, limit_s=240)


def test_torchrun_missing_script_is_one_line_and_exit_2(tmp_path):
    out = faultlens_run(tmp_path, "--standalone", "--nproc-per-node", "1", str(tmp_path / "trian.py"))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"faultlens run: training script '{tmp_path / 'trian.py'}': no such file"]


def test_torchrun_every_rank_exiting_2_at_start_ends_the_job_without_a_crash_wait(tmp_path):
    # --crash-wait 600: a wait for a verdict would print nothing for ten minutes (a stall, above)
    out = faultlens_run(tmp_path, "--crash-wait", "600", "--standalone", "--nproc-per-node", "2",
                        "--max-restarts", "0", "--monitor-interval", "0.2", "-m", "tests.trainer_hooks.bad_args_worker")
    assert out.returncode == 1, out.stderr[-2000:]
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    crash = next(line for line in lines if line.get("event") == "crash")
    assert crash["exit_codes"] == [2] and crash["crash_wait"] == 0
    assert lines[-1]["event"] == "end" and lines[-1]["reason"] == "gave_up"


def test_torchrun_option_typo_prints_runs_own_short_usage(tmp_path):
    out = faultlens_run(tmp_path, "--standalone", "--nprocs-per-node", "2", "train.py")
    assert out.returncode == 2
    err = out.stderr.strip().splitlines()
    assert err[-1] == "faultlens run: error: unrecognized arguments: --nprocs-per-node" and len(err) <= 3
    assert err[0].startswith("usage: faultlens run [faultlens options]")
