"""The fleet memory on the real broker (issue 33): a machine failing in two jobs becomes a lemon, is
drained marked hardware_inspection and never handed out as a spare; its record survives a restart
and a rebalance of the remediation group; a person's resume is honoured and recorded."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import uuid

import pytest

from faultlens.events import topics
from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.signing import SigningKey
from faultlens.events.topology import Topology
from faultlens.history.consumer import history_runner
from faultlens.history.schema import open_history
from faultlens.remediation.actuators.script import ScriptActuator, ScriptConfig
from faultlens.remediation.consumer import DECODERS, RemediationHandler
from faultlens.remediation.decision import PolicyConfig
from faultlens.remediation.fleet import Fleet
from faultlens.remediation.fleet_log import FleetLog, read_fleet
from faultlens.remediation.lemon import LEMON_STATE, LemonConfig
from faultlens.remediation.policy import Policy
from faultlens.remediation.safety import CircuitBreaker, Safety, SafetyConfig
from faultlens.streams.producer import Producer
from faultlens.streams.runner.loop import GroupRunner
from tests.in_process import faultlens_main
from tests.kafka_fixtures import job_records
from tests.progress import run_watched, wait_until

pytestmark = pytest.mark.broker
KEY = SigningKey.generate()


def recording_actuator(path):
    """The script actuator, writing each operation it is asked for to ``path`` (one JSON line)."""
    return ScriptActuator(ScriptConfig(
        f"{sys.executable} -c \"import json,sys; r=json.load(sys.stdin); "
        f"open({str(path)!r}, 'a').write(json.dumps(r) + '\\n'); print('done', r['op'])\"", 20))


def ops(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def policy(jobs, fleet_store, standby=()):
    return Policy(KEY, PolicyConfig(act_on=frozenset(jobs), standby_names=tuple(standby)),
                  Safety(SafetyConfig(max_evictions=100, max_job_share=1.0, breaker_share=1.0), CircuitBreaker(None)),
                  fleet=Fleet(LemonConfig(), fleet_store))


@pytest.fixture
def fleet_log():
    """FleetLog(settings, topic), closed at the test's end: each holds a consumer and a producer,
    whose threads would otherwise go on reconnecting after the broker is gone."""
    made: list[FleetLog] = []

    def make(settings, topic=topics.FLEET):
        made.append(FleetLog(settings, topic))
        return made[-1]

    yield make
    for log in made:
        log.close()


def hw(job, node, ts, fault="gpu_memory"):
    return Diagnosis(job=job, ts=ts, onset=ts, fault=fault, action="evict", nodes=(node,), confidence=0.95,
                     detail=f"Xid 48 double-bit ECC on {node}" if fault == "gpu_memory" else "Xid 79 fallen off the bus")


def publish(settings, topologies, diagnoses):
    with Producer(settings) as p:
        for job, nodes in topologies.items():
            p.send_event(Topology.grid(nodes, 1, 1, 1, len(nodes)).to_event(job, time.time()))
        for d in diagnoses:
            p.send(topics.DIAGNOSES, d.job.encode(), d.encode())
        p.flush()


def run_group(settings, group, handler):
    GroupRunner(settings, group, [topics.DIAGNOSES, topics.JOBS], handler, DECODERS).run(
        idle_stop_s=2.0, handle_signals=False)


def test_lemon_a_machine_failing_in_two_jobs_is_drained_and_the_pool_skips_it(kafka_settings, group_name, tmp_path, fleet_log):
    uid = uuid.uuid4().hex[:6]
    x, spare = f"x-{uid}", f"s-{uid}"
    a, b, c = (f"{j}-{uid}" for j in "abc")
    fleet_topic = topics.FLEET  # the machines' names are this test's own
    now = time.time()
    d_a, d_b, d_c = hw(a, x, now), hw(b, x, now + 60), hw(c, f"c1-{uid}", now + 120, "gpu_lost")
    seen = tmp_path / "ops.jsonl"
    handler = RemediationHandler(policy({a, b, c}, fleet_log(kafka_settings, fleet_topic), standby=(x, spare)),
                                 group=group_name, actuator=recording_actuator(seen))
    # x crashed job a, came back, joined job b and crashed it too
    publish(kafka_settings, {a: [x, f"a1-{uid}"], b: [x, f"b1-{uid}"], c: [f"c0-{uid}", f"c1-{uid}"]}, [d_a, d_b])
    run_group(kafka_settings, group_name, handler)
    drains = [o for o in ops(seen) if o["nodes"] == [x] and o["op"] == "take_out"]
    assert [o["fault"] for o in drains] == ["gpu_memory", "gpu_memory", LEMON_STATE]
    lemon = drains[-1]
    # (the two jobs sit on different partitions: either may be decided second and tip it)
    assert (lemon["diagnosis_id"], lemon["job"]) in {(d_a.id, a), (d_b.id, b)}
    assert f"fault={LEMON_STATE}" in lemon["scheduler_reason"] and f"faultlens nodes show {x}" in lemon["reason"]
    assert d_a.id in lemon["reason"] and d_b.id in lemon["reason"]  # the reason names its record

    # a third job loses a machine: the standby pool hands out the good spare, never the lemon
    publish(kafka_settings, {}, [d_c])
    run_group(kafka_settings, group_name, handler)
    (evict,) = [cmd for cmd in job_records(kafka_settings, topics.COMMANDS, Command.decode, c) if cmd.action == "evict"]
    assert evict.params["replacements"] == [spare]

    records, errors = read_fleet(kafka_settings, fleet_topic)
    assert not errors and records[x].state() == LEMON_STATE
    assert sorted(records[x].lemon["diagnosis_ids"]) == sorted([d_a.id, d_b.id])
    assert sorted(e["job"] for e in records[x].evictions) == [a, b]

    # ... and the history keeps it (table machines)
    conn = open_history(tmp_path / "h.duckdb", create=True)
    runner, _ = history_runner(kafka_settings, conn, group=f"{group_name}-h", topics=(fleet_topic,))
    runner.run(idle_stop_s=2.0, handle_signals=False)
    assert conn.execute("SELECT state, counted, lemon_rule FROM machines WHERE node = ?", [x]).fetchall() == [
        (LEMON_STATE, 2, "repeat:gpu_memory")]


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_lemon_record_survives_a_restart_and_a_rebalance_of_the_remediation_group(kafka_settings, fresh_topic, client, fleet_log):
    kafka_settings = dataclasses.replace(kafka_settings, client=client)
    uid = uuid.uuid4().hex[:6]
    x = f"x-{uid}"
    fleet_topic = fresh_topic(3)
    jobs = [f"{j}-{uid}" for j in "abc"]
    now = time.time()

    first = policy(jobs, fleet_log(kafka_settings, fleet_topic))
    first.decide(hw(jobs[0], x, now), now)  # job a on member one, which then dies
    restarted = policy(jobs, fleet_log(kafka_settings, fleet_topic))
    assert [f["job"] for f in restarted.fleet.record(x).counted()] == [jobs[0]]
    restarted.decide(hw(jobs[1], x, now + 60), now + 60)
    assert restarted.take_followups()[0].nodes == (x,)  # the second failure, in another job: out
    # without the record a restarted member would have seen a first failure only
    assert not policy(jobs, None).fleet.observe_diagnosis(hw(jobs[1], x, now + 60), now + 60)

    y = f"y-{uid}"
    standing = policy(jobs, fleet_log(kafka_settings, fleet_topic))  # running before the others decided
    other = policy(jobs, fleet_log(kafka_settings, fleet_topic))
    other.decide(hw(jobs[0], y, now), now)
    handler = RemediationHandler(standing)
    handler.on_assigned([])  # the group moved job b's partition here
    assert handler.handle([]) == []  # the next batch reads the fleet record first
    assert [f["job"] for f in standing.fleet.record(y).counted()] == [jobs[0]]
    standing.decide(hw(jobs[1], y, now + 60), now + 60)
    assert [d.nodes for d in standing.take_followups()] == [(y,)]


def nodes_cli(*argv):
    """`faultlens nodes ARGV` through main() in this process (tests/in_process.py): a person's
    command, its output and exit status; test_actuator_nodes_cli.py and the first call below run the real one."""
    return faultlens_main("nodes", *argv)


def nodes_process(*argv):
    # Waited for while it prints or computes (tests/progress.py), not a fixed 120 s.
    return run_watched([sys.executable, "-m", "faultlens", "nodes", *argv], stall_s=60, cpu=True, limit_s=280)


def test_lemon_a_persons_resume_is_honoured_and_recorded(kafka_settings, tmp_path, fleet_log):
    uid = uuid.uuid4().hex[:6]
    x, jobs = f"x-{uid}", [f"{j}-{uid}" for j in "abc"]
    now = time.time()
    member = policy(jobs, fleet_log(kafka_settings), standby=(x,))  # the default `fleet` topic
    handler = RemediationHandler(member)
    member.decide(hw(jobs[0], x, now), now)
    member.decide(hw(jobs[1], x, now + 60), now + 60)
    assert x in member.fleet.lemons()

    listed = nodes_process("list", "--json", "--bootstrap", kafka_settings.bootstrap)
    assert listed.returncode == 0, listed.stderr
    row = next(json.loads(line) for line in listed.stdout.splitlines() if json.loads(line)["node"] == x)
    assert (row["state"], row["counted"], row["jobs"], row["lemon_rule"]) == (LEMON_STATE, 2, 2, "repeat:gpu_memory")

    seen = tmp_path / "ops.jsonl"
    script = (f"{sys.executable} -c \"import json,sys; r=json.load(sys.stdin); "
              f"open({str(seen)!r}, 'a').write(json.dumps(r) + '\\n'); print('resumed')\"")
    r = nodes_cli("resume", x, "--by", "alice", "--reason", "GPU swapped", "--bootstrap", kafka_settings.bootstrap,
                  "--actuator", "script", "--actuator-command", script)
    assert r.returncode == 0, r.stderr
    action, recorded = (json.loads(line) for line in r.stdout.splitlines())
    assert (action["op"], action["outcome"]) == ("bring_back", "ok") and [o["op"] for o in ops(seen)] == ["bring_back"]
    assert (recorded["was"], recorded["now"], recorded["by"]) == (LEMON_STATE, "in_service", "alice")

    handler.tick(time.time())  # the running member reads the resume at its next tick
    assert x not in member.fleet.lemons()
    _, cmd = member.decide(hw(jobs[2], f"c1-{uid}", now + 120, "gpu_lost"), now + 120)
    assert cmd.params["replacements"] == [x]  # honoured: a spare again

    shown = nodes_cli("show", x, "--json", "--bootstrap", kafka_settings.bootstrap)
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert record["state"] == "in_service" and record["lemon"] is None
    assert [(res["by"], res["reason"]) for res in record["resumes"]] == [("alice", "GPU swapped")]
    assert len(record["lemons"]) == 1  # the verdict stays on record, lifted by the resume
    text = nodes_cli("show", x, "--bootstrap", kafka_settings.bootstrap).stdout
    assert "resumed by alice" in text and "repeat:gpu_memory" not in text.splitlines()[0]
    missing = nodes_cli("show", f"nobody-{uid}", "--bootstrap", kafka_settings.bootstrap)
    assert missing.returncode == 1 and "no fleet record" in missing.stderr


def test_lemon_a_flood_of_1000_xid_45_lines_on_one_node_makes_no_lemon(own_kafka_settings, group_name, fleet_log):
    """Xid 45 ("preemptive cleanup, due to previous errors") floods a node after a real fault; the
    NVSentinel report of 672 fatal events on 3 nodes in 3 hours (NVIDIA/NVSentinel#1710) is this.
    One real Xid 79 in job a, then 1,000 Xid 45 lines there and 1,000 more in job b: raw kernel
    lines through diagnosis (stage all) into remediation, on a broker of the test's own."""
    import dataclasses
    import threading

    from faultlens.diagnosis.edge.consumer import diagnose_consumer
    from faultlens.diagnosis.engine.core import EngineConfig
    from faultlens.diagnosis.engine.thresholds import shipped
    from faultlens.events.envelope import Envelope

    settings = own_kafka_settings
    x, a, b = "x-flood", "job-a", "job-b"
    t0 = time.time() - 600

    def line(job, ts, text, i):
        return Envelope(ts=ts, job=job, node=x, source="kernel", kind="line", data={"line": text}, id=f"{job}-l{i}")

    xid45 = "[{:.6f}] NVRM: Xid (PCI:0000:3b:00): 45, pid=2316, name=python, Ch 00000008"
    sent = 0
    with Producer(settings) as p:
        for job, start in ((a, t0), (b, t0 + 300)):
            p.send_event(Topology.grid([x, f"{job}-n1", f"{job}-n2", f"{job}-n3"], 1, 1, 1, 4).to_event(job, start))
            sent += 1
            for k in range(4):
                for n in (x, f"{job}-n1", f"{job}-n2", f"{job}-n3"):
                    p.send_event(Envelope(ts=start + k, job=job, node=n, source="heartbeat", kind="beat",
                                          data={"seq": k, "pids": [1], "sources": {"nvml": "ok"}}, id=f"{job}-{n}-b{k}"))
                    sent += 1
        p.send_event(line(a, t0 + 5, "[ 8112.391237] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
                                     "name=<unknown>, GPU has fallen off the bus.", 0))
        sent += 1
        for job, start in ((a, t0 + 5.01), (b, t0 + 305)):
            for i in range(1000):
                p.send_event(line(job, start + i * 0.01, xid45.format(8112.4 + i * 0.01), i + 1))
                sent += 1
        # Every machine beats once more past the wave window: the jobs' own time decides what is held
        # (time the wall clock moved only says the stream stopped and decides no wave candidate).
        for job, start in ((a, t0 + 5.01), (b, t0 + 305)):
            for n in (x, f"{job}-n1", f"{job}-n2", f"{job}-n3"):
                p.send_event(Envelope(ts=start + 999 * 0.01 + 3.0 + 2.0 + 1.0, job=job, node=n, source="heartbeat",
                                      kind="beat", data={"seq": 4, "pids": [1], "sources": {"nvml": "ok"}},
                                      id=f"{job}-{n}-b4"))
                sent += 1
        p.flush()

    # Waves are not this test's subject: a short wave window (Xid 45 is a class that can come in
    # waves, held that long before it is judged) keeps the wait below short.
    thresholds = shipped()
    thresholds = dataclasses.replace(thresholds, wave=dataclasses.replace(thresholds.wave, window_s=3.0))
    runner, diagnose = diagnose_consumer(settings, EngineConfig(grace_s=2.0, thresholds=thresholds), group=f"{group_name}-d")
    worker = threading.Thread(target=runner.run, kwargs={"handle_signals": False}, daemon=True)
    worker.start()
    try:
        wait_until(lambda: runner.stats.records_in >= sent, progress=lambda: runner.stats.records_in, stall_s=60,
                   what=f"diagnosis to read the {sent} records")
        # Ticks past each job's last line (the wall clock moves a quiet job's time after the 2 s
        # grace) and past the wave window that holds a finding of a class that can come in waves
        # (Xid 45 is app_fault: diagnosis/engine/thresholds.toml): anything held is decided. Waited for in
        # event time, not slept for.
        last = {a: t0 + 5.01 + 999 * 0.01, b: t0 + 305 + 999 * 0.01}
        settle = thresholds.wave.window_s + 2.0

        def times() -> tuple:
            return tuple(diagnose.engine.job_time(job) or float("-inf") for job in (a, b))

        wait_until(lambda: all(t >= last[job] + settle for job, t in zip((a, b), times(), strict=True)), progress=times,
                   stall_s=60, what="each job's time to pass its last line by the wave window and 2 s")
    finally:
        runner.stop()
        worker.join(30)
    assert runner.stats.records_in >= sent
    assert diagnose.engine.dedup_stats["sympathetic"] >= 2000  # every Xid 45 line was read and judged an echo
    diagnoses = [d for job in (a, b) for d in job_records(settings, topics.DIAGNOSES, Diagnosis.decode, job)]
    # Both jobs then fall quiet for the wave window: telemetry_lost is about the job's stream, no machine.
    assert {(d.fault, d.nodes) for d in diagnoses if d.fault == "telemetry_lost"} <= {("telemetry_lost", ())}
    machines = [(d.job, d.fault, d.nodes) for d in diagnoses if d.fault != "telemetry_lost"]
    assert machines == [(a, "gpu_lost", (x,))]  # the 2,000 Xid 45: none

    member = policy({a, b}, fleet_log(settings))
    run_group(settings, f"{group_name}-r", RemediationHandler(member))
    record = read_fleet(settings)[0][x]
    assert [f["fault"] for f in record.counted()] == ["gpu_lost"] and record.lemon is None
    assert record.state() == "taken_out"  # evicted for its real fault; a lemon it is not



def test_lemon_two_members_each_deciding_one_job_of_the_machine_find_it_at_the_next_tick(kafka_settings, fresh_topic, fleet_log):
    """Jobs a and b of machine z sit on partitions of two remediation members: each decides one
    failure and, at that moment, knows only its own. The member that reads the other's first
    (its tick) makes the verdict and drains it; the other then sees the lemon, and makes none."""
    uid = uuid.uuid4().hex[:6]
    z, jobs = f"z-{uid}", [f"{j}-{uid}" for j in "ab"]
    fleet_topic = fresh_topic(3)
    one, two = (policy(jobs, fleet_log(kafka_settings, fleet_topic)) for _ in range(2))
    now = time.time()
    crash = [Diagnosis(job=job, ts=now + 60 * i, onset=now + 60 * i, fault="cuda_error", action="stop_time_diagnosis",
                       nodes=(z,), confidence=0.9, detail="illegal memory access, first failing rank on z")
             for i, job in enumerate(jobs)]
    one.decide(crash[0], now)
    two.decide(crash[1], now + 60)
    assert one.take_followups() == [] == two.take_followups()  # neither knew of the other's failure
    handler = RemediationHandler(one)
    handler.tick(now + 61)
    assert [(d.rung, d.nodes, d.params["take_out"]) for d in handler.decisions] == [(LEMON_STATE, (z,), [z])]
    assert one.fleet.record(z).lemon["rule"] == "culprit_jobs"
    two.refresh_fleet(now + 62)
    assert z in two.fleet.lemons() and two.take_followups() == []  # one verdict, one drain
