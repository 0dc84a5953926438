"""A topic that does not exist on a broker that creates none is a refusal for good naming the topic,
never an outage (streams/topic_missing.py). kafka-python waits its max_block_ms for the topic's
metadata and raises the timeout it raises when no broker answers; the backend tells the two apart by
whether the broker answered meanwhile. Tansu creates every topic asked for (it has no setting to
refuse), so the client is a stand-in here with kafka-python's own attributes."""

from __future__ import annotations

import logging

import pytest
from kafka.errors import KafkaTimeoutError

from faultlens.diagnosis.edge.consumer import TopicLayoutError, _require_topics
from faultlens.streams import producer as producer_module
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import DeliveryError, Producer, RefusalVoice, Rejected
from faultlens.streams.producer_backends import KafkaPythonProducer
from faultlens.streams.topic_missing import TopicMissingError, absent_after_wait, monotonic_ms


class _Metadata:
    """kafka-python's ClusterMetadata as the check reads it."""

    def __init__(self, answered_ms: float, topics: dict[str, set[int]] | None = None) -> None:
        self._last_successful_refresh_ms = answered_ms
        self.topics = topics or {}

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self.topics.get(topic)


class _Client:
    """A KafkaProducer whose every wait for a topic's metadata timed out."""

    config = {"max_block_ms": 5_000}

    def __init__(self, broker_answered: bool) -> None:
        self._metadata = _Metadata(monotonic_ms() if broker_answered else 0.0)
        self.waits = 0

    def _timed_out(self, *args, **kwargs):
        self.waits += 1
        raise KafkaTimeoutError("Failed to update metadata after 5.0 secs.")

    send = partitions_for = _timed_out

    def flush(self, timeout=None) -> None:
        pass

    def close(self, timeout=None) -> None:
        self.closed = True


@pytest.fixture
def producer_over(monkeypatch):
    def make(client: _Client) -> Producer:
        def open_producer(settings, on_failure, **overrides):
            backend = object.__new__(KafkaPythonProducer)
            backend._p, backend._on_failure, backend._own_partitioner = client, on_failure, True
            backend._partition_of, backend._missing = {}, {}
            return backend

        monkeypatch.setattr(producer_module, "open_producer", open_producer)
        return Producer(KafkaSettings(bootstrap="127.0.0.1:1"))

    return make


def test_the_wait_is_read_by_whether_the_broker_answered_meanwhile():
    since = monotonic_ms()
    assert absent_after_wait(_Metadata(since + 1), "jobs", since)
    assert not absent_after_wait(_Metadata(since - 1), "jobs", since)  # no answer during the wait: an outage
    assert not absent_after_wait(_Metadata(since + 1, {"jobs": {0}}), "jobs", since)  # it came meanwhile
    assert not absent_after_wait(object(), "jobs", since)  # a client that keeps no such time: as before


def test_a_missing_topic_is_refused_for_good_naming_it_and_waited_for_once(producer_over):
    client = _Client(broker_answered=True)
    producer = producer_over(client)
    producer.send("telemetry.train", b"n001", b"{}")
    producer.send("telemetry.train", b"n001", b"{}")  # refused at once: no second max_block_ms wait
    assert client.waits == 1
    with pytest.raises(DeliveryError) as caught:
        producer.flush()
    err = caught.value
    assert err.only_rejected and {(r.topic, r.kind) for r in err.rejected} == {("telemetry.train", "unknown topic")}
    assert "'telemetry.train' does not exist on the broker" in err.failures[0][1]


def test_a_broker_that_does_not_answer_is_still_an_outage(producer_over):
    producer = producer_over(_Client(broker_answered=False))
    with pytest.raises(KafkaTimeoutError):
        producer.send("telemetry.train", b"n001", b"{}")


def test_the_warning_says_what_to_do(caplog):
    voice = RefusalVoice(logging.getLogger("t"), "faultlens telemetry", "dropped")
    with caplog.at_level(logging.WARNING):
        voice.say([Rejected("telemetry.train", "unknown topic", b"{}")], now=0.0)
    [line] = caplog.messages
    assert "telemetry.train refused for good (unknown topic" in line and "docs/kafka.md" in line


class _Runner:
    def __init__(self, producer: Producer) -> None:
        self.producer = producer


def test_a_stage_whose_topic_is_missing_stops_at_start_naming_it(producer_over):
    client = _Client(broker_answered=True)
    with pytest.raises(TopicLayoutError, match="'summaries' does not exist"):
        _require_topics(_Runner(producer_over(client)), ["summaries", "diagnoses"])
    assert client.closed  # the stage's producer closed, not left running


def test_the_error_is_a_refusal_not_a_retriable_one():
    assert not TopicMissingError("jobs").retriable
