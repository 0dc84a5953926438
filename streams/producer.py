"""A batching producer that reports delivery failures instead of losing them silently."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Iterable, Sequence

from kafka.errors import KafkaError

from faultlens.events.envelope import Envelope, encode
from faultlens.events.topics import topic_for
from faultlens.streams.config import KafkaSettings
from faultlens.streams.kafka_client import open_producer

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
    """A producer of the configured client (``settings.client``, streams/kafka_client.py) with
    delivery accounting: :meth:`flush` raises if any send failed. ``failure_level``: the level each
    failed send is logged at; DEBUG for a caller that keeps what it sent until acknowledged and says
    itself what is lost (trainer_hooks/outbox.py), so a record sent again later is not reported lost."""

    def __init__(self, settings: KafkaSettings, *, failure_level: int = logging.ERROR, **overrides):
        self._lock = threading.Lock()
        self._failure_level = failure_level
        self._failures: list[tuple[str, str]] = []
        self._producer = open_producer(settings, self._failed, **overrides)
        self.client = settings.client
        self.sent = 0
        self.delivered = 0  # acknowledged, as of the last flush
        self._failed_total = 0

    def send(self, topic: str, key: bytes | None, value: bytes, partition: int | None = None) -> None:
        self._producer.send(topic, key, value, partition)
        self.sent += 1

    def send_many(self, topics: Sequence[str], keys: Sequence[bytes | None], values: Sequence[bytes]) -> int:
        """Send each (topic, key, value) by key; the fast path for many records (a replay's batch)."""
        self._producer.send_many(topics, keys, values)
        self.sent += len(values)
        return len(values)

    def poll(self) -> None:
        """Serve the client's delivery reports without waiting; raise :class:`DeliveryError` for the
        sends that failed so far (what :meth:`flush` reports, without waiting for the rest)."""
        self._producer.poll()
        failures = self._take_failures()
        if failures:
            raise DeliveryError(failures)

    def partitions(self, topic: str) -> list[int]:
        return self._producer.partitions(topic)

    def send_event(self, event: Envelope) -> None:
        self.send(topic_for(event), event.key, encode(event))

    def send_all(self, records: Iterable[Outgoing]) -> int:
        n = 0
        for r in records:
            self.send(r.topic, r.key, r.value, r.partition)
            n += 1
        return n

    def _failed(self, topic: str, error: str) -> None:
        with self._lock:
            self._failures.append((topic, error))
        log.log(self._failure_level, "delivery to %s failed: %s", topic, error)

    def flush(self, timeout: float | None = 30.0) -> None:
        """Wait for every pending send; raise :class:`DeliveryError` for the ones that failed."""
        try:
            self._producer.flush(timeout)
        except KafkaError as exc:
            with self._lock:
                self._failures.append(("*", f"flush: {exc!r}"))
        failures = self._take_failures()
        self.delivered = self.sent - self._failed_total
        if failures:
            raise DeliveryError(failures)

    def _take_failures(self) -> list[tuple[str, str]]:
        with self._lock:
            failures, self._failures = self._failures, []
        self._failed_total += len(failures)
        return failures

    def close(self, timeout: float = 10.0) -> None:
        self._producer.close(timeout)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
