"""The history consumer group on the real embedded broker: rows land once, bad records are dead letters."""

from __future__ import annotations

import os
import sys

import orjson
import pytest

from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.history.consumer import history_runner
from faultlens.history.schema import open_history
from faultlens.streams.producer import Producer
from faultlens.streams.reader import read_topic
from tests.progress import run_watched

pytestmark = pytest.mark.broker

T0 = 1_699_920_000.0


def _produce(settings, job: str) -> int:
    diags = [Diagnosis(id=f"{job}-d{i}", job=job, ts=T0 + 10 * i + 3, onset=T0 + 10 * i, fault="gpu_lost",
                       action="evict", nodes=(f"n{i}",)) for i in range(5)]
    cmds = [Command(id=f"{job}-c{i}", job=job, action="evict", issued_at=T0 + 10 * i + 4, expires_at=T0 + 999,
                    nodes=(f"n{i}",), diagnosis_id=f"{job}-d{i}", signature="s") for i in range(5)]
    steps = [Envelope(ts=T0 + i, job=job, node="n0", source="train", kind="step", id=f"{job}-s{i}",
                      data={"rank": 0, "step": i}) for i in range(20)]
    with Producer(settings) as p:
        for d in diags:
            p.send("diagnoses", job.encode(), d.encode())
        for c in cmds:
            p.send("commands", job.encode(), c.encode())
        for e in steps:
            p.send_event(e)
        # not JSON at all: the runner dead-letters it
        p.send("diagnoses", job.encode(), b"\x00garbage")
        # decodes, but its time is infinite: the sink refuses it with a reason
        bad = {**diags[0].to_dict(), "id": f"{job}-inf", "ts": "inf"}
        p.send("diagnoses", job.encode(), orjson.dumps(bad))
        p.flush()
    return len(diags) + len(cmds) + len(steps) + 2


def _rows(conn, job: str) -> tuple[int, int, int, int]:
    q = lambda t: conn.execute(f"SELECT count(*) FROM {t} WHERE job = ?", [job]).fetchone()[0]  # noqa: E731
    return q("diagnoses"), q("commands"), q("events"), q("job_timeline")


def test_consumer_stores_once_and_dead_letters_bad_records(kafka_settings, group_name, tmp_path):
    job = f"hist-{os.getpid()}-{group_name[-6:]}"
    _produce(kafka_settings, job)
    conn = open_history(tmp_path / "h.duckdb", create=True)

    runner, handler = history_runner(kafka_settings, conn, group=group_name)
    stats = runner.run(idle_stop_s=3.0, handle_signals=False)
    assert stats.records_in >= 32
    # 5 diagnoses, 5 commands, 20 step events; timeline: 20 step seconds + 5 onsets + 5 evictions
    assert _rows(conn, job) == (5, 5, 20, 30)
    assert conn.execute("SELECT issued_at - (SELECT ts FROM diagnoses WHERE id = ?) FROM commands WHERE id = ?",
                        [f"{job}-d2", f"{job}-c2"]).fetchone()[0] == pytest.approx(1.0)

    # Re-delivery: the same messages again, and a new group that re-reads the topics from the start.
    _produce(kafka_settings, job)
    runner, _ = history_runner(kafka_settings, conn, group=group_name + "-again")
    runner.run(idle_stop_s=3.0, handle_signals=False)
    assert _rows(conn, job) == (5, 5, 20, 30)
    conn.close()

    dead = [orjson.loads(r.value) for r in read_topic(kafka_settings, "dead-letter", idle_s=1.0)
            if r.key == job.encode()]
    reasons = [d["reason"] for d in dead if d["group"] == group_name]
    assert any(r.startswith("invalid:") for r in reasons)
    assert any(r == "history: ts is not finite: inf" for r in reasons)
    assert handler.rejected >= 1


def test_history_command_consumes_until_idle(kafka_settings, group_name, tmp_path):
    job = f"cli-{os.getpid()}-{group_name[-6:]}"
    _produce(kafka_settings, job)
    db = tmp_path / "cli.duckdb"
    proc = run_watched(
        [sys.executable, "-m", "faultlens", "history", "--bootstrap", kafka_settings.bootstrap, "--db", str(db),
         "--group", group_name, "--idle-stop", "3"],
        stall_s=60, cpu=True, watch=[tmp_path], limit_s=280)  # while it reads, writes or computes (issue 47)
    assert proc.returncode == 0, proc.stderr
    summary = orjson.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["records"] >= 32 and summary["dead_letters"] >= 2
    conn = open_history(db, read_only=True)
    assert _rows(conn, job) == (5, 5, 20, 30)
    conn.close()
