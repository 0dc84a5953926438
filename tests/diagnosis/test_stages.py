"""Two stages, several members each (issue 11): node-stage members turn telemetry into `summaries`,
job-stage members turn those into diagnoses, and together they give what `faultlens analyze`
gives on the same trace, with no valid event dead-lettered."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.testbed import foreign
from bench.testbed.backlog_split import start_members
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.replay.scoring import EVICTING
from faultlens.events import topics
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import decode
from faultlens.events.trace import iter_trace, trace_order, write_trace
from faultlens.streams.replay import replay_trace
from tests.diagnosis.live_members import finish_stages, start_job_members
from tests.diagnosis.sim_replay import acting, offline_trace
from tests.kafka_fixtures import job_records, wait_for_records

pytestmark = pytest.mark.broker


# Hand-written cases (tests/fixtures/foreign) that split stages once got wrong, read beside the
# simulated job: with 1-2 node-stage members `dead_agent` evicted its healthy n007 when one node
# reported its first step after a checkpoint pause before the others; with 2, a node's NVML
# samples and its steps went to different members (6 GPU partitions, 3 train partitions), so
# `failslow_corroborated` lost the clock drift that makes its slow node's eviction two-signal.
FOREIGN_CASES = ("dead_agent", "failslow_corroborated")


@dataclass(frozen=True)
class Reference:
    """The trace every split replays and what `faultlens analyze` finds in it."""
    job: str
    path: Path  # the simulated job and the foreign cases, in trace order
    offline: list[Diagnosis]  # the simulated job's
    start: float
    cases: list
    case_offline: dict[str, list[Diagnosis]]  # each foreign case's, by name


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Reference:
    """Built once for the three splits (~10 CPU-seconds: the simulation, loading the foreign cases
    and analysing them): each split replays it into a broker of its own, so one job name serves all."""
    tmp = tmp_path_factory.mktemp("stages")
    job = f"stages-{uuid.uuid4().hex[:8]}"
    sim_path, offline, start = offline_trace(tmp, job)
    cases = [foreign.load(name) for name in FOREIGN_CASES]
    path = tmp / "with-foreign.parquet"
    write_trace(path, sorted([*iter_trace(sim_path), *(e for c in cases for e in c.events)], key=trace_order))
    return Reference(job, path, offline, start, cases, {c.name: analyze(c.events) for c in cases})


@pytest.mark.long(60)
@pytest.mark.parametrize("node_members,job_members", [(2, 1), (1, 2), (3, 3)])
def test_split_stages_give_the_offline_answer(own_kafka_settings, reference, node_members, job_members):
    # Its own broker: `summaries` on the session broker holds earlier runs' announcements.
    kafka_settings = own_kafka_settings
    job, path, offline, start, cases = reference.job, reference.path, reference.offline, reference.start, reference.cases

    tag = uuid.uuid4().hex[:6]
    node_group = f"test-node-{tag}"
    replay_trace(kafka_settings, path, speed=0, show_progress=False)
    nodes = start_members(kafka_settings, "node", node_members, node_group, idle_s=6)
    # The job stage runs while the node stage works through the backlog, as deployed. It starts
    # once a node-stage member has said its first word: its idle stop counts from its own join,
    # and started before the replay it waited out the replay and the node stage's join with no
    # input, which a busy machine stretches towards its 25 s (issue 47).
    wait_for_records(kafka_settings, topics.SUMMARIES, decode, "-", bool, timeout_s=60, progress=len)
    jobs = start_job_members(kafka_settings, job_members, f"test-job-{tag}")
    # Each stage stopped once it has read its input to the end, not at its idle stop (live_members).
    finish_stages(kafka_settings, nodes, node_group, jobs)

    # Every job's diagnoses in one read of the topic (each read waits out its idle end).
    by_job: dict[str, list[Diagnosis]] = {}
    for d in job_records(kafka_settings, "diagnoses", Diagnosis.decode, None, idle_s=1.5):
        by_job.setdefault(d.job, []).append(d)
    live = by_job.get(job, [])
    assert acting(live) == acting(offline), (_said(live, start), _said(offline, start), _members(nodes + jobs))
    for case in cases:
        live = by_job.get(case.job, [])
        assert acting(live) == acting(reference.case_offline[case.name]), (case.name, [(d.fault, d.action, d.nodes) for d in live])
        culprits = {n for label in case.labels for n in label.get("nodes") or ()}
        assert not {n for d in live if d.action in EVICTING for n in d.nodes} - culprits, case.name
    for _, r, _ in nodes + jobs:
        assert r.stats.dead_letters == 0 or r.group.startswith("test-node")  # other tests' bad input


def _said(diagnoses: list[Diagnosis], start: float) -> list[str]:
    """Each diagnosis as a person reads it: a CI failure (a live reattempt for "no stack dump" where
    analyze evicted) named only the hang's, and not what the members went through."""
    return [f"{d.fault}/{d.action} {','.join(d.nodes[:3])} @{d.ts - start:.1f}: {d.detail[:120]}"
            for d in sorted(diagnoses, key=lambda d: d.ts)]


def _members(members) -> list[dict]:
    """What each member read, handed on late, read again and judged late (runner and engine counts)."""
    return [{"group": r.group, "in": r.stats.records_in, "late_released": r.stats.late_released,
             "redeliveries": r.stats.redeliveries, "skewed": r.stats.skewed, "forced": r.merge.forced if r.merge is not None else None,
             **{k: h.engine.stats[k] for k in ("late", "late_faults", "duplicates") if hasattr(h, "engine")}}
            for _, r, h in members]
