"""Read a topic from the start without a consumer group (tests, `faultlens record`, checks)."""

from __future__ import annotations

import logging
import time
from typing import Iterable, Iterator

from kafka import TopicPartition

from faultlens.streams.config import KafkaSettings
from faultlens.streams.kafka_client import open_consumer
from faultlens.streams.messages import ReadMessage
from faultlens.streams.reader_ends import seek_past_end

log = logging.getLogger(__name__)
# How long a read from the beginning waits, past its idle time, for end offsets it has not reached.
UNREACHED_IDLE_S = 5.0


def iter_topics(settings: KafkaSettings, topics: Iterable[str], *, idle_s: float = 2.0,
                max_messages: int | None = None, timeout_s: float | None = None,
                from_beginning: bool = True) -> Iterator[ReadMessage]:
    """Yield every message of ``topics`` until none arrived for ``idle_s`` (or a limit is hit);
    each has ``topic, partition, offset, key, value, timestamp`` whichever client reads.

    Read from the beginning, the topics' end offsets at the start are read first: a quiet spell
    shorter than ``UNREACHED_IDLE_S`` on a loaded broker does not end the read before them. Read
    from the end, only what comes after the last record there is read (streams/reader_ends.py)."""
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
            seek_past_end(consumer, parts)  # not the client's seek: the embedded broker lists less
        ends = _end_offsets(consumer, parts) if from_beginning else {}
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
                    tp = TopicPartition(r.topic, r.partition)
                    if tp in ends and r.offset + 1 >= ends[tp]:
                        del ends[tp]
                last = now
            quiet = now - last
            # An end offset can stay out of reach (a transaction marker, a compacted tail): wait
            # for it only so long.
            if quiet >= idle_s and (not ends or quiet >= max(idle_s, UNREACHED_IDLE_S)):
                return
            if timeout_s is not None and now - start >= timeout_s:
                return
    finally:
        consumer.close()


def _end_offsets(consumer, parts: list[TopicPartition]) -> dict[TopicPartition, int]:
    """The partitions' end offsets now, less the empty ones; {} when the broker will not say."""
    try:
        ends = consumer.end_offsets(parts)
    except Exception as exc:  # noqa: BLE001 - a hint only: without it the idle rule alone ends the read
        log.debug("end offsets of %s: %s", parts, exc)
        return {}
    try:
        begins = consumer.beginning_offsets(parts)
    except Exception:  # noqa: BLE001
        begins = {}
    return {tp: end for tp, end in ends.items() if end is not None and end > begins.get(tp, 0)}


def read_topic(settings: KafkaSettings, topic: str, **kwargs) -> list[ReadMessage]:
    return list(iter_topics(settings, [topic], **kwargs))
