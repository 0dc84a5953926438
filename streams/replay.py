"""Publish events to their topics at real speed, k× speed or as fast as possible.

The replayer (``faultlens replay``) and the simulator's ``--publish`` share this: events go to
``events.topics.topic_for(event)`` keyed by node (job-level records by job), in trace order.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Protocol, TypeVar

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from faultlens.events.envelope import _MAX_TS, _MIN_TS, SCHEMA_VERSION, SOURCES, Envelope, InvalidEvent, encode
from faultlens.events.topics import SOURCE_TOPIC, topic_for
from faultlens.events.trace import TraceError, trace_batches, trace_rows
from faultlens.streams.admin import ensure_topics
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Producer

log = logging.getLogger(__name__)

# Rows built and sent at a time: small enough that a batch's memory (~11 MB of messages, twice: Arrow's
# and the bytes handed to the client) is reused by the next one instead of fresh pages from the
# kernel, which cost more than building the messages (a quarter of a 16k-row batch measured 2x faster).
BATCH_ROWS = 4_096
# One message at a time (paced, or publish()'s envelopes): a flush every so many bounds the
# producer's buffer and surfaces delivery errors early. librdkafka bounds its own queue (a full one
# pushes back) and reports failures as they happen: a flush, a round trip with the broker, is
# needed far less often. (A trace at full speed goes through publish_batches: no flush but the last.)
FLUSH_EVERY = 5_000
FLUSH_EVERY_CONFLUENT = 100_000


# A replay at full speed sends a trace's hundreds of MB as fast as the broker takes them. lz4 record
# batches cost the client little and spare the broker most of the bytes (the embedded broker spent
# 0.25 instead of 0.95 CPU-s on 75k messages of 2.7 KB); consumers see the same messages. Used only
# where no compression is configured: --compression none (or a config's) wins.
REPLAY_COMPRESSION = "lz4"


# At full speed batches fill before any linger runs out: bigger ones are fewer requests, fewer
# batch objects in kafka-python and a better lz4 ratio (kafka-python: 2.6-3.0 instead of 3.3-3.6
# CPU-s for 75k messages; librdkafka's batches are this big already).
FULL_SPEED_PRODUCER = {"linger_ms": 20, "batch_size": 1_000_000}


def replay_settings(settings: KafkaSettings) -> KafkaSettings:
    """``settings`` with :data:`REPLAY_COMPRESSION` where none is configured and the client has it."""
    if settings.compression is not None:
        return settings
    if settings.client != "confluent":
        from kafka.codec import has_lz4

        if not has_lz4():
            return settings
    return dataclasses.replace(settings, compression=REPLAY_COMPRESSION)


def _flush_every(producer: Producer) -> int:
    return FLUSH_EVERY_CONFLUENT if producer.client == "confluent" else FLUSH_EVERY


class _Timed(Protocol):
    @property
    def ts(self) -> float: ...


Timed = TypeVar("Timed", bound=_Timed)


def paced(events: Iterable[Timed], speed: float, *, clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> Iterator[Timed]:
    """Yield each event no earlier than its offset from the first event, divided by ``speed``.

    ``speed`` 1 is real time, 10 is ten times faster, 0 is as fast as possible. Pacing follows
    event time, so the gaps of a trace (a hang, a silent node) are kept at every speed.
    """
    if speed < 0:
        raise ValueError(f"speed must be >= 0 (0: as fast as possible), got {speed}")
    first_ts: float | None = None
    start = clock()
    for event in events:
        if speed > 0:
            if first_ts is None:
                first_ts = event.ts
            wait = start + (event.ts - first_ts) / speed - clock()
            if wait > 0:
                sleep(wait)
        yield event


@dataclass
class PublishStats:
    events: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        rate = self.events / self.seconds if self.seconds > 0 else None
        return {"events": self.events, "seconds": round(self.seconds, 3), "events_per_s": round(rate, 1) if rate else None}


def publish(settings: KafkaSettings, events: Iterable[Envelope], speed: float = 0.0,
            progress: Callable[[int], None] | None = None) -> PublishStats:
    """Send ``events`` to their topics, paced; raises DeliveryError if the broker refused any."""
    messages = (TraceMessage(e.ts, topic_for(e), e.key, encode(e)) for e in events)
    return publish_messages(settings, messages, speed, progress)


@dataclass(frozen=True, slots=True)
class TraceMessage:
    """One trace row as the message it becomes: no envelope built, its data never parsed."""

    ts: float
    topic: str
    key: bytes
    value: bytes


_TOPIC_OF = {source.encode(): topic for source, topic in SOURCE_TOPIC.items()}


@functools.cache
def _value_sets() -> tuple[pa.Array, pa.Array]:
    """The sources keyed by job (as Envelope.key: job-level records are keyed by job) and every
    known source. Built on first use: ``pa.array`` imports pandas (~0.4 s), which `faultlens
    --help` must not pay."""
    return pa.array([b"job", b"summary"], pa.large_binary()), pa.array(sorted(SOURCES))
_NEEDS_ESCAPE = r'["\\\x00-\x1f]'  # what JSON escapes in a string (orjson leaves the rest as it is)


def _escape_free(text: pa.Array) -> bool:
    """Whether no value of a string column holds a byte JSON escapes: a look at the column's bytes
    all at once (a regex per value cost more than the rest of the checks together)."""
    if text.type != pa.string():
        return not pc.any(pc.match_substring_regex(text, _NEEDS_ESCAPE)).as_py()
    _, offsets, data = text.buffers()
    if data is None or len(text) == 0:
        return True
    ends = np.frombuffer(offsets, dtype=np.int32)[text.offset:text.offset + len(text) + 1]
    raw = np.frombuffer(data, dtype=np.uint8)[ends[0]:ends[-1]]
    return not ((raw < 0x20) | (raw == ord('"')) | (raw == ord("\\"))).any()


def _batch_is_plain(batch: pa.RecordBatch) -> bool:
    """Whether every row of ``batch`` is an envelope :func:`decode` accepts, checked column-wise
    (what Envelope checks row by row), with names that need no JSON escaping and data that is a
    JSON object text. False: the batch goes the slow way, which names the bad row."""
    try:
        cols = {name: batch.column(name) for name in ("v", "id", "ts", "job", "node", "source", "kind", "data")}
        if any(c.null_count for c in cols.values()):
            return False
        checks = [
            pc.all(pc.and_(pc.greater_equal(cols["v"], 1), pc.less_equal(cols["v"], SCHEMA_VERSION))),
            pc.all(pc.and_(pc.greater_equal(cols["ts"], _MIN_TS), pc.less_equal(cols["ts"], _MAX_TS))),
            pc.all(pc.is_in(cols["source"], value_set=_value_sets()[1])),
            pc.all(pc.starts_with(cols["data"], "{")),
            pc.all(pc.ends_with(cols["data"], "}")),
        ]
        for name in ("id", "job", "node", "kind"):
            text = cols[name]
            checks.append(pc.all(pc.less_equal(pc.utf8_length(text), 256)))
            checks.append(pc.all(pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(text)), 0)))
        return all(c.as_py() is True for c in checks) and all(_escape_free(cols[n]) for n in ("id", "job", "node", "kind"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError):
        return False


@dataclass(frozen=True, slots=True)
class MessageBatch:
    """Consecutive trace rows as messages, column by column: what a producer sends with one call
    per message and no object per row."""

    ts: list[float]
    topics: list[str]
    keys: list[bytes]
    values: list[bytes]

    def __len__(self) -> int:
        return len(self.values)

    def messages(self) -> Iterator[TraceMessage]:
        return map(TraceMessage, self.ts, self.topics, self.keys, self.values)


def trace_messages(path: str | os.PathLike[str]) -> Iterator[TraceMessage]:
    """A trace's rows as ready messages, in trace order (see :func:`trace_message_batches`)."""
    for batch in trace_message_batches(path):
        yield from batch.messages()


def trace_message_batches(path: str | os.PathLike[str]) -> Iterator[MessageBatch]:
    """A trace's rows as ready messages, a Parquet batch at a time, in trace order: what
    :func:`encode` would write for each row's envelope, built from the columns. A batch whose
    every row checks out column-wise is never parsed (a GPU sample's data is kilobytes of JSON);
    one that does not is read envelope by envelope, so a bad row is a TraceError naming it, as
    with iter_trace, and nothing of its batch goes out. The one thing not checked on the way out:
    data between braces that is not JSON inside goes out as it is, and its consumer dead-letters
    it ("not valid JSON"). Batches are read and built on a thread of their own (see _read_ahead)."""
    return _read_ahead(_message_batches(path))


def _message_batches(path) -> Iterator[MessageBatch]:
    row = 0
    for batch in trace_batches(path, batch_rows=BATCH_ROWS):
        if _batch_is_plain(batch):
            yield _plain_messages(batch)
        else:
            yield _checked_messages(path, batch, row)
        row += batch.num_rows


def _pieces(*parts: bytes | pa.Array) -> list:
    return [pa.scalar(p, pa.large_binary()) if isinstance(p, bytes) else p for p in parts]


def _plain_messages(batch: pa.RecordBatch) -> MessageBatch:
    """A checked batch's messages, joined by Arrow a column at a time (no Python per row but the
    bytes objects the producer takes): encode()'s layout, FIELDS order, orjson's separators."""
    # large_binary: 64-bit offsets, so no batch of big messages outgrows the joined column
    col = {name: batch.column(name).cast(pa.large_binary()) for name in ("id", "job", "node", "source", "kind", "data")}
    times = batch.column("ts").to_pylist()
    # a float as orjson writes it (encode() does), not as Arrow would format it
    stamps = pa.array(orjson.dumps(times)[1:-1].split(b","), pa.large_binary())
    versions = pc.cast(batch.column("v"), pa.string()).cast(pa.large_binary())  # an int is written one way
    joined = pc.binary_join_element_wise(*_pieces(
        b'{"v":', versions, b',"id":"', col["id"], b'","ts":', stamps, b',"job":"', col["job"],
        b'","node":"', col["node"], b'","source":"', col["source"], b'","kind":"', col["kind"],
        b'","data":', col["data"], b"}", b""))
    values = joined.to_numpy(zero_copy_only=False).tolist()
    # job-level records are keyed by job (as Envelope.key), the rest by node; few distinct keys
    # and sources, so each distinct one becomes bytes once
    keys = _decoded(pc.if_else(pc.is_in(col["source"], value_set=_value_sets()[0]), col["job"], col["node"]))
    sources = col["source"].dictionary_encode()
    topic_of = [_TOPIC_OF[s] for s in sources.dictionary.to_pylist()]
    topics = list(map(topic_of.__getitem__, sources.indices.to_pylist()))
    return MessageBatch(times, topics, keys, values)


def _decoded(column: pa.Array) -> list[bytes]:
    coded = column.dictionary_encode()
    return list(map(coded.dictionary.to_pylist().__getitem__, coded.indices.to_pylist()))


def _read_ahead(batches: Iterator[pa.RecordBatch], depth: int = 2) -> Iterator[pa.RecordBatch]:
    """The next batches read and decompressed on a thread of their own while this one is sent
    (Arrow lets go of the GIL while it reads); errors come out where the batch would have."""
    import queue
    import threading

    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def read() -> None:
        try:
            for batch in batches:
                while not stop.is_set():
                    try:
                        q.put(batch, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(done)
        except BaseException as exc:  # noqa: BLE001 - handed to the reader below
            q.put(exc)

    thread = threading.Thread(target=read, name="trace-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


def _checked_messages(path, batch: pa.RecordBatch, first_row: int) -> MessageBatch:
    cols = batch.to_pydict()
    out = MessageBatch([], [], [], [])
    for i in range(batch.num_rows):
        try:
            text = cols["data"][i]
            data: Any = orjson.loads(text) if text is not None else None  # a null: refused by the envelope's check
            event = Envelope(v=cols["v"][i], id=cols["id"][i], ts=cols["ts"][i], job=cols["job"][i],
                             node=cols["node"][i], source=cols["source"][i], kind=cols["kind"][i],
                             data=data)
        except orjson.JSONDecodeError as exc:
            raise TraceError(f"{path}: row {first_row + i}: data is not valid JSON ({exc})") from None
        except InvalidEvent as exc:
            raise TraceError(f"{path}: row {first_row + i}: {exc}") from None
        out.ts.append(event.ts)
        out.topics.append(SOURCE_TOPIC[event.source])
        out.keys.append(event.key)
        out.values.append(encode(event))
    return out


def publish_messages(settings: KafkaSettings, messages: Iterable[TraceMessage], speed: float = 0.0,
                     progress: Callable[[int], None] | None = None) -> PublishStats:
    """Send ready messages (a trace's, or :func:`publish`'s envelopes), paced by their ``ts``;
    raises DeliveryError if the broker refused any."""
    ensure_topics(settings)
    stats = PublishStats()
    t0 = time.perf_counter()
    with Producer(replay_settings(settings)) as producer:
        send, every = producer.send, _flush_every(producer)
        for m in paced(messages, speed):
            send(m.topic, m.key, m.value)
            stats.events += 1
            if stats.events % every == 0:
                producer.flush()
                if progress:
                    progress(every)
        producer.flush()
        if progress:
            progress(stats.events % every)
    stats.seconds = time.perf_counter() - t0
    return stats


def publish_batches(settings: KafkaSettings, batches: Iterable[MessageBatch], speed: float = 0.0,
                    progress: Callable[[int], None] | None = None) -> PublishStats:
    """Send batches of ready messages (a trace's); raises DeliveryError if the broker refused any.

    As fast as possible (``speed`` 0) a batch goes to the client in one call and nothing waits for
    the broker until the end: the client's own bounded buffer pushes back when the broker falls
    behind, and failures reported so far are raised after each batch (at-least-once: every message
    is acknowledged or the replay fails). The progress bar counts messages handed to the client.
    Paced, the messages go one at a time through :func:`publish_messages`.
    """
    if speed != 0:
        return publish_messages(settings, (m for batch in batches for m in batch.messages()), speed, progress)
    ensure_topics(settings)
    stats = PublishStats()
    t0 = time.perf_counter()
    with Producer(replay_settings(settings), **FULL_SPEED_PRODUCER) as producer:
        for batch in batches:
            stats.events += producer.send_many(batch.topics, batch.keys, batch.values)
            producer.poll()
            if progress:
                progress(len(batch))
        producer.flush()
    stats.seconds = time.perf_counter() - t0
    return stats


def replay_trace(settings: KafkaSettings, path: str | os.PathLike[str], speed: float = 0.0,
                 show_progress: bool = True) -> PublishStats:
    """Publish a trace file back to its topics (with a progress bar on stderr)."""
    from tqdm import tqdm

    total = trace_rows(path)
    with tqdm(total=total, unit="ev", desc="replay", disable=not show_progress or None, leave=False) as bar:
        stats = publish_batches(settings, trace_message_batches(path), speed, bar.update)
    log.info("replayed %d events from %s in %.1f s", stats.events, path, stats.seconds)
    return stats
