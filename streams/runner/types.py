"""What a consumer-group runner hands a handler, and what it does with a message nobody can read.

:class:`Record` is one decoded message; a handler turns a list of them into outputs
(:class:`Handler`). A message that cannot be read becomes a :func:`dead_letter`: the reason,
where it came from and its bytes, on the `dead-letter` topic.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, runtime_checkable

import msgspec
import orjson

from faultlens.events import topics
from faultlens.streams.producer import Outgoing

DEAD_LETTER_TOPIC = topics.DEAD_LETTER
_MAX_DEAD_VALUE = 64 * 1024
# Kafka's own default message.max.bytes; a telemetry message is a few KB.
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024
Decoder = Callable[[bytes | None], Any]


class Record(msgspec.Struct):
    """One consumed message after decoding; ``value`` is what the topic's decoder returned.
    Read-only by convention: not frozen, because a frozen dataclass costs ~2 µs more to build and
    one is built for every message read. A msgspec Struct, not a slotted dataclass: its fields are
    slots as a dataclass's are, but it is built in C, not by a generated __init__ in Python (issue 56:
    a record's building was ~37 bytecodes and a frame a message)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: Any
    timestamp_ms: int
    # Where the record sits in event time (event_time mode): its own ts unless its clock was off.
    event_ts: float | None = None
    skew_s: float | None = None  # the sender's clock error when it was beyond the bound
    clamped: str | None = None  # "future": its own time was not believable
    # The message's bytes as read: a handler that passes an event on unchanged sends these
    # instead of encoding it again.
    raw: bytes | None = None


class FatalHandlerError(RuntimeError):
    """Raised by a handler when it cannot work at all (its store is gone, say): the runner stops
    without committing, so the batch is read again after a restart instead of dead-lettered."""


@runtime_checkable
class Handler(Protocol):
    """A handler object: a batch of records in, its outputs out (the other things a handler may
    take are in streams/runner/handler.py)."""

    def handle(self, records: list[Record]) -> Iterable[Outgoing]: ...


@dataclass
class RunnerStats:
    records_in: int = 0
    dead_letters: int = 0
    outputs: int = 0
    batches: int = 0
    commits: int = 0
    redeliveries: int = 0
    lag: int = 0  # messages behind the partitions' high-water marks, refreshed every few seconds
    held: int = 0  # records waiting for the other partitions' event time (event_time mode)
    skewed: int = 0  # records whose sender's clock was off by more than the bound
    late_released: int = 0  # records handed on behind event time already handed on (event_time.py)
    oversized: int = 0
    refused_outputs: int = 0  # outputs refused for good (too large...): dead-lettered in their place
    last_loop_s: float = 0.0
    started_at: float = field(default_factory=time.time)
    # Wall clock of the first poll that brought records and of the last batch handed to the handler:
    # a backlog's rate is records_in over the span (bench/bench_floor_workers.py, one launch's members).
    first_read_at: float | None = None
    last_handled_at: float | None = None


def broker_time(timestamp_ms: int | None) -> float | None:
    """A record's broker timestamp in seconds; None when the broker gave none (-1, 0)."""
    return timestamp_ms / 1000.0 if timestamp_ms and timestamp_ms > 0 else None


def dead_letter(topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                reason: str, group: str | None) -> Outgoing:
    """The dead-letter record for a message nobody could read: the reason, where it came from, its bytes."""
    text = None if value is None else value[:_MAX_DEAD_VALUE].decode("utf-8", errors="replace")
    body = {
        "reason": reason,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "key": None if key is None else key.decode("utf-8", errors="replace"),
        "group": group,
        "ts": time.time(),
        "value": text,
        "truncated": value is not None and len(value) > _MAX_DEAD_VALUE,
    }
    return Outgoing(DEAD_LETTER_TOPIC, key, orjson.dumps(body))


def record_bytes(record: Record) -> bytes | None:
    """A record's message as it was read, for a dead letter; one with no bytes of its own (an
    event out of a bundle) is encoded again."""
    return record.raw if record.raw is not None else reencode(record.value)


def reencode(value: Any) -> bytes | None:
    """Bytes for a dead letter of an already-decoded value."""
    if value is None:
        return None
    to_dict = getattr(value, "to_dict", None)
    try:
        return orjson.dumps(to_dict() if to_dict else value, default=str)
    except TypeError:
        return repr(value).encode()

