"""Read a topic from the start without a consumer group (tests, `faultlens record`, checks)."""

from __future__ import annotations

import time
from typing import Iterable, Iterator

from kafka import TopicPartition

from streams.config import KafkaSettings
from streams.kafka_client import Message, open_consumer


def iter_topics(settings: KafkaSettings, topics: Iterable[str], *, idle_s: float = 2.0,
                max_messages: int | None = None, timeout_s: float | None = None,
                from_beginning: bool = True) -> Iterator[Message]:
    """Yield every message of ``topics`` until none arrived for ``idle_s`` (or a limit is hit);
    each has ``topic, partition, offset, key, value, timestamp`` whichever client reads."""
    consumer = open_consumer(settings, None)
    try:
        parts = []
        for topic in topics:
            for p in sorted(consumer.partitions_for_topic(topic) or ()):
                parts.append(TopicPartition(topic, p))
        if not parts:
            return
        consumer.assign(parts)
        if from_beginning:
            consumer.seek_to_beginning(*parts)
        else:
            consumer.seek_to_end(*parts)
        n = 0
        start = last = time.monotonic()
        while True:
            polled = consumer.poll(timeout_ms=200)
            now = time.monotonic()
            for records in polled.values():
                for r in records:
                    yield r
                    n += 1
                    if max_messages is not None and n >= max_messages:
                        return
                last = now
            if now - last >= idle_s or (timeout_s is not None and now - start >= timeout_s):
                return
    finally:
        consumer.close()


def read_topic(settings: KafkaSettings, topic: str, **kwargs) -> list[Message]:
    return list(iter_topics(settings, [topic], **kwargs))
