"""The job stage takes each event at the time the node stage placed it: on `summaries` a record's
broker time is when a node-stage member wrote it, not when its node sent it (issue 32).

Found starved: one node-stage member wrote its node's beats 829 s of broker time before the other
member wrote its peers', the job stage's clock took that node's clock for 829 s fast, moved its
beats back by as much, and evicted it as silent while it beat on."""

from __future__ import annotations

import pytest
from kafka.structs import TopicPartition

from faultlens.diagnosis.edge.consumer import diagnose_consumer
from faultlens.events import topics
from faultlens.events.envelope import encode
from faultlens.events.event_clock import EventClock
from faultlens.streams.intake import Intake
from faultlens.streams.kafka_client import Message
from faultlens.streams.runner.types import RunnerStats
from tests.diagnosis.diag_events import beat

LAG_S = 829.0  # how far the slow member's writes trail the fast one's, in broker time
FAST = "n004"


class _Handler:
    def handle(self, records):
        return []


def _polled() -> dict:
    """Ten minutes of beats of 8 nodes as `summaries` holds them: n004's written by a member that
    kept up, the others' by one 829 s behind."""
    tp = TopicPartition(topics.SUMMARIES, 0)
    msgs = []
    for i in range(60):
        for n in range(8):
            node = f"n{n:03d}"
            e = beat(10.0 * i + n * 0.1, node, seq=i)
            written = e.ts + 2.0 + (0.0 if node == FAST else LAG_S)
            msgs.append(Message(tp.topic, tp.partition, len(msgs), e.job.encode(), encode(e), int(written * 1000)))
    return {tp: msgs}


def _placed(intake: Intake) -> dict[str, float]:
    good, dead = intake.split(_polled())
    assert not dead
    return {r.value.id: r.event_ts - r.value.ts for r in good if r.value.node == FAST}


def test_a_clock_judged_against_peers_would_move_the_fast_writers_node():
    # What the job stage did before: the same input through a peer-judging clock.
    moved = _placed(Intake({}, 1 << 20, "g", RunnerStats(), EventClock()))
    assert max(abs(d) for d in moved.values()) > 800


@pytest.mark.broker
def test_the_job_stage_takes_events_at_the_time_the_node_stage_placed_them(kafka_settings):
    runner, _ = diagnose_consumer(kafka_settings, stage="job", handler=_Handler())
    try:
        moved = _placed(runner.intake)
    finally:
        runner.producer.close()
    assert moved and all(d == 0.0 for d in moved.values())
    assert runner.stats.skewed == 0
