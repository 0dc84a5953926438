"""Waves through a real broker (issue 55): four shapes of one event under a whole job (an NVLink
fabric reset, a switch reboot, a teardown, a driver reload), each with one machine's Xid 79
inside, read by 2 node-stage and 2 job-stage members, as a backlog (members in threads) and live
(`faultlens diagnose` processes running before the events arrive): per job one wave
naming the shared cause, nobody evicted but the Xid 79 machine, the same as `faultlens analyze`."""

from __future__ import annotations

import uuid

import pytest

from bench.testbed.waves import SHAPES, build
from faultlens.diagnosis.engine.offline import analyze
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.trace import trace_order, write_trace
from faultlens.rules_diff import EVICTING
from tests.diagnosis.live_members import run_two_and_two_backlog, run_two_and_two_live
from tests.kafka_fixtures import job_records

pytestmark = pytest.mark.broker

CULPRIT = "n0005"
CAUSES = {"fabric_reset": "wave:nvlink_domain=nvl-0", "switch_reboot": "wave:ib_switch=0x98039b0300000000",
          "teardown": "wave:nvlink_domain=nvl-0", "driver_reload": "wave:nvlink_domain=nvl-0"}


def outcome(found) -> set[tuple]:
    """The final form of each diagnosis (by id). A live stream that ends is also a job gone quiet
    (`telemetry_lost`, an alert about the pipeline): not what is compared here."""
    latest = {d.id: d for d in found}.values()
    return {(d.job, str(d.fault), str(d.action), d.nodes, d.group, d.count) for d in latest if d.fault != "telemetry_lost"}


def check_live(settings, traces, offline) -> None:
    """Each job's live outcome is its offline one; every job's diagnoses in one read of the topic
    (each read waits out its idle end: one a job was four)."""
    live = outcome(job_records(settings, "diagnoses", Diagnosis.decode, None, idle_s=1.5))
    for t in traces:
        got = {o for o in live if o[0] == t.job}
        assert got == offline[t.job], (t.job, got)


@pytest.fixture(scope="module")
def waves_trace(tmp_path_factory):
    tag = uuid.uuid4().hex[:6]
    traces = [build(s, nodes=16, culprit=CULPRIT, duration=240, job=f"wave-{s}-{tag}") for s in SHAPES]
    path = tmp_path_factory.mktemp("waves") / "waves.parquet"
    write_trace(path, sorted((e for t in traces for e in t.events), key=trace_order))
    offline = {t.job: outcome(analyze(t.events)) for t in traces}
    return path, traces, offline


def test_offline_each_shape_is_one_wave_naming_its_cause_and_only_the_culprit_is_evicted(waves_trace):
    _, traces, offline = waves_trace
    for shape, t in zip(SHAPES, traces, strict=True):
        got = offline[t.job]
        waves = [o for o in got if (o[4] or "").startswith("wave:")]
        assert [(w[4], w[3]) for w in waves] == [(CAUSES[shape], ())], (shape, got)
        assert waves[0][2] == ("none" if shape == "teardown" else "alert")
        assert {n for o in got if o[2] in EVICTING for n in o[3]} == {CULPRIT}, (shape, got)


@pytest.mark.long(60)
def test_two_and_two_members_read_as_a_backlog_give_the_offline_waves(own_kafka_settings, waves_trace):
    settings = own_kafka_settings
    path, traces, offline = waves_trace
    run_two_and_two_backlog(settings, path, "waves")
    check_live(settings, traces, offline)


@pytest.mark.e2e
@pytest.mark.long(90)
def test_e2e_two_and_two_diagnose_processes_read_live_give_the_offline_waves(own_kafka_settings, waves_trace, tmp_path):
    """`faultlens diagnose --stage node` ×2 and `--stage job` ×2, running before the events arrive."""
    settings = own_kafka_settings
    path, traces, offline = waves_trace
    run_two_and_two_live(settings, path, tmp_path, "w")
    check_live(settings, traces, offline)
