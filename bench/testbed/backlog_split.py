"""Many jobs read as one backlog by split stages through a real broker, against `faultlens analyze`
(issue 32): the test bed of tests/diagnosis/test_silence_backlog.py and bench/bench_silence_backlog.py.

Cases are jobs of several shapes: the hand-written foreign traces (tests/fixtures/foreign/, each
under several seeds of its own jitter and beat phases) and simulated jobs with an implicit fault.
All of them go into one trace, replayed into the broker before any node-stage member starts (a
backlog); N node-stage and M job-stage members then read it. The job-stage members run with a
short wall-clock grace and stay up well past the end of the data, so the wall clock moves every
job's time after its stream ends, as on a live deployment whose job ended: what issue 32 found
evicting healthy machines.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.testbed import foreign
from bench.testbed.topic_reads import job_records, wait_for_records
from faultlens.diagnosis.edge.consumer import diagnose_consumer
from faultlens.diagnosis.engine.core import EngineConfig
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.replay.scoring import EVICTING, is_scored
from faultlens.events import topics
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope, decode
from faultlens.events.trace import trace_order, write_trace
from faultlens.simulator.config import SimConfig
from faultlens.simulator.plan import FaultPlan
from faultlens.simulator.run import simulate
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Producer
from faultlens.streams.replay import replay_trace

# Simulated shapes: (nodes, gpus per node, plan), an implicit fault and an explicit one.
SIM_SHAPES = {
    "sim-hang": (8, 4, FaultPlan().fail_at("job_hang", node="n003", t=240)),
    "sim-slow": (12, 4, FaultPlan().fail_at("fail_slow", node="n005", t=200).fail_at("gpu_lost", node="n009", t=420)),
}
# Hand-written cases with the most varied liveness: beats phased over 10 s, an agent that dies, a
# job whose agents are stopped one by one after it ended.
FOREIGN_SHAPES = ("hang_16x8_phased", "dead_agent", "hang_same_step", "healthy", "job_ends_staggered")
# What the broker tests read (the bench reads them all): the phased hang, the dead agent, a simulated hang.
TEST_SHAPES = ("hang_16x8_phased", "dead_agent", "sim-hang")


def acting(diagnoses) -> set[tuple]:
    """What a live consumer must agree with `faultlens analyze` on: each scored diagnosis's fault,
    nodes, action and group."""
    return {(d.fault, d.nodes, d.action, d.group) for d in diagnoses if is_scored(d)}


@dataclass
class Case:
    name: str
    job: str
    events: list[Envelope]
    culprits: set[str]
    offline: list[Diagnosis] = field(default_factory=list)


@dataclass
class Outcome:
    case: Case
    live: list[Diagnosis]

    @property
    def missing(self) -> set[tuple]:
        return acting(self.case.offline) - acting(self.live)

    @property
    def extra(self) -> set[tuple]:
        return acting(self.live) - acting(self.case.offline)

    @property
    def extra_details(self) -> list[str]:
        """What each extra acting diagnosis said (a failure must explain itself from CI's log)."""
        extra = self.extra
        return [f"{d.fault} {d.nodes} {d.action}: {d.detail}" for d in self.live
                if any(d.fault == e[0] and tuple(d.nodes) == e[1] for e in extra)]

    @property
    def healthy_evicted(self) -> set[str]:
        return {n for d in self.live if d.action in EVICTING for n in d.nodes} - self.case.culprits


def foreign_case(name: str, seed: int) -> Case:
    trace = foreign.load(name, seed=seed)
    culprits = {n for label in trace.labels for n in label.get("nodes") or ()}
    return Case(f"{name}#{seed}", trace.job, trace.events, culprits)


def sim_case(shape: str, seed: int) -> Case:
    n, gpus, plan = SIM_SHAPES[shape]
    job = f"{shape}-{seed}-{uuid.uuid4().hex[:4]}"
    run = simulate(SimConfig(nodes=n, gpus=gpus, seed=seed, job=job), plan)
    events = list(run.events())
    return Case(f"{shape}#{seed}", job, events, {n for label in run.labels for n in label.get("nodes") or ()})


def cases(seeds: range, shapes: tuple[str, ...] = (*FOREIGN_SHAPES, *SIM_SHAPES)) -> list[Case]:
    out = [sim_case(s, seed) if s in SIM_SHAPES else foreign_case(s, seed) for seed in seeds for s in shapes]
    for c in out:
        c.offline = analyze(c.events)
    return out


def start_members(settings: KafkaSettings, stage: str, n: int, group: str, idle_s: float,
                  config: EngineConfig | None = None) -> list:
    """``n`` members of one stage's group, each in its own thread, until each is idle."""
    members = [diagnose_consumer(settings, config, stage=stage, group=group) for _ in range(n)]
    threads = [threading.Thread(target=r.run, kwargs={"idle_stop_s": idle_s, "handle_signals": False}, daemon=True)
               for r, _ in members]
    for t in threads:
        t.start()
    return [(t, r, h) for t, (r, h) in zip(threads, members, strict=True)]


def finish_members(settings: KafkaSettings, members, timeout_s: float = 120.0, *, together: bool = False) -> None:
    """Wait for each member to stop, then write what its handler still held. ``together``: once the
    first has stopped idle, stop the rest once each read its partitions to their end (each leaving
    made the others rebalance, take its partitions over, rebuild them and wait out their idle time
    again: 3 job-stage members took three times as long). Stopped so, a member's input ended as the
    first one's did and it judges its quiet jobs' ends (the runner's input_ended); stopped at once
    (``stop()``), a starved one had not yet and a job's end went unnamed (CI, bf2e7fa5)."""
    if together:
        deadline = time.monotonic() + timeout_s
        while all(t.is_alive() for t, _, _ in members) and time.monotonic() < deadline:
            time.sleep(0.2)
        for _, r, _ in members:
            r.stop_when_drained()
    with Producer(settings) as producer:
        for t, _, h in members:
            t.join(timeout_s)
            if t.is_alive():
                raise TimeoutError("a stage member did not stop")
            producer.send_all(h.flush())
        producer.flush()


def run_backlog(settings: KafkaSettings, all_cases: list[Case], tmp: Path, *, node_members: int = 2,
                job_members: int = 2, grace_s: float = 5.0, after_end_s: float = 50.0,
                timeout_s: float = 600.0, wall_rate: float = 1.0,
                finish_nodes: Callable[[KafkaSettings, list, str], None] | None = None,
                replayed: Callable[[], object] | None = None) -> list[Outcome]:
    """Every case as one backlog through split stages; the job stage stays up ``after_end_s`` of
    wall time past its last record and past the node stage's end, its wall clock moving quiet jobs
    after ``grace_s``, by ``wall_rate`` event seconds a wall second (EngineConfig.wall_rate).
    ``finish_nodes(settings, members, group)`` ends the node stage (default: finish_members, at its 6 s idle stop; the
    tests stop it once its group committed the telemetry to the end). ``replayed()`` is called once the
    backlog is in, before any member starts (a test that starves the members starts starving them there)."""
    path = tmp / f"backlog-{uuid.uuid4().hex[:6]}.parquet"
    write_trace(path, sorted((e for c in all_cases for e in c.events), key=trace_order))
    tag = uuid.uuid4().hex[:6]
    config = EngineConfig(grace_s=grace_s, wall_rate=wall_rate)
    replay_trace(settings, path, speed=0, show_progress=False)
    if replayed is not None:
        replayed()
    node_group = f"silence-node-{tag}"
    nodes = start_members(settings, "node", node_members, node_group, 6.0, config)
    # The job stage starts once a node-stage member has said its first word: its idle stop counts
    # from its own join, and started before the replay it waited out the replay and the node
    # stage's join with no input, which a busy (or starved) machine stretches (issue 47).
    wait_for_records(settings, topics.SUMMARIES, decode, "-", bool, timeout_s=60, progress=len)
    jobs = start_members(settings, "job", job_members, f"silence-job-{tag}", after_end_s, config)
    # A job member's idle stop is due only once the node stage is done: a starved node stage can
    # say nothing for longer than after_end_s, and the job stage stopped beside it never saw the
    # stack dumps it wrote after (both hangs `reattempt`, not `evict`, at load 5-6). The idle time
    # still counts from the last record read, the node stage's last flush among them.
    nodes_done = threading.Event()
    for _, r, _ in jobs:
        r.idle_together = lambda due: due and nodes_done.is_set()
    try:
        if finish_nodes is None:
            finish_members(settings, nodes, timeout_s)
        else:
            finish_nodes(settings, nodes, node_group)
    finally:
        nodes_done.set()  # a failed node stage must not leave the job members up for good
    finish_members(settings, jobs, timeout_s, together=True)
    live = job_records(settings, "diagnoses", Diagnosis.decode, None, idle_s=1.5, timeout_s=60)
    by_job: dict[str, dict[str, Diagnosis]] = {}
    for d in live:
        by_job.setdefault(d.job, {})[d.id] = d  # the latest version of each diagnosis
    return [Outcome(c, list(by_job.get(c.job, {}).values())) for c in all_cases]


def assert_as_offline(outcomes: list[Outcome]) -> None:
    """No healthy machine evicted, the acting diagnoses the offline ones, and the end of every
    stream named (as the job's or the pipeline's, never a machine's)."""
    # Each live diagnosis with its action, nodes, time and the start of its reason: a CI run at 5b607f15
    # named only the faults, and its hang's missing second capture could not be told from the log.
    report = [(o.case.name, sorted(o.missing), sorted(o.extra), sorted(o.healthy_evicted), o.extra_details,
               [f"{d.fault}/{d.action} {','.join(d.nodes[:3])} @{d.ts:.1f}: {d.detail[:160]}"
                for d in sorted(o.live, key=lambda d: d.ts)]) for o in outcomes]
    assert all(not o.healthy_evicted for o in outcomes), report
    assert all(not o.missing and not o.extra for o in outcomes), report
    assert all(any(d.fault == "telemetry_lost" for d in o.live) for o in outcomes), report
