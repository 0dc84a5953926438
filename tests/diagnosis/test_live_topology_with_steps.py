"""A live node-stage member judges a job's ranks only after it has read that job's topology, when the
topology and the first steps reach the broker together and the member fetches the steps first
(streams/runner/broadcast_reach.py). Its `jobs` reader counted itself caught up by the high
watermark its last fetch carried: the steps were judged before the topology was read, each one a
record-only 'unknown'/'none' finding "no topology for job X" naming its machine (the live 2+2
fleet-waves e2e at load 10+, 1 run in 5).

Real broker, real member (in a thread), both clients. The member's `jobs` fetches are held back
while the job is written: its reader is paused and not polled until the member waits for it (a
poll that may wait: the member knows `jobs` is behind) or has handed the steps on."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid

import pytest
from kafka.structs import TopicPartition

from faultlens.diagnosis.edge.consumer import diagnose_consumer
from faultlens.events import topics
from faultlens.streams.kafka_client import confluent_available
from faultlens.streams.producer import Producer
from tests.diagnosis.diag_events import T0, step, topology
from tests.diagnosis.live_members import end_offsets
from tests.kafka_fixtures import job_records
from tests.progress import wait_until

pytestmark = pytest.mark.broker

NODES = 4  # topology(4, gpus=2): ranks 0-7, two a node


class JobsGate:
    """Holds a member's `jobs` reader back: once closed, its next poll pauses it and polls nothing
    (its last fetch's high watermark stays what it was); a poll that may wait, or :meth:`open`,
    lets it read again."""

    def __init__(self) -> None:
        self.closing = False
        self.paused = threading.Event()
        self.opened = threading.Event()
        self.waited_for = False  # the member polled it with a wait: it knew `jobs` was behind

    def wrap(self, order) -> None:
        opened = order.open_broadcast

        def open_broadcast(settings, max_records):
            opened(settings, max_records)
            reader = order.broadcast
            real = reader.poll

            def poll(timeout_ms=0, **kwargs):
                if self.closing and not self.opened.is_set():
                    if timeout_ms <= 0:
                        if not self.paused.is_set():
                            reader.pause(*reader.assignment())
                            self.paused.set()
                        return {}
                    self.waited_for = True
                    self.opened.set()
                if self.paused.is_set() and self.opened.is_set():
                    reader.resume(*reader.assignment())
                    self.paused.clear()
                return real(timeout_ms=timeout_ms, **kwargs)

            reader.poll = poll

        order.open_broadcast = open_broadcast


def _now_s() -> float:
    return time.time() - T0  # diag_events stamps T0 + ts: events of now, as a live job sends them


@pytest.fixture(params=["kafka-python", "confluent"])
def settings(request, own_kafka_settings):
    if request.param == "confluent" and not confluent_available():
        pytest.skip("confluent-kafka is not installed (pip install 'faultlens[fast]')")
    return dataclasses.replace(own_kafka_settings, client=request.param)


def _send(settings, events) -> None:
    with Producer(settings) as producer:
        for e in events:
            producer.send_event(e)
        producer.flush()


@pytest.mark.long(40)
def test_steps_written_with_their_topology_are_judged_after_it(settings):
    tag = uuid.uuid4().hex[:6]
    warm, job = f"warm-{tag}", f"fresh-{tag}"
    runner, _ = diagnose_consumer(settings, stage="node", group=f"topo-first-{tag}")
    gate = JobsGate()
    gate.wrap(runner.order)
    thread = threading.Thread(target=runner.run, kwargs={"handle_signals": False}, daemon=True)
    thread.start()
    stats = runner.stats
    try:
        progress = lambda: (stats.records_in, stats.batches, stats.last_handled_at)  # noqa: E731
        # A first job read through: the member has joined and its `jobs` reader has fetched.
        _send(settings, [topology(NODES, job=warm, ts=_now_s()), step(_now_s(), "n000", rank=0, n=1, job=warm)])
        wait_until(
            lambda: stats.last_handled_at is not None and not runner.order.merge.held,
            progress=progress,
            stall_s=60,
            what="the first job handed on",
        )
        gate.closing = True
        wait_until(gate.paused.is_set, progress=progress, stall_s=60, what="the jobs reader paused")
        # The topology first, then every node's first step: one producer, one flush.
        ts = _now_s()
        _send(
            settings,
            [topology(NODES, job=job, ts=ts)] + [step(ts + 1, f"n{i // 2:03d}", rank=i, n=1, job=job) for i in range(2 * NODES)],
        )
        sent_at = time.time()
        ends = {tp: end for tp, end in end_offsets(settings, [topics.topic_for(step(0, "n000", 0, 1))]).items() if end}
        next_offset = runner.rebalance.next_offset

        def handed_on() -> bool:
            read = all(next_offset.get(TopicPartition(tp.topic, tp.partition), 0) >= end for tp, end in ends.items())
            return read and (stats.last_handled_at or 0) > sent_at and not runner.order.merge.held

        wait_until(
            lambda: handed_on() or gate.opened.is_set(),
            progress=progress,
            stall_s=60,
            what="the steps handed on, or the jobs reader waited for",
        )
        gate.opened.set()
        wait_until(handed_on, progress=progress, stall_s=60, what="the steps handed on")
    finally:
        runner.stop()
        thread.join(60)
    assert not thread.is_alive()
    said = job_records(settings, topics.SUMMARIES, lambda raw: raw)
    no_topology = [r for r in said if f"no topology for job {job}".encode() in r]
    assert not no_topology, f"{len(no_topology)} step(s) judged before their topology was read"
    assert sum(job.encode() in r and b'"step"' in r for r in said) >= 1  # the steps went on
    assert gate.waited_for  # the member waited for `jobs`: its last fetch had said it was read
