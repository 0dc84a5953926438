"""confluent-kafka's Consumer behind kafka-python's consumer interface (the interface is described
in streams.kafka_client, which picks the client and re-exports :class:`Message`).

Apart from streams.kafka_client because the adapter is most of the code of the two clients:
librdkafka's callbacks, offsets and errors translated into kafka-python's meanings.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Iterable, NamedTuple

from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition

from faultlens.streams.config import KafkaSettings
from faultlens.streams.confluent_config import confluent_config, load_confluent

log = logging.getLogger(__name__)

# ListOffsets' special timestamps (the Kafka protocol): a partition's first and next offsets.
EARLIEST, LATEST = -2, -1


class Message(NamedTuple):
    """One consumed message, the same for both clients (kafka-python's ConsumerRecord has these too)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int  # ms since the epoch (broker or producer time), -1 when unknown


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
        # Past that queue librdkafka waits this long before it fetches that partition again. Its
        # 1 s default left a consumer reading a backlog idle most of the time: 33k messages/s by
        # wall against 230-290k at 10 ms, for less CPU (bench/results_throughput.md).
        "fetch.queue.backoff.ms": 10,
        # range, as for kafka-python (streams/config.py): one member reads all of a node's events
        "partition.assignment.strategy": "range",
    }


def _error(exc: Exception, what: str) -> KafkaError:
    """A confluent-kafka exception as the kafka-python error callers catch."""
    err = exc.args[0] if exc.args else None
    name = err.name() if err is not None and hasattr(err, "name") else ""
    if name in ("REBALANCE_IN_PROGRESS", "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "_ASSIGNMENT_LOST"):
        return CommitFailedError(f"{what}: {err}")
    return KafkaError(f"{what}: {err if err is not None else exc}")


class ConfluentConsumer:
    """confluent-kafka's Consumer with kafka-python's consumer interface (see the module doc)."""

    def __init__(self, settings: KafkaSettings, group: str | None, max_records: int = 2000,
                 fetch_max_wait_ms: int | None = None):
        ck = load_confluent()
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
        # Seeks librdkafka could not take yet, done at the next polls (see seek).
        self._seeks: dict[TopicPartition, int] = {}
        # Paused by the caller: a partition started again at an offset is paused again (_restart_at).
        self._paused: set[TopicPartition] = set()

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
                self._seeks.pop(tp, None)
            if listener is not None:
                listener.on_partitions_assigned(got)

        def revoked(_consumer, parts) -> None:
            gone = [self._tp(p.topic, p.partition) for p in parts]
            self._assignment -= set(gone)
            for tp in gone:
                self._high.pop(tp, None)
                self._start.pop(tp, None)
                self._seeks.pop(tp, None)
                self._paused.discard(tp)
            if listener is not None:
                listener.on_partitions_revoked(gone)

        self._c.subscribe(list(topics), on_assign=assigned, on_revoke=revoked, on_lost=revoked)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._start.clear()
        self._seeks.clear()
        self._manual = True
        self._assignment = set(partitions)
        self._c.assign([self._ck_tp(tp) for tp in self._assignment])
        # librdkafka's assign resumes every partition; kafka-python keeps a kept one paused
        self._paused &= self._assignment
        if self._paused:
            self._c.pause([self._ck_tp(tp) for tp in self._paused])

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
        if self._seeks:
            self._retry_seeks()
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
        dropped = False
        for m in batch:
            err = m.error()
            if err is not None:
                if err.code() != self._ck.KafkaError._PARTITION_EOF:
                    log.warning("consumer: %s", err)
                continue
            topic, partition = m.topic(), m.partition()
            tp = tp_of(topic, partition)
            if tp in self._seeks:
                dropped = True  # read from where the seek moved it, once it is taken
                continue
            records = out.get(tp)
            if records is None:
                records = out[tp] = []
            records.append(Message(topic, partition, m.offset(), m.key(), m.value(), m.timestamp()[1]))
        if dropped:
            self._retry_seeks()  # the partition delivers: librdkafka fetches it, so it can seek it now
        return out

    def pause(self, *partitions: TopicPartition) -> None:
        self._c.pause([self._ck_tp(tp) for tp in partitions])
        self._paused.update(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._c.resume([self._ck_tp(tp) for tp in partitions])
        self._paused.difference_update(partitions)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """kafka-python's seek: the next poll hands out ``partition`` from ``offset``.

        librdkafka seeks only a partition it fetches already. A group's new assignment starts
        fetching once the group's commits were read back from the broker, so a seek in or right
        after the assignment callback (the runner's seek of a partition it kept through a rebalance)
        found it stopped and raised "Erroneous state": the runner's loop died with 10 of 200
        records read, about one run in five under load. Such a seek is kept and done at the next
        polls, and what they bring of that partition before it is taken is dropped: it comes
        again from ``offset``. A consumer given its partitions (no group) has every seek right
        after ``assign`` refused: that partition alone is started again at ``offset`` instead."""
        self._start[partition] = offset
        self._seeks.pop(partition, None)
        if not self._seek_now(partition, offset):
            self._seeks[partition] = offset

    def _seek_now(self, partition: TopicPartition, offset: int) -> bool:
        """Seek now; False where librdkafka does not fetch the assigned partition yet."""
        try:
            self._c.seek(self._ck_tp(partition, offset))
        except self._ck.KafkaException as exc:
            if self._manual and partition in self._assignment:  # not fetching yet: start it at the offset
                self._restart_at({partition: offset})
                return True
            err = exc.args[0] if exc.args else None
            code = err.code() if err is not None and hasattr(err, "code") else None
            ck_error = self._ck.KafkaError
            # not met yet (a first assignment), not started, or still stopping from a revocation
            if partition in self._assignment and code in (ck_error._UNKNOWN_PARTITION, ck_error._STATE,
                                                          ck_error._PREV_IN_PROGRESS):
                return False
            raise _error(exc, f"seek {partition.topic}[{partition.partition}]") from None
        return True

    def _restart_at(self, at: dict[TopicPartition, int]) -> None:
        """Start the assigned partitions of ``at`` again from those offsets (a consumer given its
        partitions), the others left as they are.

        Only these: assigning every partition again, the others at their stored offset, undid the
        seeks made before (each refused right after ``assign``) and moved back partitions already
        read: ``assign([p0, p1]); seek(p0, 5); seek(p1, 0)`` handed out p0 from 0
        (tests/streams/test_confluent_seek.py). librdkafka starts them unpaused: one the caller
        paused is paused again."""
        parts = [tp for tp in at if tp in self._assignment]
        if not parts:
            return
        try:
            self._c.incremental_unassign([self._ck_tp(tp) for tp in parts])
            self._c.incremental_assign([self._ck_tp(tp, at[tp]) for tp in parts])
        except self._ck.KafkaException as exc:
            raise _error(exc, f"assign {', '.join(f'{tp.topic}[{tp.partition}]' for tp in parts)}") from None
        paused = [self._ck_tp(tp) for tp in parts if tp in self._paused]
        if paused:
            self._c.pause(paused)

    def _retry_seeks(self) -> None:
        for tp, offset in list(self._seeks.items()):
            if not self._seek_now(tp, offset):
                continue
            del self._seeks[tp]
            # The records dropped meanwhile stored their offsets (enable.auto.offset.store): a
            # commit before the next record must not skip to past them. kafka-python commits
            # the position, which a seek sets.
            try:
                self._c.store_offsets(offsets=[self._ck_tp(tp, offset)])
            except self._ck.KafkaException as exc:
                log.debug("store %s[%d] at %d after its seek: %s", tp.topic, tp.partition, offset, exc)

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
            self._restart_at(at)
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
        if partition in self._seeks:
            return self._seeks[partition]
        got = self._c.position([self._ck_tp(partition)])
        offset = got[0].offset if got else -1
        if offset >= 0:
            return offset
        start = self._start.get(partition)
        if start is None:
            committed = self.committed(partition)
            start = self._start[partition] = committed if committed is not None else self._watermarks(partition)[0]
        return start

    def fetched_highwater(self, partition: TopicPartition) -> int | None:
        """The partition's end as its last fetch said it (an empty one's too); None before its first
        fetch answered: kafka-python's ``highwater``."""
        try:
            high = self._c.get_watermark_offsets(self._ck_tp(partition), cached=True)[1]
        except self._ck.KafkaException:
            return None
        return high if high >= 0 else None

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's end as the last fetch saw it; for one nothing was fetched from yet the
        broker is asked, at most once a second. That listed end may lag what the partition holds
        (the embedded broker's, streams/reader_ends.py): :meth:`fetched_highwater` does not ask."""
        high = self.fetched_highwater(partition)
        if high is not None:
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
        return self._listed(partitions, EARLIEST)

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._listed(partitions, LATEST)

    def _listed(self, partitions: Iterable[TopicPartition], at: int) -> dict[TopicPartition, int]:
        """Every partition's start or end in one ListOffsets request (Kafka's timestamps -2 and -1):
        asked one partition at a time, each waited behind an assigned consumer's fetch (5.5 s over
        55 topics; 26 s at librdkafka's default fetch wait). A partition the answer leaves out or
        fails is asked alone, as before."""
        wanted = list(partitions)
        if not wanted:
            return {}
        try:
            got = self._c.offsets_for_times([self._ck_tp(tp, at) for tp in wanted], timeout=10)
        except self._ck.KafkaException as exc:
            raise _error(exc, "list offsets") from None
        listed = {self._tp(p.topic, p.partition): p.offset for p in got if p.error is None and p.offset >= 0}
        side = 0 if at == EARLIEST else 1
        return {tp: listed[tp] if tp in listed else self._watermarks(tp)[side] for tp in wanted}

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
