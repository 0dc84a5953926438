"""One reader of a number from the environment (events/env_number.py), two policies: an operator's
command stops at start with one line naming the variable and its value (exit 1, no traceback); a
trainer hook and `faultlens stacks` warn and go on with the default. Each policy is checked through
the entry point a user meets: the CLI's exit status and stderr, the hook's log."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import pytest

from faultlens.events.env_number import BadEnvNumber, env_number, env_whole
from faultlens.streams.broker import free_port
from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks import hook as hook_module
from faultlens.trainer_hooks.hook import TrainerHook
from tests.progress import run_watched

STACKS = Path(__file__).resolve().parent / "fixtures" / "stacks" / "pp2_same_collective"


def _faultlens(tmp_path: Path, argv: list[str], **env: str):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAULTLENS_")}
    return run_watched(
        [sys.executable, "-m", "faultlens", *argv],
        env={**clean, "FAULTLENS_HOME": str(tmp_path / "home"), **env},
        stall_s=60,
        cpu=True,
        limit_s=280,
    )


def test_the_two_policies_on_the_same_bad_values(caplog):
    for bad in ("soon", " ", "1,5"):
        with pytest.raises(BadEnvNumber) as raised:
            env_number("FAULTLENS_X_S", 3.0, on_bad="raise", environ={"FAULTLENS_X_S": bad})
        assert raised.value.line == f"FAULTLENS_X_S={bad!r} is not a number"
        assert str(raised.value) == f"faultlens: FAULTLENS_X_S={bad!r} is not a number"
        with caplog.at_level(logging.WARNING):
            assert env_number("FAULTLENS_X_S", 3.0, on_bad="warn", environ={"FAULTLENS_X_S": bad}) == 3.0
        assert f"FAULTLENS_X_S={bad!r} is not a number; using 3" in caplog.text
    # unset or empty is the default under both; a number is itself
    for policy in ("raise", "warn"):
        assert env_number("FAULTLENS_X_S", 3.0, on_bad=policy, environ={}) == 3.0
        assert env_number("FAULTLENS_X_S", 3.0, on_bad=policy, environ={"FAULTLENS_X_S": ""}) == 3.0
        assert env_number("FAULTLENS_X_S", 3.0, on_bad=policy, environ={"FAULTLENS_X_S": " 2.5 "}) == 2.5


def test_at_least_refuses_what_float_reads_but_no_bound_is():
    for bad in ("-1", "nan", "inf"):
        with pytest.raises(BadEnvNumber, match="is not a number of at least 0"):
            env_number("FAULTLENS_X_S", 3.0, on_bad="raise", at_least=0.0, environ={"FAULTLENS_X_S": bad})
    assert env_number("FAULTLENS_X_S", 3.0, on_bad="raise", at_least=0.0, environ={"FAULTLENS_X_S": "0"}) == 0.0
    # without a bound, what a flag of type=float takes (as the CLI flags it gives defaults to)
    assert env_number("FAULTLENS_X_S", 3.0, on_bad="raise", environ={"FAULTLENS_X_S": "-1"}) == -1.0


@pytest.mark.parametrize(
    "argv, variable",
    [
        (["analyze", "t.parquet"], "FAULTLENS_SILENCE_GRACE_S"),  # faultlens/engine_flags.py
        (["remediate"], "FAULTLENS_EVICT_WINDOW_S"),  # faultlens/commands/remediate.py (was a traceback)
        (["remediate"], "FAULTLENS_LEMON_CULPRIT_JOBS"),
        (["demo"], "FAULTLENS_DEMO_SPEED"),  # faultlens/commands/demo.py (was a traceback)
        (["simulate"], "FAULTLENS_SIM_DURATION"),  # faultlens/commands/simulate.py's _env (was a traceback)
    ],
)
def test_an_operator_command_stops_at_start_with_one_line(tmp_path, argv, variable):
    proc = _faultlens(tmp_path, argv, **{variable: "ten"})
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.strip() == f"faultlens: {variable}='ten' is not a number", proc.stderr[-2000:]
    assert proc.stdout == ""


def test_a_count_is_a_whole_number_and_a_bound_may_be_strict(caplog):
    assert env_whole("FAULTLENS_X", 8, on_bad="raise", environ={"FAULTLENS_X": "16"}) == 16
    assert env_whole("FAULTLENS_X", 8, on_bad="raise", environ={"FAULTLENS_X": "1e3"}) == 1000
    assert env_whole("FAULTLENS_X", None, on_bad="raise", environ={}) is None
    # 8.5 nodes is said, not cut to 8 as int(float(...)) would
    with pytest.raises(BadEnvNumber, match=r"FAULTLENS_X='8.5' is not a whole number$"):
        env_whole("FAULTLENS_X", 8, on_bad="raise", environ={"FAULTLENS_X": "8.5"})
    with caplog.at_level(logging.WARNING):
        assert env_whole("FAULTLENS_X", None, on_bad="warn", at_least=0, environ={"FAULTLENS_X": "-1"}) is None
    assert "FAULTLENS_X='-1' is not a whole number of at least 0; using none" in caplog.text
    # above: a bound the value must pass (a number of seconds over 0)
    for bad in ("0", "-1", "inf"):
        with pytest.raises(BadEnvNumber, match="is not a number over 0$"):
            env_number("FAULTLENS_X_S", 3.0, on_bad="raise", above=0.0, environ={"FAULTLENS_X_S": bad})
    assert env_number("FAULTLENS_X_S", 3.0, on_bad="raise", above=0.0, environ={"FAULTLENS_X_S": "0.5"}) == 0.5


def test_a_count_in_an_operator_command_stops_it_at_start(tmp_path):
    proc = _faultlens(tmp_path, ["simulate"], FAULTLENS_SIM_NODES="8.5")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.strip() == "faultlens: FAULTLENS_SIM_NODES='8.5' is not a whole number", proc.stderr[-2000:]


def test_stacks_says_a_bad_value_and_reads_the_dumps_with_the_default(tmp_path):
    proc = _faultlens(
        tmp_path,
        ["stacks", str(STACKS), "--topology", str(STACKS / "topology.json")],
        FAULTLENS_STACKS_HEALTHY_SHARE="half",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "FAULTLENS_STACKS_HEALTHY_SHARE='half' is not a number; using " in proc.stderr
    assert json.loads(proc.stdout)["action"] == "stop_time_diagnosis"


def test_the_trainer_hook_warns_and_keeps_its_close_bound(monkeypatch, caplog):
    monkeypatch.setenv("FAULTLENS_HOOK_CLOSE_S", "-2")
    settings = KafkaSettings(bootstrap=f"127.0.0.1:{free_port()}", client_id="trainer-j-0")
    with caplog.at_level(logging.WARNING):
        hook = TrainerHook(job="j", rank=0, node="n0", settings=settings, listen=False, flight_recorder=False)
    try:
        assert hook.close_s == hook_module.CLOSE_S
        assert "FAULTLENS_HOOK_CLOSE_S='-2' is not a number of at least 0; using 3" in caplog.text
    finally:
        hook.close()
