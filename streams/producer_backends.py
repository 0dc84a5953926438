"""The two producer backends behind :class:`streams.producer.Producer` (picked by
streams.kafka_client.open_producer), with one interface: ``send``, ``send_many``, ``poll``,
``partitions``, ``flush``, ``close``; a record that cannot be delivered reaches ``on_failure``.

Apart from streams.kafka_client so that the choice of client reads apart from how each client
is driven at speed.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from kafka import KafkaProducer
from kafka.errors import KafkaError, KafkaTimeoutError

from faultlens.events.topics import key_partition
from faultlens.streams.client_start import start_client
from faultlens.streams.config import KafkaSettings
from faultlens.streams.confluent_config import confluent_config, load_confluent
from faultlens.streams.topic_missing import TopicMissingError, absent_after_wait, monotonic_ms

log = logging.getLogger(__name__)

# (topic, error, value): the client's own error (an exception, a confluent KafkaError) or a text, and
# the record's value where one record failed, so a caller can tell a refusal for good and which record
OnFailure = Callable[[str, object, "bytes | None"], None]
# A topic found missing is refused at once (no new max_block_ms wait a record) for this long, unless
# the client's metadata learnt it meanwhile; then one send waits again to see.
MISSING_RECHECK_S = 30.0


# kafka-python producer keyword → librdkafka property, for the overrides callers pass to Producer.
_PRODUCER_KEYWORDS = {"request_timeout_ms": "request.timeout.ms", "reconnect_backoff_max_ms": "reconnect.backoff.max.ms",
                      "linger_ms": "linger.ms", "retries": "retries", "acks": "acks",
                      "max_block_ms": "message.timeout.ms", "batch_size": "batch.size",
                      "max_request_size": "message.max.bytes"}


def _producer_config(settings: KafkaSettings, overrides: dict[str, Any]) -> dict[str, Any]:
    conf = {**confluent_config(settings), "acks": settings.acks, "linger.ms": 5, "retries": 5,
            # replay sends a trace as fast as it reads it: a deep local queue, batches of 1 MB;
            # the queue's bytes are bounded too (a full one pushes back on send), as replay flushes
            # only at the end
            "queue.buffering.max.messages": 500_000, "queue.buffering.max.kbytes": 256 * 1024,
            "batch.size": 1_000_000,
            # only failures call back: a callback per delivered message costs a Python call each
            "delivery.report.only.error": True,
            # kafka-python's (and the Java client's) key hash: a node's events land on one
            # partition whichever client each of its senders uses (librdkafka's own default,
            # consistent_random, is a CRC32 and puts the same key elsewhere)
            "partitioner": "murmur2_random"}
    if settings.compression and settings.compression != "none":
        conf["compression.type"] = settings.compression
    for key, value in overrides.items():
        if key in _PRODUCER_KEYWORDS:
            conf[_PRODUCER_KEYWORDS[key]] = value
        else:
            log.debug("producer setting %s has no confluent-kafka counterpart; ignored", key)
    return conf


class KafkaPythonProducer:
    def __init__(self, settings: KafkaSettings, on_failure: OnFailure, **overrides):
        self._p = start_client(KafkaProducer, **{**settings.producer_kwargs(), **overrides})
        self._on_failure = on_failure
        # send_many picks a keyed record's partition itself, as the default partitioner would
        self._own_partitioner = "partitioner" not in overrides
        self._partition_of: dict[str, tuple[list[int], dict[bytes, int]]] = {}
        self._missing: dict[str, float] = {}  # topic -> when it was found missing (monotonic s)

    def send(self, topic: str, key: bytes | None, value: bytes, partition: int | None = None) -> None:
        if self._missing and topic in self._missing:
            self._refuse_if_missing(topic)
        try:
            future = self._p.send(topic, key=key, value=value, partition=partition)
        except KafkaTimeoutError:
            self._missing_or_raise(topic)
            raise
        future.add_errback(self._failed, topic, value)

    def _refuse_if_missing(self, topic: str) -> None:
        """Raise :class:`TopicMissingError` for a topic found missing lately and still unknown."""
        metadata = getattr(self._p, "_metadata", None)
        if (time.monotonic() - self._missing[topic] < MISSING_RECHECK_S and metadata is not None
                and metadata.partitions_for_topic(topic) is None):
            raise TopicMissingError(topic)
        del self._missing[topic]

    def _missing_or_raise(self, topic: str) -> None:
        """After the client's wait for ``topic``'s metadata timed out: raise :class:`TopicMissingError`
        where the broker answered meanwhile without the topic; else return (the caller re-raises the
        timeout: no broker answered, an outage)."""
        waited_ms = float(self._p.config.get("max_block_ms", 0))
        if absent_after_wait(getattr(self._p, "_metadata", None), topic, monotonic_ms() - waited_ms):
            self._missing[topic] = time.monotonic()
            raise TopicMissingError(topic) from None

    def _partitions_for(self, topic: str) -> list[int]:
        if self._missing and topic in self._missing:
            self._refuse_if_missing(topic)
        try:
            return sorted(self._p.partitions_for(topic))
        except KafkaTimeoutError:
            self._missing_or_raise(topic)
            raise

    def send_many(self, topics: list[str], keys: list[bytes | None], values: list[bytes]) -> None:
        """``send`` of each (topic, key, value), by key. kafka-python's partitioner hashes every
        key in Python (murmur2) and sorts the topic's partitions for every record; the partition of
        a key is the same for the whole batch, so it is computed once per distinct key here."""
        send, failed = self._p.send, self._failed
        partition = self._partitioner(set(topics)) if self._own_partitioner else None
        for topic, key, value in zip(topics, keys, values, strict=True):
            send(topic, value, key, None, partition(topic, key) if partition and key is not None else None
                 ).add_errback(failed, topic, value)

    def _partitioner(self, topics: set[str]) -> Callable[[str, bytes], int]:
        """DefaultPartitioner's choice (murmur2 of the key over the sorted partitions) per
        (topic, key), remembered while the topic's partitions stay the same."""
        known = self._partition_of
        for topic in topics:
            parts = self._partitions_for(topic)  # waits for metadata, as send would
            if topic not in known or known[topic][0] != parts:
                known[topic] = (parts, {})

        def partition(topic: str, key: bytes) -> int:
            parts, by_key = known[topic]
            p = by_key.get(key)
            if p is None:
                p = by_key[key] = parts[key_partition(key, len(parts))]
            return p

        return partition

    def poll(self) -> None:
        """Failures reach on_failure from kafka-python's own I/O thread: nothing to serve here."""

    def _failed(self, topic: str, value: bytes, exc: BaseException) -> None:
        # kafka-python's add_errback(f, topic, value) binds those first: f(topic, value, exc)
        self._on_failure(topic, exc, value)

    def partitions(self, topic: str) -> list[int]:
        return self._partitions_for(topic)

    def flush(self, timeout: float | None) -> None:
        self._p.flush(timeout=timeout)

    def close(self, timeout: float) -> None:
        """Flush for up to ``timeout``, then stop the client, whatever is still pending.

        kafka-python's own close(timeout) flushes first and raises KafkaTimeoutError when records
        are still pending, before it stops its sender thread: that thread then ran for good,
        reconnecting to a broker long gone (a node agent closes with timeout 0 at each outage; the
        tests' leak check, tests/leak_check.py, found it). Here the sender is forced closed, which
        fails the pending records through their callbacks, and the timeout is raised after."""
        try:
            self._p.flush(timeout=timeout)
        except KafkaTimeoutError:
            self._p._sender.force_close()  # no public way: what close() does once a flush returned
            self._p._sender.join(max(timeout, 1.0))
            self._p.close(timeout=0)  # its flush finds the aborted batches done; the rest of close runs
            raise
        self._p.close(timeout=timeout)


class ConfluentProducer:
    def __init__(self, settings: KafkaSettings, on_failure: OnFailure, **overrides):
        ck = load_confluent()
        self._ck = ck
        self._on_failure = on_failure
        conf = _producer_config(settings, overrides)
        conf["on_delivery"] = self._delivered
        conf["error_cb"] = self._client_error
        try:
            self._p = ck.Producer(conf)
        except ck.KafkaException as exc:
            raise ValueError(f"confluent-kafka producer: {exc}") from None

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self._on_failure(msg.topic(), err, msg.value())

    def _client_error(self, err) -> None:
        # Broker connection trouble is retried inside librdkafka; only a fatal error loses records.
        if err.fatal():
            self._on_failure("*", f"fatal: {err}", None)
        else:
            log.debug("producer: %s", err)

    def send(self, topic: str, key: bytes | None, value: bytes, partition: int | None = None) -> None:
        produce = self._p.produce
        while True:
            try:
                if partition is None:
                    produce(topic, value, key)
                else:
                    produce(topic, value, key, partition)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                self._p.poll(0.05)
            except self._ck.KafkaException as exc:
                self._on_failure(topic, exc.args[0] if exc.args else exc, value)
                return

    def send_many(self, topics: list[str], keys: list[bytes | None], values: list[bytes]) -> None:
        """``send`` of each (topic, key, value), by key, with no Python call between them but produce."""
        produce, ck_error = self._p.produce, self._ck.KafkaException
        for topic, key, value in zip(topics, keys, values, strict=True):
            try:
                produce(topic, value, key)
            except BufferError:
                self.send(topic, key, value)  # waits for room in the local queue
            except ck_error as exc:
                self._on_failure(topic, exc.args[0] if exc.args else exc, value)

    def poll(self) -> None:
        """Serve delivery reports (only failures make one) without waiting."""
        self._p.poll(0)

    def partitions(self, topic: str) -> list[int]:
        meta = self._p.list_topics(topic, timeout=10)
        t = meta.topics.get(topic)
        if t is not None and t.error is not None and t.error.code() in (self._ck.KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                                   self._ck.KafkaError._UNKNOWN_TOPIC):
            raise TopicMissingError(topic)
        if t is None or t.error is not None:
            raise KafkaError(f"no metadata for topic {topic}: {t.error if t is not None else 'unknown'}")
        return sorted(t.partitions)

    def flush(self, timeout: float | None) -> None:
        left = self._p.flush(timeout if timeout is not None else -1)
        if left:
            self._on_failure("*", f"flush: {left} record(s) still undelivered after {timeout}s", None)

    def close(self, timeout: float) -> None:
        # confluent-kafka closes when the object goes; what is queued is flushed first.
        if self._p is not None:
            self._p.flush(timeout)
            self._p = None
