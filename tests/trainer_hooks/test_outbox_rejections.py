"""A record refused for good (too large, an invalid or unknown topic, no authorization) is dropped,
counted and said, and the rest of the spool goes on: sent again it would fail again, block the spool
behind it and report an outage there is not (trainer_hooks/outbox.py, streams/producer.py).

Unit tests: the classification seam with each client's own error types, the Producer's accounting
with a fake backend, the outbox with a fake sink. The real broker and clients are in
test_outbox_rejections_broker.py."""

from __future__ import annotations

import logging
import threading

import pytest
from kafka import errors as kafka_errors

from faultlens.events.envelope import Envelope, encode
from faultlens.events.topics import topic_for
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import DeliveryError, Producer, Rejected, rejection_kind
from faultlens.trainer_hooks.outbox import Outbox
from tests.progress import wait_until

OUTBOX_LOG = "faultlens.trainer_hooks.outbox"


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (kafka_errors.MessageSizeTooLargeError("over max_request_size"), "too large"),
        (kafka_errors.RecordListTooLargeError(), "too large"),
        (kafka_errors.InvalidTopicError(), "invalid topic"),
        (kafka_errors.TopicAuthorizationFailedError({"telemetry.train"}), "not authorized"),
        (kafka_errors.InvalidRecordError(), "invalid record"),
        (kafka_errors.KafkaConnectionError("refused"), None),
        (kafka_errors.KafkaTimeoutError("batch expired"), None),
        (kafka_errors.RequestTimedOutError(), None),
        (kafka_errors.NotLeaderForPartitionError(), None),
        (kafka_errors.UnknownTopicOrPartitionError(), None),  # kafka-python: a topic being created, retried
        ("flush: 3 record(s) still undelivered after 5s", None),
    ],
)
def test_kafka_python_errors_are_told_retriable_or_refused_for_good(error, kind):
    assert rejection_kind(error) == kind


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("MSG_SIZE_TOO_LARGE", "too large"),
        ("RECORD_LIST_TOO_LARGE", "too large"),
        ("TOPIC_EXCEPTION", "invalid topic"),
        ("_UNKNOWN_TOPIC", "unknown topic"),
        ("TOPIC_AUTHORIZATION_FAILED", "not authorized"),
        ("INVALID_RECORD", "invalid record"),
        ("_VALUE_SERIALIZATION", "serialization"),
        ("_TRANSPORT", None),
        ("_MSG_TIMED_OUT", None),
        ("_ALL_BROKERS_DOWN", None),
        ("REQUEST_TIMED_OUT", None),
        ("NOT_LEADER_FOR_PARTITION", None),
        ("UNKNOWN_TOPIC_OR_PART", None),
    ],
)
def test_confluent_error_codes_are_told_retriable_or_refused_for_good(code, kind):
    ck = pytest.importorskip("confluent_kafka")
    assert rejection_kind(ck.KafkaError(getattr(ck.KafkaError, code))) == kind


class Backend:
    """A producer backend that refuses one value for good (as kafka-python's send raises for a record over
    max_request_size, or through on_failure as librdkafka does) and loses another to a timeout."""

    def __init__(self, on_failure, refuse: bytes, raise_in_send: bool, lose: bytes = b""):
        self.on_failure, self.refuse, self.raise_in_send, self.lose = on_failure, refuse, raise_in_send, lose

    def send(self, topic, key, value, partition=None):
        if value == self.refuse:
            error = kafka_errors.MessageSizeTooLargeError(f"{len(value)} bytes")
            if self.raise_in_send:
                raise error
            self.on_failure(topic, error, value)
        elif value == self.lose:
            self.on_failure(topic, kafka_errors.KafkaTimeoutError("batch expired"), value)

    def flush(self, timeout):
        pass


@pytest.mark.parametrize("raise_in_send", [True, False], ids=["refused-in-send", "refused-by-callback"])
def test_the_producer_reports_a_refusal_apart_from_a_loss(monkeypatch, raise_in_send):
    monkeypatch.setattr(
        "faultlens.streams.producer.open_producer",
        lambda settings, on_failure, **kw: Backend(on_failure, b"big", raise_in_send, b"late"),
    )
    producer = Producer(KafkaSettings(bootstrap="127.0.0.1:1"), failure_level=logging.DEBUG)
    producer.send("telemetry.train", None, b"ok")
    producer.send("telemetry.train", None, b"big")
    with pytest.raises(DeliveryError) as refused:
        producer.flush(1.0)
    assert refused.value.rejected == [Rejected("telemetry.train", "too large", b"big")] and refused.value.only_rejected
    assert producer.sent == 2 and producer.delivered == 1
    producer.send("telemetry.train", None, b"big")
    producer.send("telemetry.train", None, b"late")
    with pytest.raises(DeliveryError) as mixed:
        producer.flush(1.0)
    assert len(mixed.value.failures) == 2 and len(mixed.value.rejected) == 1 and not mixed.value.only_rejected


def test_a_retriable_error_raised_in_send_is_raised():
    """kafka-python raises a timeout from send when it gets no metadata: that is no refusal."""

    class Stuck(Backend):
        def send(self, topic, key, value, partition=None):
            raise kafka_errors.KafkaTimeoutError("Failed to update metadata after 60.0 secs.")

    producer = Producer.__new__(Producer)
    producer._producer, producer.sent = Stuck(None, b"", True), 0
    with pytest.raises(kafka_errors.KafkaTimeoutError):
        producer.send("telemetry.train", None, b"x")


# --- the outbox ---------------------------------------------------------------------------------
def step(i: int, pad: int = 0) -> Envelope:
    data = {"rank": 0, "step": i, **({"pad": "x" * pad} if pad else {})}
    return Envelope(ts=1.7e9, job="j", node="n0", source="train", kind="step", data=data)


class RefusingSink:
    """A producer that refuses for good every event over ``limit`` bytes, and loses every batch while
    ``up`` is clear (a broker away)."""

    def __init__(self, limit: int, up: threading.Event, kind: str = "too large"):
        self.limit, self.up, self.kind = limit, up, kind
        self.pending: list[Envelope] = []
        self.delivered: list[int] = []

    def send_event(self, event: Envelope) -> None:
        self.pending.append(event)

    def flush(self, timeout=None) -> None:
        batch, self.pending = self.pending, []
        rejected = [Rejected(topic_for(e), self.kind, encode(e)) for e in batch if len(encode(e)) > self.limit]
        lost = [] if self.up.is_set() else [("telemetry.train", "KafkaTimeoutError('batch expired')")]
        if not self.up.is_set():
            raise DeliveryError([(r.topic, repr(r)) for r in rejected] + lost, rejected)
        self.delivered += [e.data["step"] for e in batch if len(encode(e)) <= self.limit]
        if rejected:
            raise DeliveryError([(r.topic, repr(r)) for r in rejected], rejected)

    def close(self, timeout=0.0) -> None:
        pass


def refusing_outbox(limit: int, up: threading.Event, **kwargs) -> tuple[Outbox, list[RefusingSink]]:
    sinks: list[RefusingSink] = []

    def connect() -> RefusingSink:
        if not up.is_set():
            raise ConnectionError("refused")
        sinks.append(RefusingSink(limit, up))
        return sinks[-1]

    return Outbox(None, connect=connect, retry_s=0.01, **kwargs), sinks


def test_an_event_refused_for_good_is_dropped_and_the_spool_goes_on(caplog):
    up = threading.Event()
    up.set()
    box, sinks = refusing_outbox(2000, up, batch=2)  # the big one shares a batch with a step that arrives
    with caplog.at_level(logging.WARNING, logger=OUTBOX_LOG):
        for i in range(7):
            box.send_event(step(i, pad=5000 if i in (3, 5) else 0))
        wait_until(lambda: box.pending == 0, progress=lambda: box.delivered, stall_s=30, what="the spool to drain")
    assert [s for sink in sinks for s in sink.delivered] == [0, 1, 2, 4, 6]
    assert box.rejected == 2 and box.delivered == 5 and box.dropped == 0
    assert box.outages == 0 and not box.down and len(sinks) == 1  # no outage, the producer kept
    said = [r.getMessage() for r in caplog.records if r.name == OUTBOX_LOG]
    assert len(said) == 1, said  # one warning per kind within a minute
    assert "telemetry.train" in said[0] and "too large" in said[0] and "bytes" in said[0]
    with caplog.at_level(logging.WARNING, logger=OUTBOX_LOG):
        box.close()
    assert "2 refused" in caplog.text


def test_a_refused_event_is_not_spooled_again_through_an_outage():
    up = threading.Event()
    up.set()
    box, sinks = refusing_outbox(2000, up)
    box.send_event(step(0))
    assert box.flush(10.0)
    up.clear()  # the broker goes: the big event is refused and the batch lost in the same flush
    box.send_event(step(1, pad=5000))
    box.send_event(step(2))
    wait_until(
        lambda: box.rejected == 1 and box.down, progress=lambda: box.pending, stall_s=30, what="the refusal and the outage"
    )
    assert box.pending == 1  # step 2 waits; the big one is not kept
    up.set()
    wait_until(lambda: box.pending == 0, progress=lambda: box.delivered, stall_s=30, what="the catch-up")
    assert [s for sink in sinks for s in sink.delivered] == [0, 2] and box.rejected == 1 and box.outages == 1
    box.close()
