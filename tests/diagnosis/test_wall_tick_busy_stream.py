"""A job whose stream ends on a fault is judged while another job keeps the stream busy.

A CUDA error is held ``hold_s`` of its job's event time for a hardware cause logged beside it
(diagnosis/engine/dedup.py). When the job's stream ends there (the trainer crashed, and nothing of the
job speaks again), only the wall clock moves its time on. The runner used to let the wall clock
in only at a moment when nothing at all was held and every partition was read to its end, which
never comes while another job streams from two partitions: the error was never diagnosed and the
trainer never told. On the embedded broker, through `diagnose` (stage all)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from faultlens.diagnosis.edge.consumer import diagnose_consumer
from faultlens.diagnosis.engine.core import EngineConfig
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.streams.producer import Producer
from tests.diagnosis.diag_events import beat, ev, nodes, topology
from tests.kafka_fixtures import job_records
from tests.progress import wait_until


def _stream(settings, job: str, stop: threading.Event) -> None:
    """Job ``job`` beating from four nodes (several partitions) until ``stop``, each node on its
    own beat, as real ones are: some partition's latest record is always ahead of the others'."""
    with Producer(settings) as producer:
        producer.send_event(topology(n=4, gpus=1, tp=1, pp=1, job=job))
        t = 0.0
        while not stop.is_set():
            for i, n in enumerate(nodes(4)):
                producer.send_event(beat(t + 0.025 * i, n, job=job))
                producer.flush()
                time.sleep(0.025)
            t += 0.1


@pytest.mark.broker
def test_a_job_that_ends_on_a_cuda_error_is_diagnosed_while_another_job_streams(kafka_settings, group_name):
    crashed, busy = f"crashed-{uuid.uuid4().hex[:6]}", f"busy-{uuid.uuid4().hex[:6]}"
    with Producer(kafka_settings) as producer:
        producer.send_event(topology(n=4, gpus=2, job=crashed))
        for t in range(10):
            for n in nodes(4):
                producer.send_event(beat(t, n, job=crashed))
        producer.send_event(ev(10.5, "n003", "nccl", "cuda_error", job=crashed, rank=6,
                               error="CUDA error: an illegal memory access was encountered"))
    stop = threading.Event()
    streamer = threading.Thread(target=_stream, args=(kafka_settings, busy, stop), daemon=True)
    streamer.start()
    runner, handler = diagnose_consumer(kafka_settings, EngineConfig(grace_s=2.0), group=group_name)
    consumer = threading.Thread(target=runner.run, kwargs={"handle_signals": False}, daemon=True)
    consumer.start()
    found: list[Diagnosis] = []

    def diagnosed() -> list[Diagnosis]:
        found[:] = [d for d in job_records(kafka_settings, "diagnoses", Diagnosis.decode, crashed, idle_s=0.5)
                    if d.fault == "cuda_error"]
        return found

    try:
        # Waited for while the crashed job's time moves (its records read, then the wall clock past
        # the grace): the other job's stream moves the consumer's counters whatever happens to it.
        wait_until(diagnosed, progress=lambda: handler.engine.job_time(crashed), stall_s=60, poll_s=2.0,
                   what="the crashed job's cuda_error diagnosis")
        assert streamer.is_alive()  # the other job kept streaming the whole time
    finally:
        runner.stop()
        stop.set()
        consumer.join(30)
        streamer.join(10)
    assert [(d.nodes, d.action) for d in found][:1] == [(("n003",), "stop_time_diagnosis")]
