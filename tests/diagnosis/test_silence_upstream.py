"""A job stage whose upstream writers (node-stage members) all fell silent keeps its jobs' time where
they stopped and says so once per job (issue 32), without Kafka: the merge's bookkeeping and the
job-stage handler's clock."""

from __future__ import annotations

import uuid

import pytest
from kafka.structs import TopicPartition

from faultlens.diagnosis.edge.consumer import DiagnoseHandler
from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.events import topics
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.event_time import WatermarkMerge
from faultlens.streams.runner.loop import Record
from tests.diagnosis.diag_events import T0, beat, nodes

WALL = 1_800_000_000.0
P0 = TopicPartition(topics.SUMMARIES, 0)


def _merge_with_writers() -> WatermarkMerge:
    merge = WatermarkMerge(writer_ttl_s=15.0)
    merge.assign([P0], WALL)
    merge.report(P0, "node-a", T0 + 100, WALL, WALL, reads=["telemetry.gpu:0"], of=2)
    merge.report(P0, "node-b", T0 + 90, WALL + 1, WALL + 1, reads=["telemetry.gpu:1"], of=2)
    return merge


def test_a_partition_whose_writers_all_fell_silent_is_a_stop_naming_them():
    merge = _merge_with_writers()
    assert merge.stopped_upstream(WALL + 10, {P0: True}) == {}  # both spoke within the TTL
    [(p, stop)] = merge.stopped_upstream(WALL + 40, {P0: True}).items()
    assert p == P0 and stop.since == WALL + 1 and stop.members == ("node-a", "node-b")
    assert stop.watermark == T0 + 100


def test_one_live_writer_is_no_stop():
    merge = _merge_with_writers()
    merge.report(P0, "node-b", T0 + 130, WALL + 35, WALL + 35, reads=["telemetry.gpu:0", "telemetry.gpu:1"], of=2)
    assert merge.stopped_upstream(WALL + 40, {P0: True}) == {}


def test_writers_that_all_said_their_input_ended_are_no_stop_and_one_that_did_not_is():
    # Node members at their idle stop say "done" in their last word: their silence is the input's
    # end, no upstream stop to alert on. One killed (SIGKILL) says nothing of the kind.
    merge = _merge_with_writers()
    merge.report(P0, "node-a", T0 + 100, WALL + 2, WALL + 2, reads=["telemetry.gpu:0"], of=2, idle=True, done=True)
    [(_, stop)] = merge.stopped_upstream(WALL + 40, {P0: True}).items()
    assert stop.members == ("node-a", "node-b")  # node-b said no "done": killed, not at its end
    merge.report(P0, "node-b", T0 + 90, WALL + 3, WALL + 3, reads=["telemetry.gpu:1"], of=2, idle=True, done=True)
    assert merge.stopped_upstream(WALL + 40, {P0: True}) == {}


def test_a_node_members_last_word_at_its_idle_stop_says_done_and_the_job_stage_reads_it():
    from faultlens.diagnosis.edge.node_consumer import NodeStageHandler, watermark_of
    from faultlens.events.envelope import decode

    announce = NodeStageHandler().watermarks([0])
    [last] = announce(T0, (("telemetry.gpu:0",), 1), False, True, True)
    [word] = announce(T0, (("telemetry.gpu:0",), 1), False, True, False)
    assert watermark_of(Record(topics.SUMMARIES, 0, 0, None, decode(last.value), 0)).done is True
    assert watermark_of(Record(topics.SUMMARIES, 0, 1, None, decode(word.value), 0)).done is False


def test_a_partition_without_writers_has_no_upstream_to_stop():
    merge = WatermarkMerge()
    merge.add(P0, 0, T0, "x", WALL)
    assert merge.stopped_upstream(WALL + 100, {P0: True}) == {}


def _handler_with_a_quiet_job(wall_rate: float = 1.0) -> tuple[DiagnoseHandler, float]:
    handler = DiagnoseHandler(Engine(EngineConfig(stage="job", implicit=False, grace_s=5.0, wall_rate=wall_rate)))
    events = [beat(t, n, job="j") for t in range(0, 60, 5) for n in nodes(4)]
    handler.handle([Record(topics.SUMMARIES, 0, i, b"j", e, 0, event_ts=e.ts) for i, e in enumerate(events)])
    handler.engine._lanes["j"].arrival_wall = WALL  # its last record arrived at WALL
    return handler, handler.engine.job_time("j")


def test_the_job_stage_keeps_a_jobs_time_where_its_node_stage_stopped_and_alerts_once():
    handler, before = _handler_with_a_quiet_job()
    merge = _merge_with_writers()
    stops = merge.stopped_upstream(WALL + 120, {P0: True})
    out = [o for k in range(3) for o in handler.tick(WALL + 120 + k, busy=frozenset(), upstream=stops)]
    # the writers spoke last at WALL + 1: 1 s of wall time, within the 5 s grace: the time stays
    assert handler.engine.job_time("j") == before
    [alert] = [_decode(o.value) for o in out]
    assert (alert.fault, alert.action, alert.nodes) == ("telemetry_lost", "alert", ())
    assert "node-a, node-b" in alert.detail and "partition 0" in alert.detail


def test_writers_that_fell_silent_while_behind_leave_the_jobs_time_where_it_was_delivered():
    """test_silence_backlog_wide on a starved machine: every node-stage member was silent 16 s (starved,
    or rebalancing after one was) while reading a backlog, its last words saying it was behind. The
    job stage took the silence for a stop and moved each job's time by the wall clock up to when the
    writers last spoke, 6 event seconds a wall second past the grace, past steps still on their way:
    both hangs were judged on part of their ranks ("no rank stopped before the others": reattempt,
    not the offline evict). A slow pipeline's silence holds its jobs' time; only writers that said
    they had read everything (not behind) vouch for the quiet before they stopped."""
    handler, before = _handler_with_a_quiet_job(wall_rate=6.0)
    merge = WatermarkMerge(writer_ttl_s=15.0)
    merge.assign([P0], WALL)
    for k, (member, part) in enumerate((("node-a", 0), ("node-b", 1))):  # behind on a backlog, 10 s after the job's last record
        merge.report(P0, member, T0 + 60, WALL + 10 + k, WALL + 10 + k, reads=[f"telemetry.gpu:{part}"], of=2,
                     behind=True)
    [stop] = merge.stopped_upstream(WALL + 30, {P0: True}).values()
    out = [o for k in range(3) for o in handler.tick(WALL + 30 + k, busy=frozenset(), upstream={P0: stop})]
    assert handler.engine.job_time("j") == before
    assert [(d.fault, d.action) for d in map(_decode, [o.value for o in out])] == [("telemetry_lost", "alert")]
    # The same writers caught up (not behind) when they stopped: the quiet they spoke through was the job's.
    handler, before = _handler_with_a_quiet_job(wall_rate=6.0)
    for k, (member, part) in enumerate((("node-a", 0), ("node-b", 1))):
        merge.report(P0, member, T0 + 60, WALL + 10 + k, WALL + 10 + k, reads=[f"telemetry.gpu:{part}"], of=2)
    [stop] = merge.stopped_upstream(WALL + 30, {P0: True}).values()
    for k in range(3):
        handler.tick(WALL + 30 + k, busy=frozenset(), upstream={P0: stop})
    assert handler.engine.job_time("j") == before + (11 - 5) * 6.0


def test_without_a_stop_the_wall_clock_moves_the_quiet_job_and_names_the_job_not_its_nodes():
    handler, before = _handler_with_a_quiet_job()
    out = [o for k in range(0, 120, 2) for o in handler.tick(WALL + k, busy=frozenset(), upstream={})]
    assert handler.engine.job_time("j") > before + 60
    decoded = [_decode(o.value) for o in out]
    # Its only job, so nothing on its clock arrived: recorded as the pipeline's silence (or the
    # input's end), as `analyze` reads a trace's end; a stop of its writers is the alert above.
    assert [(d.fault, d.action) for d in decoded] == [("telemetry_lost", "none")]
    assert "no node of the job reported" in decoded[0].detail and "the stream stopped" in decoded[0].detail


def _decode(raw: bytes):
    return Diagnosis.decode(raw)


@pytest.mark.broker
@pytest.mark.long(60)
def test_a_split_run_whose_node_members_stop_at_their_idle_stop_gives_the_offline_diagnoses(own_kafka_settings, tmp_path):
    """Node-stage members that stop at their idle stop say so (``done``): the job stage, idle past
    their time to live, takes it for the input's end and names no stopped node stage, so it finds
    what `analyze` finds and nothing more (before: one `telemetry_lost` alert more, the upstream stop).
    The job stage's wall clock moves no job here (wall_rate 0): `analyze` judges no absence at a
    trace's end, and a job stage idle past the grace records it (action none), which is not this test."""
    from bench.testbed import foreign
    from bench.testbed.backlog_split import finish_members, start_members
    from faultlens.diagnosis.engine.offline import analyze
    from faultlens.events.envelope import decode
    from faultlens.streams.replay import replay_trace
    from tests.diagnosis.live_members import hold_idle_stop
    from tests.kafka_fixtures import job_records, wait_for_records

    case = foreign.load("failslow_corroborated")
    trace = foreign.write_parquet("failslow_corroborated", tmp_path)
    replay_trace(own_kafka_settings, trace, speed=0, show_progress=False)
    tag = uuid.uuid4().hex[:6]
    nodes = start_members(own_kafka_settings, "node", 2, f"upstream-node-{tag}", idle_s=6)
    wait_for_records(own_kafka_settings, topics.SUMMARIES, decode, "-", bool, timeout_s=60, progress=len)
    # idle past the writers' time to live (15 s) after their last word: their stop is judged
    jobs = start_members(own_kafka_settings, "job", 1, f"upstream-job-{tag}", idle_s=25,
                         config=EngineConfig(wall_rate=0.0))
    # ...counted from the last record read, and due only once the node stage is done: a node stage
    # starved at load can say nothing for longer, and the job stage stopped beside it judges part
    # of the input
    nodes_done = hold_idle_stop(jobs)
    try:
        finish_members(own_kafka_settings, nodes)
    finally:
        nodes_done.set()
    finish_members(own_kafka_settings, jobs)
    latest = {d.id: d for d in job_records(own_kafka_settings, "diagnoses", Diagnosis.decode, None, idle_s=1.5)}

    def acts(found):
        return sorted((str(d.fault), str(d.action), tuple(sorted(d.nodes))) for d in found if d.job == case.job)

    assert acts(latest.values()) == acts(analyze(case.events))
