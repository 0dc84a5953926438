"""`faultlens status` and `faultlens tail JOB` (issue 58): what a job is doing now, read off the
real broker without a consumer group. A real TrainerHook publishes steps, `faultlens run`'s
kind of records (topology, restart, end) and a diagnosis and a command go on the bus; status
folds them into one line per job, tail prints the job's story and ends at its end."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid

import pytest

from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.events.signing import SigningKey
from faultlens.events.topology import Topology
from faultlens.streams.producer import Producer
from faultlens.trainer_hooks.hook import TrainerHook
from tests.progress import run_watched

pytestmark = pytest.mark.broker
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def story(settings, job: str, tmp_path) -> None:
    hook = TrainerHook(job=job, rank=0, node="n000", settings=settings, listen=False, flight_recorder=False)
    hook.publish_topology(Topology.grid(["n000", "n001"], 1, 1, 1, 2))
    for step in range(1, 31):
        hook.step(loss=1.0 / step, step=step)
    hook.close()
    now = time.time()
    with Producer(settings) as p:
        p.send_event(Envelope(ts=now, job=job, node="-", source="job", kind="restart",
                              data={"reason": "user_code", "command_id": None, "nodes_out": [], "nodes_in": [],
                                    "attempt": 1, "resume": "latest", "resume_why": "the newest checkpoint"}))
        d = Diagnosis(job=job, ts=now, onset=now - 1, fault="cuda_error", action="stop_time_diagnosis",
                      nodes=("n001",), ranks=(1,), detail="CUDA error: an illegal memory access")
        p.send("diagnoses", job.encode(), d.encode())
        c = Command(job=job, action="reattempt", issued_at=now, expires_at=now + 60, reason="cuda_error: reattempt")
        p.send("commands", job.encode(), c.signed(SigningKey.generate()).encode())
        p.send_event(Envelope(ts=now + 1, job=job, node="-", source="job", kind="end",
                              data={"reason": "finished", "attempt": 1, "command_id": None, "nodes": ["n000", "n001"]}))
        p.flush()


def faultlens(settings, *argv: str):
    env = {**os.environ, "PYTHONPATH": ROOT}
    return run_watched([sys.executable, "-m", "faultlens", *argv, "--bootstrap", settings.bootstrap], env=env,
                       stall_s=120, cpu=True, limit_s=280)


def test_status_and_tail_tell_a_jobs_story(kafka_settings, tmp_path):
    job = f"view-{uuid.uuid4().hex[:8]}"
    story(kafka_settings, job, tmp_path)

    out = faultlens(kafka_settings, "status", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    [mine] = [s for s in map(json.loads, out.stdout.splitlines()) if s["job"] == job]
    assert mine["state"] == "ended: finished" and mine["attempt"] == 1 and mine["step"] == 30
    assert mine["nodes"] == ["n000", "n001"] and mine["ranks"] == 2
    assert mine["diagnosis"] == "cuda_error -> stop_time_diagnosis n001" and mine["command"].startswith("reattempt (job)")

    out = faultlens(kafka_settings, "tail", job, "--from-start", "--steps-every", "0")
    assert out.returncode == 0, out.stderr[-2000:]  # ended by the job's end, not by a clock
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    whats = [line["what"] for line in lines]
    assert {"topology", "restart", "diagnosis", "command"} <= set(whats) and whats[-1] == "end"
    assert [line["step"] for line in lines if line["what"] == "step"] == list(range(1, 31))
    assert all(line["job"] == job for line in lines)
