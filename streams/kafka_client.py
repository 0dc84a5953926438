"""Two Kafka clients behind one interface: kafka-python (the default) and confluent-kafka (librdkafka,
the fast path; ``pip install 'faultlens[fast]'``). ``--client`` / ``FAULTLENS_CLIENT`` picks one.

The interface is the part of kafka-python's ``KafkaConsumer`` the runner, the reader and the
benches use (so the kafka-python backend is ``KafkaConsumer`` itself): ``subscribe`` with a
rebalance listener, ``assign``, ``poll`` returning ``{TopicPartition: [message, ...]}``, ``commit``
of explicit offsets, ``committed``, ``position``, ``highwater``, ``pause``/``resume``, ``seek``,
``offsets_for_times``, ``beginning_offsets``, ``close``. Partitions are kafka-python
``TopicPartition``s, messages carry ``topic, partition, offset, key, value, timestamp``, and every
client error is a ``kafka.errors.KafkaError`` (``CommitFailedError`` when a rebalance took the
partitions), so the callers handle both clients alike.

Rebalance listeners must not block on the broker with either client: kafka-python 3 calls them
from its coordinator, and the runner keeps them to bookkeeping (streams/runner.py).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Callable, Iterable, NamedTuple

from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import CommitFailedError, KafkaError
from kafka.partitioner.default import murmur2
from kafka.structs import OffsetAndMetadata, TopicPartition

from streams.config import CLIENTS, KafkaSettings

log = logging.getLogger(__name__)

__all__ = ["CLIENTS", "Consumer", "Message", "open_consumer", "open_producer", "confluent_available"]


class Message(NamedTuple):
    """One consumed message, the same for both clients (kafka-python's ConsumerRecord has these too)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int  # ms since the epoch (broker or producer time), -1 when unknown


def confluent_available() -> bool:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return False
    return True


def _confluent():
    try:
        import confluent_kafka
    except ImportError:
        raise ValueError("--client confluent needs the confluent-kafka package "
                         "(pip install 'faultlens[fast]')") from None
    return confluent_kafka


# --- settings in librdkafka's words -----------------------------------------------------------
def confluent_config(settings: KafkaSettings) -> dict[str, Any]:
    """The librdkafka properties for ``settings`` (the same settings kafka-python gets)."""
    if not settings.bootstrap:
        raise ValueError("no bootstrap address resolved (see streams.broker.resolve_bootstrap)")
    conf: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap,
        "client.id": settings.client_id,
        "security.protocol": settings.security_protocol.lower(),
        # Tansu (and any broker on one machine) is reached on 127.0.0.1: skip IPv6 lookups.
        "broker.address.family": "v4" if "127.0.0.1" in settings.bootstrap else "any",
        # librdkafka's own log lines go through logging, not straight to stderr
        "logger": logging.getLogger("streams.librdkafka"),
    }
    if settings.sasl_mechanism:
        conf["sasl.mechanism"] = settings.sasl_mechanism
        conf["sasl.username"] = settings.sasl_username
        conf["sasl.password"] = settings.password()
    for ours, theirs in (("ssl_cafile", "ssl.ca.location"), ("ssl_certfile", "ssl.certificate.location"),
                         ("ssl_keyfile", "ssl.key.location")):
        if getattr(settings, ours):
            conf[theirs] = getattr(settings, ours)
    return conf


# kafka-python producer keyword → librdkafka property, for the overrides callers pass to Producer.
_PRODUCER_KEYWORDS = {"request_timeout_ms": "request.timeout.ms", "reconnect_backoff_max_ms": "reconnect.backoff.max.ms",
                      "linger_ms": "linger.ms", "retries": "retries", "acks": "acks",
                      "max_block_ms": "message.timeout.ms", "batch_size": "batch.size"}


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


def _consumer_config(settings: KafkaSettings, group: str | None, max_records: int) -> dict[str, Any]:
    kw = settings.consumer_kwargs(group)
    return {
        **confluent_config(settings),
        # librdkafka wants a group id even for assigned reads; nothing is committed without one of ours
        "group.id": group or f"faultlens-reader-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": True,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": kw["session_timeout_ms"],
        "heartbeat.interval.ms": kw["heartbeat_interval_ms"],
        "fetch.wait.max.ms": kw["fetch_max_wait_ms"],
        "enable.partition.eof": False,
        # the runner asks for up to max_records per poll; keep that many ready
        "queued.min.messages": max(max_records * 2, 10_000),
    }


# --- consumers --------------------------------------------------------------------------------
def open_consumer(settings: KafkaSettings, group: str | None, *, max_records: int = 2000,
                  fetch_max_wait_ms: int | None = None):
    """A consumer of ``settings.client`` (not subscribed): ``group`` None reads without a group;
    ``fetch_max_wait_ms`` shortens the broker's wait for data (a command listener)."""
    if settings.client == "confluent":
        return ConfluentConsumer(settings, group, max_records, fetch_max_wait_ms)
    kwargs = {**settings.consumer_kwargs(group), "max_poll_records": max_records}
    if fetch_max_wait_ms is not None:
        kwargs["fetch_max_wait_ms"] = fetch_max_wait_ms
    if group is None:
        kwargs["enable_auto_commit"] = False
    return KafkaConsumer(**kwargs)


def _error(exc: Exception, what: str) -> KafkaError:
    """A confluent-kafka exception as the kafka-python error callers catch."""
    err = exc.args[0] if exc.args else None
    name = err.name() if hasattr(err, "name") else ""
    if name in ("REBALANCE_IN_PROGRESS", "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "_ASSIGNMENT_LOST"):
        return CommitFailedError(f"{what}: {err}")
    return KafkaError(f"{what}: {err if err is not None else exc}")


class ConfluentConsumer:
    """confluent-kafka's Consumer with kafka-python's consumer interface (see the module doc)."""

    def __init__(self, settings: KafkaSettings, group: str | None, max_records: int = 2000,
                 fetch_max_wait_ms: int | None = None):
        ck = _confluent()
        self._ck = ck
        config = _consumer_config(settings, group, max_records)
        if fetch_max_wait_ms is not None:
            config["fetch.wait.max.ms"] = fetch_max_wait_ms
        try:
            self._c = ck.Consumer(config)
        except ck.KafkaException as exc:  # a setting librdkafka refuses: the caller's bad input
            raise ValueError(f"confluent-kafka consumer: {exc}") from None
        self._max_records = max_records
        self._tps: dict[tuple[str, int], TopicPartition] = {}
        self._assignment: set[TopicPartition] = set()
        self._manual = False
        self._high: dict[TopicPartition, tuple[int, float]] = {}  # asked of the broker: (high, when)
        # Where a partition nothing was consumed from yet starts (asked of the broker once).
        self._start: dict[TopicPartition, int] = {}

    def _tp(self, topic: str, partition: int) -> TopicPartition:
        key = (topic, partition)
        tp = self._tps.get(key)
        if tp is None:
            tp = self._tps[key] = TopicPartition(topic, partition)
        return tp

    def _ck_tp(self, tp: TopicPartition, offset: int | None = None):
        if offset is None:
            return self._ck.TopicPartition(tp.topic, tp.partition)
        return self._ck.TopicPartition(tp.topic, tp.partition, offset)

    # membership
    def subscribe(self, topics: Iterable[str], listener=None) -> None:
        def assigned(_consumer, parts) -> None:
            got = [self._tp(p.topic, p.partition) for p in parts]
            self._assignment |= set(got)
            for tp in got:
                self._start.pop(tp, None)
            if listener is not None:
                listener.on_partitions_assigned(got)

        def revoked(_consumer, parts) -> None:
            gone = [self._tp(p.topic, p.partition) for p in parts]
            self._assignment -= set(gone)
            for tp in gone:
                self._high.pop(tp, None)
                self._start.pop(tp, None)
            if listener is not None:
                listener.on_partitions_revoked(gone)

        self._c.subscribe(list(topics), on_assign=assigned, on_revoke=revoked, on_lost=revoked)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._start.clear()
        self._manual = True
        self._assignment = set(partitions)
        self._c.assign([self._ck_tp(tp) for tp in self._assignment])

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        try:
            meta = self._c.list_topics(topic, timeout=10)
        except self._ck.KafkaException as exc:
            raise _error(exc, f"metadata of {topic}") from None
        t = meta.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            return None
        return set(t.partitions)

    # reading
    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[TopicPartition, list[Message]]:
        limit = max_records or self._max_records
        try:
            # consume() waits for a full batch or the timeout; kafka-python's poll returns what is
            # there. So: what is queued now; if nothing, wait for one message, then take the rest.
            batch = self._c.consume(limit, 0)
            if not batch and timeout_ms > 0:
                first = self._c.poll(timeout_ms / 1000.0)
                if first is not None:
                    batch = [first, *self._c.consume(limit - 1, 0)] if limit > 1 else [first]
        except self._ck.KafkaException as exc:
            raise _error(exc, "consume") from None
        out: dict[TopicPartition, list[Message]] = {}
        tp_of = self._tp
        for m in batch:
            err = m.error()
            if err is not None:
                if err.code() != self._ck.KafkaError._PARTITION_EOF:
                    log.warning("consumer: %s", err)
                continue
            topic, partition = m.topic(), m.partition()
            tp = tp_of(topic, partition)
            records = out.get(tp)
            if records is None:
                records = out[tp] = []
            records.append(Message(topic, partition, m.offset(), m.key(), m.value(), m.timestamp()[1]))
        return out

    def pause(self, *partitions: TopicPartition) -> None:
        self._c.pause([self._ck_tp(tp) for tp in partitions])

    def resume(self, *partitions: TopicPartition) -> None:
        self._c.resume([self._ck_tp(tp) for tp in partitions])

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._start[partition] = offset
        try:
            self._c.seek(self._ck_tp(partition, offset))
        except self._ck.KafkaException as exc:
            if self._manual:  # not fetching yet: assign at the offset instead
                self._c.assign([self._ck_tp(tp, offset if tp == partition else self._ck.OFFSET_STORED)
                                for tp in self._assignment])
                return
            raise _error(exc, f"seek {partition.topic}[{partition.partition}]") from None

    def _assign_at(self, partitions: tuple[TopicPartition, ...], offset: int) -> None:
        # Resolved to real offsets now: "at the end" means after what is there at this moment (a
        # command listener is ready only once it will see the next command), not wherever the end
        # is when librdkafka gets round to its first fetch.
        at = {}
        for tp in partitions:
            low, high = self._watermarks(tp)
            at[tp] = low if offset == self._ck.OFFSET_BEGINNING else high
        if self._manual:
            self._start.update(at)
            self._c.assign([self._ck_tp(tp, at.get(tp, self._ck.OFFSET_STORED)) for tp in self._assignment])
        else:
            for tp, start in at.items():
                self.seek(tp, start)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._assign_at(partitions or tuple(self._assignment), self._ck.OFFSET_BEGINNING)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._assign_at(partitions or tuple(self._assignment), self._ck.OFFSET_END)

    # offsets
    def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata] | None = None) -> None:
        try:
            if offsets is None:
                self._c.commit(asynchronous=False)
            else:
                self._c.commit(offsets=[self._ck_tp(tp, o.offset) for tp, o in offsets.items()], asynchronous=False)
        except self._ck.KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if err is not None and err.code() == self._ck.KafkaError._NO_OFFSET:
                return  # nothing consumed since the last commit
            raise _error(exc, "commit") from None

    def committed(self, partition: TopicPartition) -> int | None:
        try:
            got = self._c.committed([self._ck_tp(partition)], timeout=10)
        except self._ck.KafkaException as exc:
            raise _error(exc, "committed") from None
        offset = got[0].offset if got else -1
        return offset if offset >= 0 else None

    def position(self, partition: TopicPartition) -> int | None:
        """The next offset this consumer hands out; before it handed any out, where it will start
        (the group's commit, else the start of the partition): kafka-python's meaning."""
        got = self._c.position([self._ck_tp(partition)])
        offset = got[0].offset if got else -1
        if offset >= 0:
            return offset
        start = self._start.get(partition)
        if start is None:
            committed = self.committed(partition)
            start = self._start[partition] = committed if committed is not None else self._watermarks(partition)[0]
        return start

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's end as the last fetch saw it; for one nothing was fetched from (an empty
        partition, say) the broker is asked, at most once a second."""
        try:
            low, high = self._c.get_watermark_offsets(self._ck_tp(partition), cached=True)
        except self._ck.KafkaException:
            high = -1
        if high >= 0:
            return high
        known = self._high.get(partition)
        now = time.monotonic()
        if known is None or now - known[1] >= 1.0:
            try:
                known = (self._watermarks(partition, timeout=2.0)[1], now)
            except KafkaError:
                return None
            self._high[partition] = known
        return known[0]

    def _watermarks(self, partition: TopicPartition, timeout: float = 10.0) -> tuple[int, int]:
        try:
            return self._c.get_watermark_offsets(self._ck_tp(partition), timeout=timeout, cached=False)
        except self._ck.KafkaException as exc:
            raise _error(exc, f"watermarks of {partition.topic}[{partition.partition}]") from None

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._watermarks(tp)[0] for tp in partitions}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._watermarks(tp)[1] for tp in partitions}

    def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, OffsetAndMetadata | None]:
        try:
            got = self._c.offsets_for_times([self._ck_tp(tp, ts) for tp, ts in timestamps.items()], timeout=10)
        except self._ck.KafkaException as exc:
            raise _error(exc, "offsets_for_times") from None
        out: dict[TopicPartition, OffsetAndMetadata | None] = {}
        for p in got:
            out[self._tp(p.topic, p.partition)] = OffsetAndMetadata(p.offset, "", -1) if p.offset >= 0 else None
        return out

    def close(self, autocommit: bool = False) -> None:
        # Auto-commit is off: closing leaves the group without committing anything.
        self._c.close()


# --- producers --------------------------------------------------------------------------------
OnFailure = Callable[[str, str], None]  # (topic, error)


def open_producer(settings: KafkaSettings, on_failure: OnFailure, **overrides):
    """A producer of ``settings.client`` with one interface: ``send``, ``send_many``, ``poll``,
    ``partitions``, ``flush``, ``close``."""
    if settings.client == "confluent":
        return ConfluentProducer(settings, on_failure, **overrides)
    return KafkaPythonProducer(settings, on_failure, **overrides)


class KafkaPythonProducer:
    def __init__(self, settings: KafkaSettings, on_failure: OnFailure, **overrides):
        self._p = KafkaProducer(**{**settings.producer_kwargs(), **overrides})
        self._on_failure = on_failure
        # send_many picks a keyed record's partition itself, as the default partitioner would
        self._own_partitioner = "partitioner" not in overrides
        self._partition_of: dict[str, tuple[list[int], dict[bytes, int]]] = {}

    def send(self, topic: str, key: bytes | None, value: bytes, partition: int | None = None) -> None:
        future = self._p.send(topic, key=key, value=value, partition=partition)
        future.add_errback(self._failed, topic)

    def send_many(self, topics: list[str], keys: list[bytes | None], values: list[bytes]) -> None:
        """``send`` of each (topic, key, value), by key. kafka-python's partitioner hashes every
        key in Python (murmur2) and sorts the topic's partitions for every record; the partition of
        a key is the same for the whole batch, so it is computed once per distinct key here."""
        send, failed = self._p.send, self._failed
        partition = self._partitioner(set(topics)) if self._own_partitioner else None
        for topic, key, value in zip(topics, keys, values):
            send(topic, value, key, None, partition(topic, key) if partition and key is not None else None
                 ).add_errback(failed, topic)

    def _partitioner(self, topics: set[str]) -> Callable[[str, bytes], int]:
        """DefaultPartitioner's choice (murmur2 of the key over the sorted partitions) per
        (topic, key), remembered while the topic's partitions stay the same."""
        known = self._partition_of
        for topic in topics:
            parts = sorted(self._p.partitions_for(topic))  # waits for metadata, as send would
            if topic not in known or known[topic][0] != parts:
                known[topic] = (parts, {})

        def partition(topic: str, key: bytes) -> int:
            parts, by_key = known[topic]
            p = by_key.get(key)
            if p is None:
                p = by_key[key] = parts[(murmur2(key) & 0x7FFFFFFF) % len(parts)]
            return p

        return partition

    def poll(self) -> None:
        """Failures reach on_failure from kafka-python's own I/O thread: nothing to serve here."""

    def _failed(self, exc: BaseException, topic: str) -> None:
        self._on_failure(topic, repr(exc))

    def partitions(self, topic: str) -> list[int]:
        return sorted(self._p.partitions_for(topic))

    def flush(self, timeout: float | None) -> None:
        self._p.flush(timeout=timeout)

    def close(self, timeout: float) -> None:
        try:
            self._p.flush(timeout=timeout)
        finally:
            self._p.close(timeout=timeout)


class ConfluentProducer:
    def __init__(self, settings: KafkaSettings, on_failure: OnFailure, **overrides):
        ck = _confluent()
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
            self._on_failure(msg.topic(), str(err))

    def _client_error(self, err) -> None:
        # Broker connection trouble is retried inside librdkafka; only a fatal error loses records.
        if err.fatal():
            self._on_failure("*", f"fatal: {err}")
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
                self._on_failure(topic, str(exc))
                return

    def send_many(self, topics: list[str], keys: list[bytes | None], values: list[bytes]) -> None:
        """``send`` of each (topic, key, value), by key, with no Python call between them but produce."""
        produce, ck_error = self._p.produce, self._ck.KafkaException
        for topic, key, value in zip(topics, keys, values):
            try:
                produce(topic, value, key)
            except BufferError:
                self.send(topic, key, value)  # waits for room in the local queue
            except ck_error as exc:
                self._on_failure(topic, str(exc))

    def poll(self) -> None:
        """Serve delivery reports (only failures make one) without waiting."""
        self._p.poll(0)

    def partitions(self, topic: str) -> list[int]:
        meta = self._p.list_topics(topic, timeout=10)
        t = meta.topics.get(topic)
        if t is None or t.error is not None:
            raise KafkaError(f"no metadata for topic {topic}: {t.error if t is not None else 'unknown'}")
        return sorted(t.partitions)

    def flush(self, timeout: float | None) -> None:
        left = self._p.flush(timeout if timeout is not None else -1)
        if left:
            self._on_failure("*", f"flush: {left} record(s) still undelivered after {timeout}s")

    def close(self, timeout: float) -> None:
        # confluent-kafka closes when the object goes; what is queued is flushed first.
        if self._p is not None:
            self._p.flush(timeout)
            self._p = None


# What open_consumer returns: either client, one interface (the module doc).
Consumer = KafkaConsumer | ConfluentConsumer
