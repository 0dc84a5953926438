"""The split-stage tests' harness (tests/diagnosis/live_members.py) ends a node stage only once its
group committed the telemetry to the end: a member that stopped with input unread is followed by a
fresh one, as a deployment's supervisor restarts a member that exits."""

from __future__ import annotations

import threading
import uuid

import pytest

from bench.testbed import foreign
from faultlens.diagnosis.edge.consumer import diagnose_consumer
from faultlens.events import topics
from faultlens.streams.kafka_client import open_consumer
from faultlens.streams.replay import replay_trace
from tests.diagnosis.live_members import end_offsets, finish_node_members

pytestmark = pytest.mark.broker


@pytest.mark.long(30)
def test_a_node_stage_whose_members_stopped_with_input_unread_is_finished_by_a_fresh_member(own_kafka_settings,
                                                                                           tmp_path):
    """test_silence_backlog_wide at load 10: a starved member kicked from the group, the others stopped
    idle, its join never completed and its bounded run gave up with 5,836 records unread; the harness
    took its stop for the node stage's end and the job stage judged two hangs without a third of their
    nodes. Here the one member stops after its first poll, most of its input unread."""
    replay_trace(own_kafka_settings, foreign.write_parquet("dead_agent", tmp_path), speed=0, show_progress=False)
    group = f"finish-node-{uuid.uuid4().hex[:6]}"
    runner, handler = diagnose_consumer(own_kafka_settings, stage="node", group=group)
    thread = threading.Thread(target=runner.run, kwargs={"max_records_total": 200, "handle_signals": False},
                              daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive() and runner.stats.records_in < 5000  # one poll (2,000) of 13,495: most left unread
    finish_node_members(own_kafka_settings, [(thread, runner, handler)], group)
    looker = open_consumer(own_kafka_settings, group)  # never subscribes: only asks
    try:
        behind = {(tp.topic, tp.partition): end - (looker.committed(tp) or 0)
                  for tp, end in end_offsets(own_kafka_settings, topics.TELEMETRY_TOPICS).items()}
    finally:
        looker.close()
    assert not {tp: n for tp, n in behind.items() if n > 0}, behind  # every record of the telemetry handed on
