"""Priming from the compacted ``jobs`` topic: read it once from its start, so a consumer knows every
job's machines before its first telemetry (the diagnosis stages and the remediator both do).

A tombstone (a null value) is compaction's delete marker for a job whose topology was deleted: a
normal record of a compacted topic, skipped quietly. Only a record that is there but does not decode
is a fault, said at WARNING and counted."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from faultlens.events.envelope import Envelope, decode
from faultlens.events.topics import JOBS
from faultlens.events.topology import is_topology
from faultlens.streams.config import KafkaSettings
from faultlens.streams.reader import iter_topics

log = logging.getLogger(__name__)


@dataclass
class JobsTopicRead:
    """What one priming read found."""

    topologies: int = 0
    tombstones: int = 0
    malformed: int = 0


def prime_from_jobs_topic(
    settings: KafkaSettings, observe: Callable[[Envelope], object], *, idle_s: float = 1.0, timeout_s: float | None = None
) -> JobsTopicRead:
    """Hand every event of the ``jobs`` topic to ``observe``, in order. A record that does not decode,
    or that ``observe`` refuses with a ValueError (InvalidEvent is one), is skipped, not fatal: one bad
    topology must not keep a consumer from starting."""
    read = JobsTopicRead()
    # ``m`` is either client's record (streams/messages.ReadMessage), read by field name: kafka-python's
    # ConsumerRecord is not confluent's Message field for field
    for m in iter_topics(settings, [JOBS], idle_s=idle_s, timeout_s=timeout_s):
        if m.value is None:
            read.tombstones += 1
            log.debug("jobs topic offset %d: tombstone skipped", m.offset)
            continue
        try:
            event = decode(m.value)
            observe(event)
        except ValueError as exc:
            read.malformed += 1
            log.warning("jobs topic offset %d: %s", m.offset, exc)
            continue
        read.topologies += is_topology(event)
    if read.malformed:
        log.warning("jobs topic: %d malformed record(s) skipped", read.malformed)
    return read
