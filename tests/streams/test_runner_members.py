"""Two members of one group through a rebalance (streams/runner/loop.py): nothing lost, and nothing
handed on twice by a member whose partitions came straight back. (Apart from test_runner.py so
that the test runner can spread these slower tests.)"""

import threading
import time

import pytest
from kafka.structs import TopicPartition

from faultlens.streams.config import KafkaSettings
from faultlens.streams.kafka_client import open_consumer
from faultlens.streams.runner.loop import GroupRunner
from tests.progress import wait_until
from tests.streams.test_runner import SESSION_TIMEOUT_MS, events, publish

pytestmark = pytest.mark.broker


@pytest.fixture
def kafka_settings(broker) -> KafkaSettings:
    """test_runner.py's short session timeout: Tansu holds each join, and the rebalance when a
    member leaves, for a share of it (issue 47)."""
    return KafkaSettings(bootstrap=broker.bootstrap, session_timeout_ms=SESSION_TIMEOUT_MS)


@pytest.mark.long(30)
def test_a_member_joining_takes_partitions_over_and_nothing_is_lost(client_settings, group_name, fresh_topic):
    topic = fresh_topic(partitions=4)
    sent = events(600)
    publish(client_settings, topic, sent)
    seen_a, seen_b = [], []

    def slow(seen):
        def handle(records):
            seen.extend(r.value.id for r in records)
            time.sleep(0.2)  # a busy detector: the second member joins while the first is mid-backlog
            return []
        return handle

    first = GroupRunner(client_settings, group_name, [topic], slow(seen_a), max_records=10)
    t_first = threading.Thread(target=first.run, kwargs={"idle_stop_s": 6, "handle_signals": False})
    t_first.start()
    wait_until(lambda: len(seen_a) >= 30, progress=lambda: len(seen_a), stall_s=60, what="the first member's 30 records")
    second = GroupRunner(client_settings, group_name, [topic], slow(seen_b), max_records=10)
    t_second = threading.Thread(target=second.run, kwargs={"idle_stop_s": 6, "handle_signals": False})
    t_second.start()
    # What the two handed to their handlers is committed, to the end of every partition (asked of
    # the broker: a third member would wait on Tansu for the departed members' sessions). The
    # topic is new, so offsets count from 0 and the commits add up to the records sent. Once
    # they do, both members are stopped together: at their 6 s idle stops (kept as the backstop)
    # the first to leave started a rebalance and the other's idle time began again.
    looker = open_consumer(client_settings, group_name)  # never subscribes: only asks
    try:
        wait_until(lambda: committed(looker, topic) >= len(sent) or not (t_first.is_alive() or t_second.is_alive()),
                   progress=lambda: (committed(looker, topic), len(seen_a), len(seen_b)), stall_s=60,
                   what="the two members to commit every partition to its end", poll_s=0.3)
        first.stop()
        second.stop()
        t_first.join(180)
        t_second.join(180)
        assert not t_first.is_alive() and not t_second.is_alive()
        assert seen_b, "the second member was never given a partition"
        assert set(seen_a) | set(seen_b) == {e.id for e in sent}  # at-least-once across the rebalance
        assert committed(looker, topic) == len(sent)
    finally:
        looker.close()


@pytest.mark.long(30)
def test_a_member_keeping_partitions_through_a_rebalance_hands_nothing_on_twice(
        client_settings, group_name, fresh_topic):
    """An event-time member whose partitions a rebalance revokes and gives straight back resumes
    where its handing on stopped: its handler's state holds those records already, and reading
    them again (the rebuild of a partition taken over) counted a node's events twice. A partition
    it takes over is still read again from ``rebuild_s`` back.

    Once the group is done its commits cover every record, and a restart of the group reads only
    what came since: the records a member's merge held past its last read and let go in a loop
    that read nothing (or at the end of its run) were handed on but never committed, and the
    group ended with 300 of 600 records committed (streams/runner/commit.py)."""
    topic = fresh_topic(partitions=4)
    sent = events(600)
    seen_a, seen_b = [], []

    def stream():  # live: 50 events every 0.5 s, so the first member is mid-stream when the second joins
        for i in range(0, len(sent), 50):
            publish(client_settings, topic, sent[i:i + 50])
            time.sleep(0.5)

    def member(seen, rebuild_s=900.0):
        def handle(records):
            seen.extend(r.value.id for r in records)
            return []
        return GroupRunner(client_settings, group_name, [topic], handle, event_time=True, rebuild_s=rebuild_s)

    producer = threading.Thread(target=stream)
    producer.start()
    # The first member leaves first, so that nothing of the second's comes to it to be rebuilt (a
    # partition taken over is read again: that is no double handing on). The second sees the
    # first leave, takes its partitions and reads what it had held.
    t_first = threading.Thread(target=member(seen_a).run, kwargs={"idle_stop_s": 4, "handle_signals": False})
    t_first.start()
    wait_until(lambda: len(seen_a) >= 100, progress=lambda: len(seen_a), stall_s=60,
               what="the first member's 100 records")
    t_second = threading.Thread(target=member(seen_b).run, kwargs={"idle_stop_s": 9, "handle_signals": False})
    t_second.start()
    for t in (producer, t_first, t_second):
        t.join(180)
    assert not t_first.is_alive() and not t_second.is_alive()
    assert seen_b, "the second member was never given a partition"
    assert set(seen_a) | set(seen_b) == {e.id for e in sent}
    assert len(seen_a) == len(set(seen_a)), "the first member handed records of its kept partitions on twice"

    # The topic is new: offsets count from 0, so the commits add up to the records sent.
    looker = open_consumer(client_settings, group_name)
    try:
        assert committed(looker, topic) == len(sent)
    finally:
        looker.close()
    # A restart (no rebuild: what it reads again would be by design) reads what came since, only.
    later = events(40, start=1_790_001_000.0)
    publish(client_settings, topic, later)
    seen_c: list[str] = []
    restarted = member(seen_c, rebuild_s=0.0)
    stats = restarted.run(max_records_total=len(later), idle_stop_s=9, handle_signals=False)
    assert sorted(seen_c) == sorted(e.id for e in later)
    assert stats.records_in == len(later)


def committed(looker, topic, partitions=4) -> int:
    """The group's committed offsets of ``topic``, added up, asked by a consumer of the group that
    never subscribes (a third member would wait on Tansu for the departed members' sessions)."""
    return sum(looker.committed(TopicPartition(topic, p)) or 0 for p in range(partitions))
