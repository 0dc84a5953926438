"""Record live topics into a trace: decode, keep one job (optional), dedup, order, write.

Order is :func:`events.trace.trace_order` (time, job records first, then id), so recording a
replayed recording gives the same rows in the same order. The job's topology comes first: it is
read from the compacted ``jobs`` topic from its beginning even when telemetry is read from now.
Recording holds the events in memory to sort them (bounded by --duration / --idle).

Records of the ``diagnoses`` topic are diagnoses, not events: they are kept apart and written
beside the trace (``TRACE.diagnoses.jsonl``, :func:`events.trace.write_diagnoses`), so the trace's
rows stay what every reader of a trace feeds its detectors. A diagnosis the engine re-emitted
under its id (a fold whose count grew) is kept once, at its highest count.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from faultlens.events import topics
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope, InvalidEvent, decode
from faultlens.events.topics import TELEMETRY_TOPICS
from faultlens.events.topology import is_topology
from faultlens.events.trace import diagnoses_path, trace_order, write_diagnoses, write_trace
from faultlens.streams.config import KafkaSettings
from faultlens.streams.reader import iter_topics

log = logging.getLogger(__name__)

JOBS_TOPIC = topics.JOBS
DIAGNOSES_TOPIC = topics.DIAGNOSES
DEFAULT_TOPICS = (*TELEMETRY_TOPICS, JOBS_TOPIC)


@dataclass
class RecordStats:
    events: int = 0
    diagnoses: int = 0
    duplicates: int = 0
    other_jobs: int = 0
    invalid: int = 0
    by_topic: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"events": self.events, "diagnoses": self.diagnoses, "duplicates": self.duplicates, "other_jobs": self.other_jobs,
                "invalid": self.invalid, "by_topic": dict(sorted(self.by_topic.items()))}


@dataclass
class Recording:
    events: list[Envelope]  # trace order, each job's topology first
    diagnoses: list[Diagnosis]  # by time, then id
    stats: RecordStats


def record(settings: KafkaSettings, topics: Iterable[str] = DEFAULT_TOPICS, *, job: str | None = None,
           duration_s: float | None = None, idle_s: float = 5.0, from_beginning: bool = True,
           progress: Callable[[int], None] | None = None) -> Recording:
    """Read ``topics`` until ``idle_s`` without a message or ``duration_s``: their events in trace
    order and, from ``diagnoses``, the diagnoses. A record neither decodes as is a counted skip."""
    topics = list(dict.fromkeys(topics))
    stats = RecordStats()
    seen: set[str] = set()
    events: list[Envelope] = []
    diagnoses: dict[str, Diagnosis] = {}

    def keep(r) -> None:
        stats.by_topic[r.topic] = stats.by_topic.get(r.topic, 0) + 1
        if progress:
            progress(1)

    def take(records) -> None:
        for r in records:
            try:
                item = Diagnosis.decode(r.value) if r.topic == DIAGNOSES_TOPIC else decode(r.value)
            except InvalidEvent as exc:
                stats.invalid += 1
                log.warning("skipping %s[%d]@%d: %s", r.topic, r.partition, r.offset, exc)
                continue
            if job is not None and item.job != job:
                stats.other_jobs += 1
                continue
            if isinstance(item, Diagnosis):
                had = diagnoses.get(item.id)
                if had is not None:
                    stats.duplicates += 1
                    if had.count >= item.count:
                        continue
                else:
                    keep(r)
                diagnoses[item.id] = item
                continue
            if item.id in seen:  # at-least-once delivery: the same event twice is one event
                stats.duplicates += 1
                continue
            seen.add(item.id)
            events.append(item)
            keep(r)

    if JOBS_TOPIC in topics and not from_beginning:
        take(iter_topics(settings, [JOBS_TOPIC], idle_s=min(idle_s, 2.0), from_beginning=True))
        topics.remove(JOBS_TOPIC)
    take(iter_topics(settings, topics, idle_s=idle_s, timeout_s=duration_s, from_beginning=from_beginning))
    events.sort(key=trace_order)
    events = topology_first(events)
    stats.events = len(events)
    stats.diagnoses = len(diagnoses)
    return Recording(events, sorted(diagnoses.values(), key=lambda d: (d.ts, d.id)), stats)


def collect(settings: KafkaSettings, topics: Iterable[str] = DEFAULT_TOPICS, **kwargs) -> tuple[list[Envelope], RecordStats]:
    """:func:`record`'s events and counts (callers that want no diagnoses)."""
    rec = record(settings, topics, **kwargs)
    return rec.events, rec.stats


def topology_first(events: list[Envelope]) -> list[Envelope]:
    """Move each job's first topology before the job's first event, stamped at that event's time:
    the recording began after a swap (the compacted topic kept only a later topology), or the
    agents published before the trainer did (they start first). Every localiser needs it first,
    and a trace is in time order (moved with its own later time, the trace could not be written)."""
    first_event: dict[str, int] = {}
    first_topo: dict[str, int] = {}
    for i, e in enumerate(events):
        first_event.setdefault(e.job, i)
        if is_topology(e):
            first_topo.setdefault(e.job, i)
    moves = {first_topo[j]: first_event[j] for j in first_topo if first_topo[j] > first_event[j]}
    if not moves:
        return events
    out: list[Envelope] = []
    insert_at: dict[int, list[Envelope]] = {}
    for src, dst in moves.items():
        insert_at.setdefault(dst, []).append(replace(events[src], ts=events[dst].ts))
    for i, e in enumerate(events):
        out.extend(insert_at.get(i, ()))
        if i not in moves:
            out.append(e)
    return out


def write_recording(out: str | os.PathLike[str], rec: Recording, topics: Iterable[str]) -> None:
    """The trace, and its diagnoses beside it when ``diagnoses`` was recorded (an empty file: it was,
    and said nothing); otherwise a diagnoses file left by an earlier recording to ``out`` is removed,
    as it would speak for events it never saw."""
    write_trace(out, rec.events)
    if DIAGNOSES_TOPIC in topics:
        write_diagnoses(diagnoses_path(out), rec.diagnoses)
    else:
        diagnoses_path(out).unlink(missing_ok=True)


def record_trace(settings: KafkaSettings, out: str | os.PathLike[str], topics: Iterable[str] = DEFAULT_TOPICS,
                 **kwargs) -> RecordStats:
    topics = list(topics)
    rec = record(settings, topics, **kwargs)
    write_recording(out, rec, topics)
    return rec.stats
