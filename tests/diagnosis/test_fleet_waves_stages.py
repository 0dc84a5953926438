"""Fleet waves through a real broker (issue 55): an IB switch reboots under two jobs of four
machines each (every machine's port goes down, too few in either job for a wave of its own), with
one machine's Xid 79 inside. Read by 2 node-stage and 2 job-stage members, the two jobs held by
different job-stage members, as a backlog (members in threads) and live (`faultlens diagnose`
processes running before the events arrive): one finding naming the switch, nobody evicted but
the Xid 79 machine, the same as `faultlens analyze`."""

from __future__ import annotations

import itertools
import uuid

import pytest

from bench.testbed.waves import build_fleet
from faultlens.diagnosis.engine.offline import analyze
from faultlens.events import topics
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.trace import trace_order, write_trace
from faultlens.rules_diff import EVICTING
from tests.diagnosis.live_members import run_two_and_two_backlog, run_two_and_two_live
from tests.kafka_fixtures import job_records

pytestmark = pytest.mark.broker

CULPRIT = "n0001"
SWITCH = "wave:ib_switch=0x98039b0300000000"


def final(found) -> list[Diagnosis]:
    """The final form of each diagnosis (by id), leaving out a stream's end (`telemetry_lost`)."""
    return [d for d in {d.id: d for d in found}.values() if d.fault != "telemetry_lost"]


def outcome(found) -> set[tuple]:
    return {(d.job, str(d.fault), str(d.action), d.nodes, d.group, d.count) for d in final(found)}


def apart_tag() -> str:
    """A run tag whose two jobs land on `summaries` partitions 0 and 2 of 3: with 2 job-stage
    members and the range assignor ([0, 1] and [2]), on different members."""
    for _ in itertools.count():
        tag = f"-{uuid.uuid4().hex[:6]}"
        parts = [topics.key_partition(f"fleet-switch_reboot-j{j}{tag}".encode(), 3) for j in range(2)]
        if parts[0] in (0, 1) and parts[1] == 2:
            return tag
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def fleet_trace(tmp_path_factory):
    traces = build_fleet("switch_reboot", jobs=2, per_job=4, per_domain=8, culprit=CULPRIT, duration=240, tag=apart_tag())
    path = tmp_path_factory.mktemp("fleet") / "fleet.parquet"
    events = sorted((e for t in traces for e in t.events), key=trace_order)
    write_trace(path, events)
    return path, traces, outcome(analyze(events))


def live_diagnoses(settings, traces) -> list[Diagnosis]:
    """final() of the jobs' diagnoses, in one read of the topic (each read waits out its idle end)."""
    jobs = {t.job for t in traces}
    return [d for d in final(job_records(settings, "diagnoses", Diagnosis.decode, None, idle_s=1.5)) if d.job in jobs]


def live_outcome(settings, traces) -> set[tuple]:
    return outcome(live_diagnoses(settings, traces))


def assert_same(live: list[Diagnosis], offline: set[tuple]) -> None:
    """live's outcome() is offline's; where not, what each record live has in excess says."""
    extra = [f"{d.job} {d.fault} {d.nodes} x{d.count}: {d.detail}" for d in live if outcome([d]) - offline]
    assert outcome(live) == offline, "\n".join(extra)


def check(found: set[tuple], traces) -> None:
    waves = [o for o in found if (o[4] or "").startswith("wave:")]
    # under the job of its first machine (either: the switch's ports went down in no set order)
    assert [(w[1], w[2], w[3], w[4], w[5]) for w in waves] == [("nic", "alert", (), SWITCH, 8)], found
    assert waves[0][0] in {t.job for t in traces}
    assert {n for o in found if o[2] in EVICTING for n in o[3]} == {CULPRIT}, found


def test_offline_the_switch_is_one_finding_and_only_the_culprit_is_evicted(fleet_trace):
    _, traces, offline = fleet_trace
    check(offline, traces)


@pytest.mark.long(60)
def test_two_and_two_members_read_as_a_backlog_give_the_offline_fleet_wave(own_kafka_settings, fleet_trace):
    settings = own_kafka_settings
    path, traces, offline = fleet_trace
    jobs = run_two_and_two_backlog(settings, path, "fleet")
    # each member read one of the jobs (every member knows every topology: the jobs topic is read whole)
    held = [set(h._partition_of) & {t.job for t in traces} for _, _, h in jobs]
    assert sorted(map(len, held)) == [1, 1], held
    assert live_outcome(settings, traces) == offline


@pytest.mark.e2e
@pytest.mark.long(90)
def test_e2e_two_and_two_diagnose_processes_read_live_give_the_offline_fleet_wave(own_kafka_settings, fleet_trace, tmp_path):
    settings = own_kafka_settings
    path, traces, offline = fleet_trace
    run_two_and_two_live(settings, path, tmp_path, "f")
    assert_same(live_diagnoses(settings, traces), offline)
