"""A bounded run whose input ended judges each quiet job's end at once (the runner's
``input_ended``): what the wall clock judges once nothing arrived for the grace and the silence
grace, ticked a second at a time, not only if the member happened to stay up that long. A starved
job member reached its idle stop before its wall clock got there and a job's stream end went
unnamed (test_silence_starved, a CI run at bf2e7fa5)."""

from __future__ import annotations

import threading
import time
import uuid

import orjson
import pytest

from bench.testbed.topic_reads import job_records
from faultlens.diagnosis.edge.consumer import DiagnoseHandler, diagnose_consumer
from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.trace import write_trace
from faultlens.streams.replay import replay_trace
from faultlens.streams.runner.handler import HandlerParts
from tests.diagnosis.diag_events import JOB, beat, nodes, topology

CONFIG = EngineConfig(implicit=False, peer_model=False)


def _events(job: str = JOB) -> list:
    head = [topology(n=8, gpus=8, tp=8, pp=1, job=job)]
    return head + sorted(
        (beat(k * 10.0 + i * 1.25, n, job=job) for k in range(30) for i, n in enumerate(nodes(8))), key=lambda e: e.ts
    )


def _fed() -> DiagnoseHandler:
    handler = DiagnoseHandler(Engine(CONFIG))
    for e in _events():
        handler.engine.process(e)
    return handler


def _said(outputs) -> list[tuple[str, str, tuple[str, ...]]]:
    found = [orjson.loads(o.value) for o in outputs]
    return sorted((d["fault"], d["action"], tuple(d.get("nodes") or ())) for d in found)


def test_the_input_s_end_judges_what_the_wall_clock_would_have():
    now = time.time()
    handler = _fed()
    assert _said(handler.tick(now)) == []  # within the grace: nothing judged yet
    ended = _said(handler.input_ended(now, {}))
    assert ended == [("telemetry_lost", "none", ())], ended  # the stream stopped: recorded, no machine blamed
    # The same as a member that stayed up, its wall clock ticked a second at a time until then.
    twin = _fed()
    stayed = [o for k in range(1, 120) for o in twin.tick(now + k)]
    assert _said(stayed) == ended


def test_the_runner_hands_the_input_s_end_to_a_handler_that_takes_it():
    assert HandlerParts.of(DiagnoseHandler(Engine(CONFIG))).input_ended is not None
    assert HandlerParts.of(lambda records: []).input_ended is None


def _run(settings, tmp_path, stop_early: bool) -> list[Diagnosis]:
    job = f"input-end-{uuid.uuid4().hex[:6]}"
    trace = tmp_path / f"{job}.parquet"
    write_trace(trace, _events(job))
    replay_trace(settings, trace, speed=0, show_progress=False)
    runner, handler = diagnose_consumer(settings, CONFIG, stage="all", group=f"input-end-{job}")
    # Stopped early, the idle stop (60 s) never comes: the stop is from outside, not the input's end.
    idle_stop_s = 60.0 if stop_early else 2.0
    thread = threading.Thread(target=runner.run, kwargs={"idle_stop_s": idle_stop_s, "handle_signals": False}, daemon=True)
    thread.start()
    if stop_early:
        # Stopped from outside once it has read the job (no input end: the wall clock's judgement is
        # the only one, and 2 s is far inside its 30 s grace).
        deadline = time.monotonic() + 120
        while handler.engine.job_time(job) is None or runner.stats.records_in < len(_events()):
            assert time.monotonic() < deadline and thread.is_alive(), runner.stats
            time.sleep(0.1)
        runner.stop()
    thread.join(120)
    assert not thread.is_alive()
    return job_records(settings, "diagnoses", Diagnosis.decode, job, idle_s=1.0)


@pytest.mark.broker
@pytest.mark.long(30)
def test_a_member_stopped_at_its_idle_stop_names_the_stream_s_end(own_kafka_settings, tmp_path):
    ended = _run(own_kafka_settings, tmp_path, stop_early=False)
    assert [(str(d.fault), str(d.action)) for d in ended] == [("telemetry_lost", "none")], ended
    assert "the stream stopped" in ended[0].detail


@pytest.mark.broker
@pytest.mark.long(30)
def test_a_member_stopped_from_outside_judges_no_end(own_kafka_settings, tmp_path):
    assert _run(own_kafka_settings, tmp_path, stop_early=True) == []
