"""A batching producer that reports delivery failures instead of losing them silently."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Iterable

from kafka import KafkaProducer
from kafka.errors import KafkaError

from streams.config import KafkaSettings
from streams.events import Envelope, encode
from streams.topics import topic_for

log = logging.getLogger(__name__)


class DeliveryError(RuntimeError):
    """Some records were not acknowledged by the broker; ``failures`` holds (topic, error)."""

    def __init__(self, failures: list[tuple[str, str]]):
        self.failures = failures
        first = failures[0] if failures else ("?", "?")
        super().__init__(f"{len(failures)} record(s) not delivered; first: {first[0]}: {first[1]}")


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A record to produce: what handlers return and the runner sends before committing."""

    topic: str
    key: bytes | None
    value: bytes
    partition: int | None = None  # None: by key (a watermark goes to every partition by number)

    @classmethod
    def event(cls, event: Envelope) -> "Outgoing":
        return cls(topic_for(event), event.key, encode(event))


class Producer:
    """kafka-python's producer with delivery accounting: :meth:`flush` raises if any send failed."""

    def __init__(self, settings: KafkaSettings, **overrides):
        self._producer = KafkaProducer(**{**settings.producer_kwargs(), **overrides})
        self._lock = threading.Lock()
        self._failures: list[tuple[str, str]] = []
        self.sent = 0
        self.delivered = 0

    def send(self, topic: str, key: bytes | None, value: bytes, partition: int | None = None) -> None:
        future = self._producer.send(topic, key=key, value=value, partition=partition)
        self.sent += 1
        future.add_callback(self._ok)
        future.add_errback(self._failed, topic)

    def partitions(self, topic: str) -> list[int]:
        return sorted(self._producer.partitions_for(topic))

    def send_event(self, event: Envelope) -> None:
        self.send(topic_for(event), event.key, encode(event))

    def send_all(self, records: Iterable[Outgoing]) -> int:
        n = 0
        for r in records:
            self.send(r.topic, r.key, r.value, r.partition)
            n += 1
        return n

    def _ok(self, _metadata) -> None:
        with self._lock:
            self.delivered += 1

    def _failed(self, exc: BaseException, topic: str) -> None:
        with self._lock:
            self._failures.append((topic, repr(exc)))
        log.error("delivery to %s failed: %r", topic, exc)

    def flush(self, timeout: float | None = 30.0) -> None:
        """Wait for every pending send; raise :class:`DeliveryError` for the ones that failed."""
        try:
            self._producer.flush(timeout=timeout)
        except KafkaError as exc:
            with self._lock:
                self._failures.append(("*", f"flush: {exc!r}"))
        with self._lock:
            failures, self._failures = self._failures, []
        if failures:
            raise DeliveryError(failures)

    def close(self, timeout: float = 10.0) -> None:
        try:
            self._producer.flush(timeout=timeout)
        finally:
            self._producer.close(timeout=timeout)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
