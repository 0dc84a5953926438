"""A record kafka-python fails to deliver is reported with its topic and the error, in that order."""

from __future__ import annotations

from kafka.errors import KafkaTimeoutError
from kafka.future import Future

from faultlens.streams.producer_backends import KafkaPythonProducer


def test_a_failed_send_reports_its_topic_then_the_error():
    seen: list[tuple[str, str]] = []
    backend = KafkaPythonProducer.__new__(KafkaPythonProducer)  # no broker: only the errback is under test
    backend._on_failure = lambda topic, why: seen.append((topic, why))
    future = Future()
    future.add_errback(backend._failed, "telemetry.node")  # as send() binds it
    future.failure(KafkaTimeoutError("batch expired"))
    assert seen == [("telemetry.node", repr(KafkaTimeoutError("batch expired")))]
