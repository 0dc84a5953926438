"""A job stage whose upstream writers (node-stage members) all fell silent keeps its jobs' time where
they stopped and says so once per job (issue 32), without Kafka: the merge's bookkeeping and the
job-stage handler's clock."""

from __future__ import annotations

from kafka.structs import TopicPartition

from faultlens.diagnosis.edge.consumer import DiagnoseHandler
from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.events import topics
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


def test_a_partition_without_writers_has_no_upstream_to_stop():
    merge = WatermarkMerge()
    merge.add(P0, 0, T0, "x", WALL)
    assert merge.stopped_upstream(WALL + 100, {P0: True}) == {}


def _handler_with_a_quiet_job() -> tuple[DiagnoseHandler, float]:
    handler = DiagnoseHandler(Engine(EngineConfig(stage="job", implicit=False, grace_s=5.0)))
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
    from faultlens.events.diagnosis_record import Diagnosis

    return Diagnosis.decode(raw)
