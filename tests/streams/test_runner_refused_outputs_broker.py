"""A runner's output too large for its Kafka client is dead-lettered in a short form, the other
outputs arrive, and the input offsets commit: no re-reading from the last commit for good
(streams/runner/delivery.py; the unit tests are in test_runner_refused_outputs.py).

The real runner and its real clients (each in turn) on the session's broker. One input's output is
~2 MB: over kafka-python's 1 MiB max_request_size and librdkafka's 1 MB message.max.bytes at their
defaults, so the client itself refuses it (Tansu enforces no size), as it would a diagnosis with a
huge evidence list."""

from __future__ import annotations

import threading

import orjson
import pytest

from faultlens.events.envelope import Envelope, encode
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Outgoing, Producer
from faultlens.streams.reader import read_topic
from faultlens.streams.runner.loop import DEAD_LETTER_TOPIC, GroupRunner
from tests.progress import wait_until

pytestmark = pytest.mark.broker

STALL_S = 60.0  # a minute without the runner moving is a block


@pytest.fixture
def kafka_settings(broker) -> KafkaSettings:
    """A 3 s session, as tests/streams/test_runner.py's: Tansu holds a join for half of it."""
    return KafkaSettings(bootstrap=broker.bootstrap, session_timeout_ms=3000)


def sample(i: int) -> Envelope:
    return Envelope(ts=1_790_000_000.0 + i, job="j", node=f"n{i % 4}", source="gpu", kind="sample", data={"i": i})


def test_an_output_over_the_clients_size_limit_is_dead_lettered_and_the_offsets_commit(client_settings, group_name, fresh_topic):
    src, dst = fresh_topic(partitions=1), fresh_topic(partitions=1)
    sent = [sample(i) for i in range(10)]
    with Producer(client_settings) as p:
        for e in sent:
            p.send(src, e.key, encode(e))
        p.flush()

    def handle(records):
        out = []
        for r in records:
            i = r.value.data["i"]
            body = {"job": "j", "fault_class": "xid_error", "i": i, "evidence": ["e" * 100] * (20_000 if i == 4 else 1)}
            out.append(Outgoing(dst, r.key, orjson.dumps(body)))
        return out

    runner = GroupRunner(client_settings, group_name, [src], handle)
    stats = runner.stats
    run = threading.Thread(target=runner.run, kwargs={"max_records_total": len(sent), "idle_stop_s": 2, "handle_signals": False})
    run.start()
    try:
        # Re-reading from the last commit would go on for good: the first redelivery ends the wait.
        wait_until(
            lambda: not run.is_alive() or stats.redeliveries,
            progress=lambda: (stats.records_in, stats.outputs, stats.commits),
            stall_s=STALL_S,
            what="the run to end",
        )
    finally:
        runner.stop()
        run.join(STALL_S)
    assert stats.redeliveries == 0 and stats.refused_outputs == 1 and stats.records_in == len(sent)
    assert sorted(orjson.loads(m.value)["i"] for m in read_topic(client_settings, dst, idle_s=0.5)) == [
        0, 1, 2, 3, 5, 6, 7, 8, 9
    ]  # fmt: skip
    letters = [orjson.loads(m.value) for m in read_topic(client_settings, DEAD_LETTER_TOPIC, idle_s=0.5)]
    [mine] = [d for d in letters if d.get("group") == group_name]
    assert mine["topic"] == dst and mine["reason"] == "output refused for good: too large"
    assert mine["size"] > 2_000_000 and mine["truncated"]
    assert mine["fields"] == {"job": "j", "fault_class": "xid_error", "i": 4}
    # committed: the group's next member has nothing to read again
    again = []
    GroupRunner(client_settings, group_name, [src], lambda recs: again.extend(recs) or []).run(
        idle_stop_s=2, handle_signals=False
    )
    assert again == []
