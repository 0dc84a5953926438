"""Record → replay → record on the real embedded broker gives back the same rows in the same order."""

from __future__ import annotations

import json
import uuid

import pytest

from faultlens.cli import main
from faultlens.events.trace import iter_trace, read_labels, write_trace
from faultlens.simulator import FaultPlan, SimConfig, simulate
from faultlens.streams.record import collect, record_trace
from faultlens.streams.replay import replay_trace

pytestmark = pytest.mark.broker
# A recording starts once its replay returned (every event acknowledged), and the reader first waits
# for the end offsets it reads at its start (streams/reader.py): half a second of quiet past them ends
# it (3 s of idle time before, four recordings).
IDLE_S = 0.5


def _small_trace(tmp_path, job: str):
    cfg = SimConfig(nodes=2, gpus=2, seed=5, job=job)
    run = simulate(cfg, plan=FaultPlan().fail_at("gpu_lost", node="n001", t=20), duration=150)
    path = tmp_path / "sim.parquet"
    write_trace(path, run.events())
    return path


@pytest.mark.long(25)
def test_replay_then_record_gives_the_trace_back(client_settings, tmp_path):
    job = f"job-rr-{uuid.uuid4().hex[:8]}"
    path = _small_trace(tmp_path, job)
    original = list(iter_trace(path))
    stats = replay_trace(client_settings, path, speed=0, show_progress=False)
    assert stats.events == len(original)

    recorded, rstats = collect(client_settings, job=job, idle_s=IDLE_S)
    assert [e.id for e in recorded] == [e.id for e in original]
    assert recorded == original
    assert rstats.by_topic["jobs"] >= 1 and rstats.duplicates == 0

    # a second replay puts every event on the topics twice; the recording is still the same rows
    first = tmp_path / "rec1.parquet"
    write_trace(first, recorded)
    replay_trace(client_settings, first, speed=0, show_progress=False)
    second = tmp_path / "rec2.parquet"
    stats2 = record_trace(client_settings, second, job=job, idle_s=IDLE_S)
    assert stats2.duplicates == len(original)
    assert list(iter_trace(second)) == list(iter_trace(first))


def test_cli_simulate_publish_record_replay_record(kafka_settings, tmp_path, capsys):
    job = f"job-cli-{uuid.uuid4().hex[:8]}"
    boot = ["--bootstrap", kafka_settings.bootstrap]
    sim_path, rec1, rec2 = tmp_path / "sim.parquet", tmp_path / "r1.parquet", tmp_path / "r2.parquet"
    assert main(["simulate", "--nodes", "2", "--gpus", "2", "--duration", "250", "--faults", "1", "--seed", "9",
                 "--job", job, "--out", str(sim_path), "--publish", "--speed", "0", "--no-progress", *boot]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["published"] == summary["events"] > 0 and summary["labels"] == 1
    assert len(read_labels(sim_path)) == 1

    assert main(["record", "--job", job, "--out", str(rec1), "--idle", str(IDLE_S), "--no-progress", *boot]) == 0
    assert json.loads(capsys.readouterr().out)["events"] == summary["events"]
    assert list(iter_trace(rec1)) == list(iter_trace(sim_path))

    assert main(["replay", str(rec1), "--as-fast-as-possible", "--no-progress", *boot]) == 0
    assert json.loads(capsys.readouterr().out)["events"] == summary["events"]
    assert main(["record", "--job", job, "--out", str(rec2), "--idle", str(IDLE_S), "--no-progress", *boot]) == 0
    capsys.readouterr()
    assert list(iter_trace(rec2)) == list(iter_trace(rec1))


def test_replay_of_a_bad_trace_fails_clearly(kafka_settings, tmp_path, capsys):
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    assert main(["replay", str(bad), "--no-progress", "--bootstrap", kafka_settings.bootstrap]) == 1
    assert "not a Parquet trace" in capsys.readouterr().err
