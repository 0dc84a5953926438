"""What a consumed message and its partition are to the code that reads them, whichever client
polled: kafka-python's ``ConsumerRecord`` and ``TopicPartition``, or the confluent adapter's
``Message`` (streams/confluent_consumer.py). Protocols, not either client's class: compiled with
mypyc a NamedTuple's fields are read by index, and ``ConsumerRecord``'s fifth field is not the
value (typed as confluent's ``Message``, ``m.value`` read kafka-python's timestamp)."""

from __future__ import annotations

from typing import Protocol


class PolledPartition(Protocol):
    """A partition as either consumer's poll() names it (kafka-python's TopicPartition)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    def __hash__(self) -> int: ...  # the merge keys its partitions by it


class PolledMessage(Protocol):
    """A message as either consumer's poll() gives it, under its partition: read-only fields, so
    a NamedTuple fits."""

    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def timestamp(self) -> int: ...  # ms since the epoch, -1 when unknown


class ReadMessage(PolledMessage, Protocol):
    """A message that names its own partition: what streams/reader.py's iter_topics yields."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
