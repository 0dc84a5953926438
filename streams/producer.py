"""A batching producer that reports delivery failures instead of losing them silently."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Iterable, Sequence

from kafka import errors as kafka_errors
from kafka.errors import KafkaError

from faultlens.events.envelope import Envelope, encode
from faultlens.events.topics import topic_for
from faultlens.streams.config import KafkaSettings
from faultlens.streams.kafka_client import open_producer
from faultlens.streams.topic_missing import CREATE_HINT, TopicMissingError

log = logging.getLogger(__name__)


# Refusals that sending again cannot mend, by the client's own error: kafka-python's classes and
# librdkafka's codes (KafkaError.name()); anything else (no connection, a timeout, no leader) is retried.
# A topic that does not exist (auto-create off): librdkafka fails the record _UNKNOWN_TOPIC; kafka-python
# waits its max_block_ms for the topic's metadata and raises a timeout, which the backend reads as
# TopicMissingError when the broker answered meanwhile (streams/topic_missing.py).
_KAFKA_PYTHON_KINDS: tuple[tuple[type[KafkaError], str], ...] = (
    (TopicMissingError, "unknown topic"),
    (kafka_errors.MessageSizeTooLargeError, "too large"), (kafka_errors.RecordListTooLargeError, "too large"),
    (kafka_errors.InvalidTopicError, "invalid topic"), (kafka_errors.TopicAuthorizationFailedError, "not authorized"),
    (kafka_errors.InvalidRecordError, "invalid record"))
_CONFLUENT_KINDS = {"MSG_SIZE_TOO_LARGE": "too large",  # librdkafka refuses a record over message.max.bytes so too
                    "RECORD_LIST_TOO_LARGE": "too large", "TOPIC_EXCEPTION": "invalid topic",
                    "_UNKNOWN_TOPIC": "unknown topic", "TOPIC_AUTHORIZATION_FAILED": "not authorized",
                    "INVALID_RECORD": "invalid record", "_KEY_SERIALIZATION": "serialization",
                    "_VALUE_SERIALIZATION": "serialization"}
# What the one who reads the WARNING can do about a kind (the others are the record's own fault).
_KIND_HINTS = {"unknown topic": f"the topic does not exist and the broker creates none: {CREATE_HINT}"}


def rejection_kind(error: object) -> str | None:
    """The kind of refusal for good ``error`` is (a client's error: a kafka-python exception, a
    confluent-kafka KafkaError), or None: retriable, or not known to be permanent."""
    if isinstance(error, KafkaError):
        return next((kind for cls, kind in _KAFKA_PYTHON_KINDS if isinstance(error, cls)), None)
    name = getattr(error, "name", None)  # confluent_kafka.KafkaError, without importing the optional client
    return _CONFLUENT_KINDS.get(name()) if callable(name) else None


@dataclass(frozen=True, slots=True)
class Rejected:
    """One record the broker or the client refused for good: sending it again would fail again."""

    topic: str
    kind: str  # rejection_kind's
    value: bytes


class DeliveryError(RuntimeError):
    """Some records were not acknowledged by the broker; ``failures`` holds (topic, error) of each,
    ``rejected`` those of them refused for good (:func:`rejection_kind`)."""

    def __init__(self, failures: list[tuple[str, str]], rejected: list[Rejected] | None = None):
        self.failures = failures
        self.rejected = rejected or []
        first = failures[0] if failures else ("?", "?")
        super().__init__(f"{len(failures)} record(s) not delivered; first: {first[0]}: {first[1]}")

    @property
    def only_rejected(self) -> bool:
        """Every failure was a refusal for good: the other records were delivered, and nothing
        sending again could mend (no broker lost)."""
        return bool(self.rejected) and len(self.rejected) == len(self.failures)


REFUSAL_SAID_S = 60.0  # a kind of refusal is said again at most this often


class RefusalVoice:
    """Says refused records (:class:`Rejected`) in one WARNING per kind naming topic, kind and size,
    and again at most every ``every_s`` with the count refused since: a stream of oversize records
    must not flood the log of the one who drops them."""

    def __init__(self, logger: logging.Logger, who: str, then: str, every_s: float = REFUSAL_SAID_S):
        self.logger, self.who, self.then, self.every_s = logger, who, then, every_s
        self._said: dict[str, tuple[float, int]] = {}  # kind -> (when last said, refused since)

    def say(self, rejected: Iterable[Rejected], now: float) -> None:
        for r in rejected:
            said, since = self._said.get(r.kind, (-self.every_s, 0))
            if now - said < self.every_s:
                self._said[r.kind] = (said, since + 1)
                continue
            hint = _KIND_HINTS.get(r.kind)
            self.logger.warning("%s: a record on %s refused for good (%s, %d bytes)%s; %s%s", self.who, r.topic, r.kind,
                                len(r.value), f"; {since} more so since the last said" if since else "", self.then,
                                f" ({hint})" if hint else "")
            self._said[r.kind] = (now, 0)


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
        self._rejected: list[Rejected] = []
        self._producer = open_producer(settings, self._failed, **overrides)
        self.client = settings.client
        self.sent = 0
        self.delivered = 0  # acknowledged, as of the last flush
        self._failed_total = 0

    def send(self, topic: str, key: bytes | None, value: bytes, partition: int | None = None) -> None:
        try:
            self._producer.send(topic, key, value, partition)
        except KafkaError as exc:
            # kafka-python refuses a record over its max_request_size in send itself: reported as
            # a failed send (what flush raises), as librdkafka's own refusal is
            if rejection_kind(exc) is None:
                raise
            self._failed(topic, exc, value)
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
        failures, rejected = self._take_failures()
        if failures:
            raise DeliveryError(failures, rejected)

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

    def _failed(self, topic: str, error: object, value: bytes | None = None) -> None:
        text = error if isinstance(error, str) else repr(error) if isinstance(error, BaseException) else str(error)
        kind = rejection_kind(error) if value is not None else None
        with self._lock:
            self._failures.append((topic, text))
            if kind is not None and value is not None:
                self._rejected.append(Rejected(topic, kind, value))
        log.log(self._failure_level, "delivery to %s failed: %s", topic, text)

    def flush(self, timeout: float | None = 30.0) -> None:
        """Wait for every pending send; raise :class:`DeliveryError` for the ones that failed."""
        try:
            self._producer.flush(timeout)
        except KafkaError as exc:
            with self._lock:
                self._failures.append(("*", f"flush: {exc!r}"))
        failures, rejected = self._take_failures()
        self.delivered = self.sent - self._failed_total
        if failures:
            raise DeliveryError(failures, rejected)

    def _take_failures(self) -> tuple[list[tuple[str, str]], list[Rejected]]:
        with self._lock:
            failures, self._failures = self._failures, []
            rejected, self._rejected = self._rejected, []
        self._failed_total += len(failures)
        return failures, rejected

    def close(self, timeout: float = 10.0) -> None:
        self._producer.close(timeout)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
