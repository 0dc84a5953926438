"""A backlog read live gives what `faultlens analyze` gives on the same trace (issue 11, event time).

The whole trace is on the topics before `faultlens diagnose` starts, as after an outage: each
topic and partition is read at its own speed, and the consumer must still judge every job on
event time. No valid event may become a dead letter, and the acting diagnoses must match.

On a broker of its own: the session broker holds every earlier test's simulated jobs, stamped on
the same simulated clock and named on the same machines (n000...), which a fresh group reads
from the start beside this one. No fleet runs two jobs on one machine at once, and their clocks,
waves and machine memories are another test's input (a job_hang eviction of n001 was seen here
once, on the session broker under load 3-11; this job's events alone did not give it, with the wall
clock jumping 2-400 s anywhere in them or its restarts' topologies read up to 1,000 s late).
"""

from __future__ import annotations

import json
import uuid

import pytest

from faultlens.cli import main
from faultlens.diagnosis.replay.scoring import is_scored
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.streams.reader import read_topic
from faultlens.streams.replay import replay_trace
from tests.diagnosis.sim_replay import acting, offline_trace
from tests.kafka_fixtures import job_records

pytestmark = pytest.mark.broker


def test_a_backlog_read_after_the_fact_gives_the_offline_answer(own_kafka_settings, group_name, tmp_path, capsys):
    kafka_settings = own_kafka_settings
    job = f"backlog-{uuid.uuid4().hex[:8]}"
    path, offline, _ = offline_trace(tmp_path, job)
    assert {d.fault for d in offline if is_scored(d)} >= {"gpu_lost", "nic", "job_hang"}

    replay_trace(kafka_settings, path, speed=0, show_progress=False)
    assert main(["diagnose", "--bootstrap", kafka_settings.bootstrap, "--group", group_name, "--idle-stop", "5"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    live = job_records(kafka_settings, "diagnoses", Diagnosis.decode, job, idle_s=1.5)
    assert acting(live) == acting(offline)
    assert summary["late"] == 0
    assert not [d for d in live if d.fault == "clock_skew"]  # a burst of old events is no bad clock

    dead = [json.loads(m.value) for m in read_topic(kafka_settings, "dead-letter", idle_s=1.5)]
    assert not [d for d in dead if d.get("group") == group_name and job in (d.get("value") or "")]
