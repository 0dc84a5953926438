import os
import signal
import subprocess
import sys
import threading

import orjson
import pytest

from faultlens.events.envelope import Envelope, encode
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Outgoing, Producer
from faultlens.streams.reader import read_topic
from faultlens.streams.runner.loop import DEAD_LETTER_TOPIC, GroupRunner
from tests.progress import files_size, wait_until

pytestmark = pytest.mark.broker

# Tansu holds a group's join for half the members' session timeout (measured: 3.1-3.6 s at the
# default 6 s, 1.5-2.3 s at 3 s, 6-6.7 s at 12 s), and these tests join ~30 groups of one member
# each. A 3 s session still leaves four heartbeats (every 750 ms, from the client's own thread)
# before a member counts as gone (issue 47).
SESSION_TIMEOUT_MS = 3000
# A run that knows how many records it reads stops at that count (``max_records_total``, its
# offsets committed by the run's end as at any stop), not after ``idle_stop_s`` of quiet: the idle
# stop stays on as the backstop, and the runs that must find nothing still end by it.


@pytest.fixture
def kafka_settings(broker) -> KafkaSettings:
    """The session broker's settings (tests/kafka_fixtures.py) with this file's session timeout;
    client_settings builds on it."""
    return KafkaSettings(bootstrap=broker.bootstrap, session_timeout_ms=SESSION_TIMEOUT_MS)


def written(settings, topic):
    """What a run that returned wrote to ``topic``: its outputs were acknowledged before it
    returned, and the reader first waits for the end offsets it reads at its start
    (streams/reader.py), so half a second of quiet past them ends it (1.5 s and 2 s were idle time)."""
    return read_topic(settings, topic, idle_s=0.5)


def events(n, job="j", start=1_790_000_000.0):
    return [Envelope(ts=start + i, job=job, node=f"n{i % 4}", source="gpu", kind="sample", data={"i": i}) for i in range(n)]


def publish(settings, topic, items):
    with Producer(settings) as p:
        for item in items:
            if isinstance(item, Envelope):
                p.send(topic, item.key, encode(item))
            else:
                p.send(topic, b"n0", item)
        p.flush()


def test_produce_then_consume_through_a_group(client_settings, group_name, fresh_topic):
    topic = fresh_topic()
    sent = events(300)
    publish(client_settings, topic, sent)
    seen = []
    runner = GroupRunner(client_settings, group_name, [topic], lambda recs: seen.extend(r.value for r in recs) or [])
    stats = runner.run(max_records_total=300, idle_stop_s=2, handle_signals=False)
    assert sorted(e.id for e in seen) == sorted(e.id for e in sent)
    assert stats.records_in == 300 and stats.dead_letters == 0
    # per-node order is kept (key = node → one partition)
    by_node = {}
    for e in seen:
        by_node.setdefault(e.node, []).append(e.data["i"])
    assert all(v == sorted(v) for v in by_node.values())
    # committed: a second member of the same group gets nothing again
    again = []
    GroupRunner(client_settings, group_name, [topic], lambda recs: again.extend(recs) or []).run(idle_stop_s=2, handle_signals=False)
    assert again == []


def test_invalid_messages_go_to_dead_letter_and_neighbours_are_processed(client_settings, group_name, fresh_topic):
    topic = fresh_topic(partitions=1)
    good = events(20, job=f"dl-{group_name}")
    bad = [b"{not json", orjson.dumps({"v": 1, "id": "x", "ts": 1_790_000_000.0, "job": "j", "node": "n0",
                                         "source": "gpu", "kind": "sample"}), b"\xff\xfe"]
    items = good[:7] + [bad[0]] + good[7:13] + [bad[1]] + good[13:] + [bad[2]]
    publish(client_settings, topic, items)
    seen = []
    stats = GroupRunner(client_settings, group_name, [topic], lambda recs: seen.extend(r.value.id for r in recs) or []).run(
        max_records_total=len(items), idle_stop_s=2, handle_signals=False)
    assert seen == [e.id for e in good]  # one partition: order kept, nothing lost
    assert stats.dead_letters == 3
    dead = [orjson.loads(r.value) for r in written(client_settings, DEAD_LETTER_TOPIC)]
    mine = [d for d in dead if d["topic"] == topic]
    assert len(mine) == 3
    reasons = " | ".join(d["reason"] for d in mine)
    assert "not valid JSON" in reasons and "data: missing" in reasons
    assert all(d["group"] == group_name and isinstance(d["offset"], int) for d in mine)


def test_a_record_that_breaks_the_handler_is_dead_lettered_alone(client_settings, group_name, fresh_topic):
    topic = fresh_topic(partitions=1)
    sent = events(10)
    poison = sent[4].id
    publish(client_settings, topic, sent)
    seen = []

    def handle(records):
        if any(r.value.id == poison for r in records):
            raise RuntimeError("detector bug")
        seen.extend(r.value.id for r in records)
        return [Outgoing(topic + "-out", None, b"x")] if False else []

    stats = GroupRunner(client_settings, group_name, [topic], handle).run(max_records_total=len(sent), idle_stop_s=2,
                                                                         handle_signals=False)
    assert sorted(seen) == sorted(e.id for e in sent if e.id != poison)
    assert stats.dead_letters == 1
    dead = [orjson.loads(r.value) for r in written(client_settings, DEAD_LETTER_TOPIC)]
    assert any(d["topic"] == topic and "handler failed: RuntimeError: detector bug" in d["reason"] for d in dead)


def test_outputs_are_produced_before_commit(client_settings, group_name, fresh_topic):
    src, dst = fresh_topic(), fresh_topic()
    sent = events(50)
    publish(client_settings, src, sent)
    runner = GroupRunner(client_settings, group_name, [src],
                         lambda recs: [Outgoing(dst, r.key, r.value.id.encode()) for r in recs])
    runner.run(max_records_total=len(sent), idle_stop_s=2, handle_signals=False)
    out = written(client_settings, dst)
    assert sorted(r.value.decode() for r in out) == sorted(e.id for e in sent)


def test_stop_from_another_thread_ends_the_run(kafka_settings, group_name, fresh_topic):
    topic = fresh_topic()
    runner = GroupRunner(kafka_settings, group_name, [topic], lambda recs: [])
    t = threading.Thread(target=runner.run, kwargs={"handle_signals": False})
    t.start()
    assert runner.ready.wait(30)
    runner.stop()
    t.join(15)
    assert not t.is_alive()


def test_sigkill_after_processing_before_commit_redelivers(client_settings, group_name, fresh_topic, tmp_path):
    topic = fresh_topic()
    sent = events(40)
    publish(client_settings, topic, sent)
    first = tmp_path / "first.txt"
    env = {**os.environ, "FAULTLENS_CLIENT": client_settings.client,
           "FAULTLENS_SESSION_TIMEOUT_MS": str(client_settings.session_timeout_ms)}
    child = subprocess.Popen([sys.executable, "-m", "tests.streams.killable_consumer", client_settings.bootstrap,
                              topic, group_name, str(first), "hang"], env=env)
    try:
        # Its first records processed, however long its start takes on a busy machine; a child
        # that died or wrote nothing for a minute fails here.
        wait_until(lambda: child.poll() is not None or (first.exists() and first.read_text().strip()),
                   progress=lambda: files_size(first), stall_s=60, what="the killable consumer's first records",
                   poll_s=0.2)
        processed = set(first.read_text().split())
        assert processed, "the consumer processed nothing before the kill"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    second = tmp_path / "second.txt"
    subprocess.run([sys.executable, "-m", "tests.streams.killable_consumer", client_settings.bootstrap,
                    topic, group_name, str(second), "finish", str(len(sent))], check=True, timeout=120, env=env)
    redelivered = set(second.read_text().split())
    assert processed <= redelivered  # nothing processed-but-uncommitted was lost
    assert redelivered | processed == {e.id for e in sent}


def test_a_fatal_handler_error_stops_without_commit_or_dead_letter(client_settings, group_name, fresh_topic):
    from faultlens.streams.runner.loop import FatalHandlerError

    topic = fresh_topic(partitions=1)
    sent = events(5)
    publish(client_settings, topic, sent)

    def broken(records):
        raise FatalHandlerError("store gone")

    runner = GroupRunner(client_settings, group_name, [topic], broken)
    with pytest.raises(FatalHandlerError):
        runner.run(idle_stop_s=2, handle_signals=False)
    assert runner.stats.dead_letters == 0 and runner.stats.commits == 0
    seen = []
    GroupRunner(client_settings, group_name, [topic], lambda recs: seen.extend(r.value.id for r in recs) or []).run(
        max_records_total=len(sent), idle_stop_s=2, handle_signals=False)
    assert seen == [e.id for e in sent]


def test_a_handler_is_told_when_partitions_are_assigned(client_settings, group_name, fresh_topic):
    """A handler with ``on_assigned`` hears of every assignment (remediation reloads its shared
    state then: jobs may have come from another member)."""
    topic = fresh_topic()
    publish(client_settings, topic, events(10))

    class Handler:
        def __init__(self):
            self.assigned, self.seen = [], 0

        def on_assigned(self, partitions):
            self.assigned.append(sorted(tp.partition for tp in partitions if tp.topic == topic))

        def handle(self, records):
            self.seen += len(records)
            return []

    h = Handler()
    GroupRunner(client_settings, group_name, [topic], h).run(max_records_total=10, idle_stop_s=2, handle_signals=False)
    assert h.seen == 10 and h.assigned and h.assigned[-1] == [0, 1, 2]


def test_a_bundle_is_handed_on_as_its_events_in_event_time_and_committed_once_all_went(
        client_settings, group_name, fresh_topic):
    from faultlens.events.bundle import decode_bundled, pack

    topic = fresh_topic(partitions=1)
    sent = events(30, job=f"b-{group_name}")
    bad = orjson.dumps({"v": 1, "id": "no-ts", "job": "j", "node": "n0", "source": "gpu", "kind": "sample", "data": {}})
    # late events first in the bundle: event time, not bundle order, decides the hand-on order
    bundle = pack(sent[0].job, "m1", sent[19].ts, [encode(e) for e in sent[10:20][::-1]] + [bad])
    publish(client_settings, topic, sent[:10] + bundle + sent[20:])
    seen = []

    def runner():
        return GroupRunner(client_settings, group_name, [topic], lambda recs: seen.extend(r.value.id for r in recs) or [],
                           decoders=decode_bundled, event_time=True)

    stats = runner().run(max_records_total=21, idle_stop_s=2, handle_signals=False)
    assert seen == [e.id for e in sent]
    assert stats.records_in == 21 and stats.dead_letters == 1
    dead = [orjson.loads(r.value) for r in written(client_settings, DEAD_LETTER_TOPIC)]
    assert [d["reason"] for d in dead if d["topic"] == topic] == ["invalid event in a bundle: ts: missing"]
    seen.clear()
    runner().run(idle_stop_s=2, handle_signals=False)  # everything was committed
    assert seen == []


def test_outputs_not_acknowledged_after_deferred_batches_bring_back_all_since_the_last_commit(
        client_settings, group_name, fresh_topic):
    # Batches between commits only send their outputs (COMMIT_INTERVAL_S): when the wait for their
    # acknowledgement fails, every one of them since the last commit must come again, not only
    # the batch in hand, and nothing may be committed past them.
    from faultlens.streams.producer import DeliveryError

    topic, out_topic = fresh_topic(partitions=1), fresh_topic(partitions=1)
    sent = events(60)
    publish(client_settings, topic, sent)
    seen: list[str] = []
    producer = Producer(client_settings)
    real_flush, flushes = producer.flush, []

    def failing_once(*a, **kw):
        flushes.append(len(seen))
        if len(flushes) == 1:
            raise DeliveryError([(out_topic, "broker gone for a moment")])
        return real_flush(*a, **kw)

    producer.flush = failing_once

    def handle(records):
        seen.extend(r.value.id for r in records)
        return [Outgoing(out_topic, b"n0", r.raw) for r in records]

    runner = GroupRunner(client_settings, group_name, [topic], handle, producer=producer, max_records=10,
                         commit_interval_s=3600.0)
    try:
        stats = runner.run(idle_stop_s=3, handle_signals=False)
    finally:
        producer.close()
    assert flushes[0] > 10  # several batches of ten were handled before the first wait for acknowledgements
    assert stats.redeliveries == 1
    first = flushes[0]
    assert seen[first:2 * first] == seen[:first] == [e.id for e in sent][:first]  # all of them again, in order
    assert set(seen) == {e.id for e in sent}
    assert {orjson.loads(m.value)["id"] for m in written(client_settings, out_topic)} == {e.id for e in sent}
    again = []
    GroupRunner(client_settings, group_name, [topic], lambda recs: again.extend(recs) or []).run(
        idle_stop_s=2, handle_signals=False)
    assert again == []  # committed to the end once delivered
