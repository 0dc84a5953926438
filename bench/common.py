"""Shared bench helpers: a broker for the run and the raw kafka-python consume rate to compare with."""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

from kafka import KafkaConsumer

from faultlens.streams.admin import ensure_topics
from faultlens.streams.broker import EmbeddedBroker
from faultlens.streams.config import KafkaSettings


@contextlib.contextmanager
def bench_broker(bootstrap: str | None = None) -> Iterator[KafkaSettings]:
    """Settings for the given cluster, or for a fresh embedded broker that lives for the bench."""
    if bootstrap:
        settings = KafkaSettings(bootstrap=bootstrap)
        ensure_topics(settings)
        yield settings
        return
    with EmbeddedBroker() as b:
        settings = KafkaSettings(bootstrap=b.bootstrap)
        ensure_topics(settings)
        yield settings


def raw_consume_rate(settings: KafkaSettings, topic: str, expected: int, group: str, timeout_s: float = 120.0) -> tuple[int, float]:
    """(messages, seconds) for plain kafka-python reading ``expected`` messages through a group.

    The baseline does nothing with a message but count it, so the ratio to it is the cost of
    faultlens's decode + handle + produce + commit.
    """
    consumer = KafkaConsumer(**{**settings.consumer_kwargs(group), "max_poll_records": 2000})
    consumer.subscribe([topic])
    n = 0
    start = None
    deadline = time.monotonic() + timeout_s
    try:
        while n < expected and time.monotonic() < deadline:
            polled = consumer.poll(timeout_ms=200)
            if polled and start is None:
                start = time.perf_counter()
            for records in polled.values():
                n += len(records)
            if polled:
                consumer.commit()
        elapsed = time.perf_counter() - (start or time.perf_counter())
    finally:
        consumer.close()
    return n, elapsed
