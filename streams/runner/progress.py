"""A member's word on its progress, for the stage downstream (the node stage tells the job stage
how far in event time it has handed on, which input partitions it reads, whether it is behind).

The stage downstream holds each partition at the last word it heard from every writer, so what
is said, and when, matters: after its outputs, at most once a second, every KEEPALIVE_S while
there is nothing new (downstream takes a writer silent for WatermarkMerge.writer_ttl_s as gone),
a "hello" from nothing at once after each assignment, and nothing at all while a rebalance
settles. A :class:`ProgressAnnouncer` is owned by the runner (event-time mode with
``on_progress``) and holds only that state; the merge and the consumer are lent to it per call.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Sequence

from kafka.errors import KafkaError

from faultlens.events.event_time import WatermarkMerge
from faultlens.streams.kafka_client import Consumer
from faultlens.streams.producer import Outgoing
from faultlens.streams.runner.options import ProgressCallback
from faultlens.streams.runner.rebalance import REBALANCE_SETTLE_S

log = logging.getLogger(__name__)

# A member with no new progress still says so this often: downstream takes a writer silent for
# WatermarkMerge.writer_ttl_s (15 s) as gone, and must hear whether it is still behind.
KEEPALIVE_S = 5.0
# How long the count of the input topics' partitions is trusted (a metadata request per topic).
PARTITION_COUNT_TTL_S = 30.0


class ProgressAnnouncer:
    """What this member last said downstream, and when it may speak next."""

    def __init__(self, on_progress: ProgressCallback | None, topics: Sequence[str]):
        self.on_progress = on_progress
        self.topics = list(topics)
        self.announced: float | None = None
        self.announced_idle: bool | None = None  # None: nothing said since the last hello
        self.announced_wall = 0.0
        self._input_partitions: tuple[int | None, float] = (None, 0.0)  # (how many, when counted)
        # After a rebalance: say "I write here too, from nothing yet" at once, then keep quiet a
        # moment, so a member that kept its partitions cannot announce progress past the records
        # a new owner is about to write (the stage downstream holds at the last word it heard).
        self.hello = False
        self.settle_until = 0.0
        self.done = False  # the last word says the run stopped because its input ended

    def assigned(self, now: float) -> None:
        """An assignment: the hello wipes this member's word downstream, so its progress is said again."""
        self.hello = True
        self.announced = self.announced_idle = None
        self.settle_until = now + REBALANCE_SETTLE_S

    def revoked(self, now: float) -> None:
        self.settle_until = now + REBALANCE_SETTLE_S

    def last_word(self, done: bool = False) -> None:
        """The end of a run: the next announcement goes out whatever was said just before. ``done``:
        the run stopped because its input ended (an idle stop), so downstream takes this member's
        silence for the input's end, not an upstream stop to alert on (events.event_time.stopped_upstream)."""
        self.announced_wall = self.settle_until = 0.0
        self.done = done

    def announce(self, consumer: Consumer | None, merge: WatermarkMerge | None, rebalancing: bool,
                 behind: Callable[[], bool]) -> list[Outgoing]:
        """This member's progress (it is alive, whether it is still behind on its input, whether it
        is idle: caught up and quiet, holding nothing back); ``behind`` is asked only when a word
        goes out."""
        if self.on_progress is None or merge is None:
            return []
        hello: list[Outgoing] = []
        if self.hello:
            self.hello = False
            hello = list(self.on_progress(float("-inf"), self.reads(consumer), True, False, False))
        if time.monotonic() < self.settle_until or rebalancing:
            # Revoked and not yet given partitions again: its merge is empty ("idle") and the
            # client still lists the old assignment as what it reads. Said then, that word let the
            # job stage take one member's records for all there was (issue 32, starved: a join
            # that took 8 s on a starved host). Silent, its last word before the rebalance binds.
            return hello
        progress, idle = merge.progress, merge.idle
        if progress is None and not idle:
            return hello  # nothing handed on yet, and something still to come
        since = time.monotonic() - self.announced_wall
        grew = progress is not None and (self.announced is None or progress > self.announced)
        if self.announced_idle is not None and (since < 1.0 or (
                not grew and idle == self.announced_idle and since < KEEPALIVE_S)):
            return hello
        if grew:
            self.announced = progress
        self.announced_idle, self.announced_wall = idle, time.monotonic()
        said = self.announced if self.announced is not None else float("-inf")
        is_behind = behind()
        return hello + list(self.on_progress(said, self.reads(consumer), is_behind, idle and not is_behind,
                                             self.done))

    def reads(self, consumer: Consumer | None) -> tuple[tuple[str, ...], int] | None:
        """The input partitions this member reads, and how many its group reads in all (None while
        the topics' metadata is unknown): downstream waits until every one has a writer."""
        if consumer is None:
            return None
        now = time.monotonic()
        total, asked = self._input_partitions
        if total is None or now - asked > PARTITION_COUNT_TTL_S:
            # A metadata request per topic (confluent-kafka asks the broker): not every second.
            try:
                counts = [consumer.partitions_for_topic(topic) for topic in self.topics]
            except KafkaError as exc:
                log.debug("partition counts unknown (%s): progress said without them", exc)
                counts = []
            total = sum(len(c) for c in counts) if counts and all(counts) else None
            self._input_partitions = (total, now)
        if total is None:
            return None
        own = sorted(f"{tp.topic}:{tp.partition}" for tp in consumer.assignment() if tp.topic in self.topics)
        return tuple(own), total
