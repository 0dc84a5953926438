"""A producer closed while its broker is gone stops its client: kafka-python's own close(timeout)
raised on the flush timeout before it stopped its sender thread, which then reconnected for good
(one per outage of a node agent; CI saw one log ECONNREFUSED into another test's caplog)."""

from __future__ import annotations

import threading

import pytest
from kafka.errors import KafkaTimeoutError

from faultlens.streams.admin import ensure_topics
from faultlens.streams.broker import EmbeddedBroker
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Producer

pytestmark = pytest.mark.broker


def _client_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and t.name.startswith(("kafka-", "faultlens"))]


def test_a_producer_closed_with_records_its_dead_broker_never_took_ends_its_threads(tmp_path):
    before = set(threading.enumerate())
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as broker:
        settings = KafkaSettings(bootstrap=broker.bootstrap)
        ensure_topics(settings, ("telemetry.heartbeat",))
        producer = Producer(settings)
        producer.send("telemetry.heartbeat", b"n1", b"delivered")
        producer.flush(30.0)
        assert _client_threads(before)  # the sender and its IO loop run
        broker.proc.kill()
        broker.proc.wait()
    producer.send("telemetry.heartbeat", b"n1", b"never taken")
    with pytest.raises(KafkaTimeoutError):
        producer.close(0.5)  # said as before: records were left
    assert _client_threads(before) == []
