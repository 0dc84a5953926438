"""A fleet wave heard by every remediation member (issue 55), through a real broker: an IB switch
reboots under two jobs of four machines (too few in either job for a wave of its own), with one
machine's Xid 79 inside; after the wave, one healthy machine of each job loses its port twice more
(a straggler that diagnosis judges alone: a `nic` eviction of its own, 150 s after the switch).

Two node-stage and two job-stage diagnosis members read the trace as a backlog, the two jobs on
different job-stage members; two remediation members, running before the diagnoses come and acting
on every job, hold one job each. The fleet wave is written once under its owner's job and once under
the other job (by the member holding it), so each remediation member hears it: only the Xid 79
machine is evicted, both stragglers are recorded with rung `wave`, and the finding is decided once.
Before, the member of the job that did not own the wave evicted its straggler."""

from __future__ import annotations

import threading
import uuid

import pytest

from bench.testbed.backlog_split import start_members
from bench.testbed.waves import WAVE_AT, _kmsg, build_fleet
from faultlens.diagnosis.engine.offline import analyze
from faultlens.events import topics
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import decode
from faultlens.events.signing import SigningKey
from faultlens.events.trace import trace_order, write_trace
from faultlens.remediation.consumer import DECODERS, RemediationHandler, prime_topologies
from faultlens.remediation.decision import PolicyConfig
from faultlens.remediation.policy import Policy
from faultlens.remediation.safety import CircuitBreaker, Safety, SafetyConfig
from faultlens.rules_diff import EVICTING
from faultlens.streams.replay import replay_trace
from faultlens.streams.runner.loop import GroupRunner
from tests.diagnosis.live_members import finish_stages, start_job_members
from tests.diagnosis.test_fleet_waves_stages import apart_tag
from tests.kafka_fixtures import job_records, wait_for_records
from tests.progress import wait_until

pytestmark = pytest.mark.broker

CULPRIT = "n0001"
STRAGGLERS = ("n0002", "n0006")  # one healthy machine of each job


def traces_with_stragglers(tag: str):
    traces = build_fleet("switch_reboot", jobs=2, per_job=4, per_domain=8, culprit=CULPRIT, duration=400, tag=tag)
    for trace, node in zip(traces, STRAGGLERS, strict=True):
        for k in range(2):
            at = WAVE_AT + 200 + 10 * k
            trace.add(at, node, "kernel", "line", {"line": f"{_kmsg(at)} mlx5_core 0000:5e:00.0 ibp94s0: Link down"})
            trace.add(at + 3, node, "kernel", "line", {"line": f"{_kmsg(at + 3)} mlx5_core 0000:5e:00.0 ibp94s0: Link up"})
    return traces, sorted((e for t in traces for e in t.events), key=trace_order)


def remediation_member(settings, group: str):
    policy = Policy(SigningKey.generate(), PolicyConfig(act_on_all=True),
                    Safety(SafetyConfig(max_evictions=100, max_job_share=1.0, breaker_share=1.0), CircuitBreaker(None)))
    handler = RemediationHandler(policy)
    prime_topologies(handler, settings)  # as remediate_consumer does: every job's machines
    runner = GroupRunner(settings, group, [topics.DIAGNOSES, topics.JOBS], handler, DECODERS)
    thread = threading.Thread(target=runner.run, kwargs={"handle_signals": False}, daemon=True)
    thread.start()
    return thread, runner, handler


def held_diagnoses(runner) -> frozenset[int]:
    consumer = runner.consumer
    try:
        return frozenset(tp.partition for tp in consumer.assignment() if tp.topic == topics.DIAGNOSES) if consumer else frozenset()
    except Exception:  # noqa: BLE001 - the consumer is being (re)assigned: asked again
        return frozenset()


@pytest.mark.long(90)
def test_two_remediation_members_each_hear_the_fleet_wave_and_evict_only_the_culprit(own_kafka_settings, tmp_path):
    settings = own_kafka_settings
    traces, events = traces_with_stragglers(apart_tag())
    jobs = [t.job for t in traces]
    offline = analyze(events)
    [wave] = [d for d in offline if (d.group or "").startswith("wave:")]
    # The stragglers are judged alone: evictions of healthy machines, but for the wave's pause.
    assert {(d.job, d.nodes) for d in offline if d.fault == "nic" and d.action in EVICTING} == set(
        zip(jobs, ((n,) for n in STRAGGLERS), strict=True))
    path = tmp_path / "fleet.parquet"
    write_trace(path, events)
    replay_trace(settings, path, speed=0, show_progress=False)

    group = f"wr-rem-{uuid.uuid4().hex[:6]}"
    members = [remediation_member(settings, group) for _ in range(2)]
    try:
        # the range assignor gives one member partitions [0, 1], the other [2]: one job each
        wait_until(lambda: {held_diagnoses(r) for _, r, _ in members} == {frozenset({0, 1}), frozenset({2})},
                   progress=lambda: tuple(r.stats.records_in for _, r, _ in members), stall_s=60,
                   what="two remediation members holding the diagnoses partitions")
        tag = uuid.uuid4().hex[:6]
        nodes = start_members(settings, "node", 2, f"wr-node-{tag}", idle_s=6)
        wait_for_records(settings, topics.SUMMARIES, decode, "-", bool, timeout_s=60, progress=len)
        diagnosis = start_job_members(settings, 2, f"wr-job-{tag}")
        # stopped once they read their input to its end, not at their idle stops (6 s, 25 s: the backstops)
        finish_stages(settings, nodes, f"wr-node-{tag}", diagnosis)
        written = [d for job in jobs for d in job_records(settings, "diagnoses", Diagnosis.decode, job, idle_s=1.5)]
        # one finding (every copy the same id), written under each job: its owner's and the other's
        assert {d.id for d in written if d.group == wave.group} == {wave.id}

        def decided():
            return sum(len(h.decisions) for _, _, h in members)

        def stragglers_in():
            return all(any(d.nodes == (n,) and d.fault == "nic" for _, _, h in members for d in h.decisions)
                       for n in STRAGGLERS)

        wait_until(stragglers_in, progress=decided, stall_s=60, what="both stragglers decided")
    finally:
        for _, runner, _ in members:
            runner.stop()
        for thread, _, _ in members:
            thread.join(60)
    handlers = [h for _, _, h in members]
    # each member decided for one job only (the wave it heard under its own job is not decided there)
    assert sorted(sorted({d.job for d in h.decisions if d.diagnosis_id != wave.id}) for h in handlers) == sorted(
        [[j] for j in jobs])
    decisions = [d for h in handlers for d in h.decisions]
    assert [d.job for d in decisions if d.diagnosis_id == wave.id] == [wave.job]  # decided once, by its job's member
    assert {n for d in decisions if d.sent and d.action in EVICTING for n in d.nodes} == {CULPRIT}
    stragglers = [d for d in decisions if d.fault == "nic" and d.nodes]
    assert {(d.nodes, d.rung, d.sent) for d in stragglers} == {((n,), "wave", False) for n in STRAGGLERS}
