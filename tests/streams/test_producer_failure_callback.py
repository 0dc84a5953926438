"""A record kafka-python fails to deliver is reported with its topic, the client's own error and the
record's value, in that order (streams/producer.py tells a refusal for good by the error's type)."""

from __future__ import annotations

from kafka.errors import KafkaTimeoutError
from kafka.future import Future

from faultlens.streams.producer_backends import KafkaPythonProducer


def test_a_failed_send_reports_its_topic_then_the_error_and_the_value():
    seen: list[tuple[str, object, bytes | None]] = []
    backend = KafkaPythonProducer.__new__(KafkaPythonProducer)  # no broker: only the errback is under test
    backend._on_failure = lambda topic, why, value: seen.append((topic, why, value))
    future = Future()
    future.add_errback(backend._failed, "telemetry.node", b"v")  # as send() binds it
    error = KafkaTimeoutError("batch expired")
    future.failure(error)
    assert seen == [("telemetry.node", error, b"v")]
