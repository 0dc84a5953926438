"""`faultlens ettr`: the JSON keys docs/design.md §9 names, the papers' figures from the presets, the
pipeline's own measurements and clear errors for bad input."""

from __future__ import annotations

import json

import pytest

from faultlens.cli import main

KEYS = {"ettr", "ettr_monte_carlo", "ettr_ci", "breakdown", "checkpoint_interval_optimal_s", "inputs"}


def _json(capsys, *argv: str) -> dict:
    assert main(["ettr", *argv, "--json", "--runs", "60"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    return json.loads(out[0])


def test_byterobust_preset_json_adds_up(capsys):
    out = _json(capsys, "--preset", "byterobust", "--gpus", "9600", "--days", "90")
    assert KEYS <= set(out)
    lo, hi = out["ettr_ci"]
    assert lo < out["ettr_monte_carlo"] < hi
    lost = sum(v for phases in out["breakdown"].values() for v in phases.values())
    assert lost == pytest.approx(1 - out["ettr"], abs=1e-9)
    assert out["inputs"]["gpus"] == 9600 and out["inputs"]["nodes"] == 1200
    assert out["timeout_only"]["ettr"] < out["ettr"]
    assert out["checkpoint_interval_s"] == pytest.approx(out["checkpoint_interval_optimal_s"])


def test_llama3_json_marks_its_inputs_shows_the_band_and_meta_s_count(capsys):
    out = _json(capsys, "--preset", "llama3", "--gpus", "16384", "--days", "54")
    assert out["inputs"]["sources"] == {"preset": "llama3"}
    band = out["ettr_band"]
    assert band["low"] < band["central"] == out["ettr"] < band["high"]
    marked = out["inputs"]["marked"]
    assert marked["faults.gpu_lost.rate"]["kind"] == "published"
    assert marked["checkpoint_stall_s"]["kind"] == "assumed" and marked["checkpoint_stall_s"]["range"] == [10.0, 60.0]
    # The source's own count beside the expected one, for the source's own job.
    assert out["faults_source_count"]["count"] == 466
    assert out["faults_expected"] == pytest.approx(466, rel=1e-4)
    other = _json(capsys, "--preset", "llama3", "--gpus", "8192", "--days", "54")
    assert other["faults_source_count"] is None and other["inputs"]["marked"]["gpus"]["kind"] == "given"


def test_from_score_uses_the_measured_detection(tmp_path, capsys):
    slow = tmp_path / "slow.jsonl"
    slow.write_text('{"fault": "job_hang", "labels": 2, "detected": 2, "recall": 1.0,'
                    ' "detection_latency_p50_s": 1500.0, "wrong_nodes": 0}\n')
    fast = tmp_path / "fast.jsonl"
    fast.write_text(slow.read_text().replace("1500.0", "40.0"))
    a = _json(capsys, "--from-score", str(slow))
    b = _json(capsys, "--from-score", str(fast))
    assert b["ettr"] > a["ettr"]
    assert b["inputs"]["sources"]["from_score"]["measured"]["job_hang"]["detection_latency_p50_s"] == 40.0
    hang = {f["name"]: f for f in b["inputs"]["faults"]}["job_hang"]
    assert hang["detect_s"] == 40.0 and hang["localise_s"] == 0.0


def test_tables_show_every_measured_class_with_its_samples(tmp_path, capsys):
    score = tmp_path / "score.jsonl"
    score.write_text('{"fault": "nvlink", "labels": 2, "detected": 2, "recall": 1.0, "detection_latency_p50_s": 0.0}\n'
                     '{"fault": "job_hang", "labels": 7, "detected": 7, "recall": 1.0, "detection_latency_p50_s": 80.0}\n')
    assert main(["ettr", "--from-score", str(score), "--runs", "10"]) == 0
    out = capsys.readouterr().out
    assert "measured (from-score)" in out
    assert any("cuda_error" in line and "nvlink" in line and " 2 " in line for line in out.splitlines())
    assert "cuda_error: detection from 2 samples" in out


def test_tables_and_plot(tmp_path, capsys):
    png = tmp_path / "ettr.png"
    assert main(["ettr", "--preset", "llama3", "--days", "10", "--runs", "20", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "ETTR" in out and "what is worth fixing" in out and "framework timeout alone" in out
    assert "(low)" in out and "(high)" in out and "the guesses that move it most" in out
    assert png.stat().st_size > 10_000


@pytest.mark.parametrize("argv, message", [
    (["--gpus", "0"], "must be > 0"),
    (["--days", "-3"], "must be > 0"),
    (["--spares", "-1"], "must be >= 0"),
    (["--gpus", "lots"], "not an integer"),
    (["--gpus", "4096.7"], "not an integer"),
    (["--days", "soon"], "not a number"),
    (["--checkpoint-stall", "nan"], "must be >= 0"),
    (["--preset", "gpt5"], "invalid choice"),
])
def test_bad_flags_are_argparse_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["ettr", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["--days", "1", "--checkpoint-interval", "100000"], "longer than the job"),
    (["--from-score", "/nonexistent/score.jsonl"], "No such file"),
    (["--from-history", "/nonexistent/h.duckdb"], "no such history"),
])
def test_bad_inputs_exit_2_with_one_line(argv, message, capsys):
    assert main(["ettr", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("faultlens ettr:") and message in err[0]


@pytest.mark.parametrize("text, message", [
    ('[faults.job_hang]\ndetect_s = "fast"\n', "faults.job_hang.detect_s must be a number"),
    ('[faults.job_hang]\nloses_work = "no"\n', "faults.job_hang.loses_work must be true or false"),
    ("gpus = 4096.7\n", "gpus must be an integer"),
    ('[recovery]\nrequeue_s = "slow"\n', "recovery.requeue_s must be a number"),
])
def test_bad_config_values_exit_2_with_one_line_naming_file_and_key(tmp_path, capsys, text, message):
    cfg = tmp_path / "job.toml"
    cfg.write_text(text)
    assert main(["ettr", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(cfg) in err[0] and message in err[0] and "Traceback" not in err[0]


@pytest.fixture
def known_history(tmp_path):
    """A day of two machines, a fault each of three classes: rates of ~1 per node-day, far above a fleet's."""
    from faultlens.history.schema import open_history
    from faultlens.history.sink import HistorySink, build_batch
    from tests.history import known

    db = tmp_path / "h.duckdb"
    conn = open_history(db, create=True)
    HistorySink(conn).write(build_batch(known.records(), labels=known.LABELS))
    conn.close()
    return str(db)


def test_a_history_whose_rates_swamp_the_job_is_refused_at_once(known_history, capsys):
    # Issue 49: a 26-minute simulated history measures thousands of faults per node-day; the
    # projection ran for minutes. Now: one line, exit 2, before any projection; and (issue 59) the
    # line says what to do: the history's own scale, the largest job its rates let train, or the
    # preset's rates with the measured detection.
    import re
    from dataclasses import replace

    from faultlens.history.whatif import sources
    from faultlens.history.whatif.closed_form import Infeasible, check_feasible
    from faultlens.history.whatif.presets import PRESETS

    assert main(["ettr", "--from-history", known_history, "--gpus", "400000"]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "WARNING" not in line]
    assert len(err) == 1 and err[0].startswith("faultlens ettr:") and "cannot train" in err[0]
    assert "2 machines over 1 day)" in err[0] and "own scale (--gpus 16)" in err[0]
    assert "--history-detection-only" in err[0] and "--from-score" in err[0]
    largest = int(re.search(r"trains up to --gpus (\d+)", err[0]).group(1))
    s, _ = sources.apply_history(PRESETS["byterobust"](), known_history)
    check_feasible(replace(s, gpus=largest))
    with pytest.raises(Infeasible):
        check_feasible(replace(s, gpus=largest + s.gpus_per_node))


def test_a_history_can_give_its_detection_alone_to_a_fleets_rates(known_history, capsys):
    # 9,600 GPUs: the history's own rates are refused there (above), the preset's are not.
    assert main(["ettr", "--from-history", known_history, "--gpus", "9600"]) == 2
    capsys.readouterr()
    preset = _json(capsys, "--gpus", "9600", "--days", "2")
    out = _json(capsys, "--from-history", known_history, "--history-detection-only", "--gpus", "9600", "--days", "2")
    note = out["inputs"]["sources"]["from_history"]
    assert note["rates"] == "kept" and note["measured"]
    rates = {f["name"]: f["rate"] for f in out["inputs"]["faults"]}
    assert rates == {f["name"]: f["rate"] for f in preset["inputs"]["faults"]}
    marked = out["inputs"]["marked"]
    for name in note["measured"]:
        assert marked[f"faults.{name}.detect_s"]["kind"] == "measured"
        assert marked[f"faults.{name}.rate"]["kind"] != "measured"


def test_negative_rate_in_a_config_is_an_error(tmp_path, capsys):
    cfg = tmp_path / "job.toml"
    cfg.write_text("[faults.nic]\nrate = -0.5\n")
    assert main(["ettr", "--config", str(cfg)]) == 2
    assert "rate must be" in capsys.readouterr().err


def test_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["ettr", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--preset", "--gpus", "--days", "--from-score", "--from-history", "--json", "--plot"):
        assert flag in out
