"""The Kafka edge of the diagnosis engine: telemetry + jobs in, diagnosis records out.

A thin :class:`streams.runner.GroupRunner` handler. Each record goes through the engine on its
own, so one bad event becomes one dead letter (with the engine's reason) and never makes the
runner replay the whole batch through a stateful engine. Redelivered records (at-least-once)
are recognised by event id inside the engine.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

from diagnosis.engine import Engine, EngineConfig
from streams.diagnosis_record import Diagnosis
from streams.config import KafkaSettings
from streams.events import Envelope, InvalidEvent, decode, encode
from streams.producer import Outgoing
from streams.metrics import DIAGNOSES
from streams.reader import iter_topics
from streams.runner import GroupRunner, Record, dead_letter
from streams import topics
from streams.topics import TELEMETRY_TOPICS

log = logging.getLogger(__name__)

GROUP = "faultlens-diagnose"
DIAGNOSES_TOPIC = topics.DIAGNOSES
JOBS_TOPIC = topics.JOBS
INPUT_TOPICS = (*TELEMETRY_TOPICS, JOBS_TOPIC)


def diagnosis_record(d: Diagnosis) -> Outgoing:
    DIAGNOSES.labels(d.fault, d.action).inc()
    return Outgoing(DIAGNOSES_TOPIC, d.job.encode(), d.encode())


class DiagnoseHandler:
    def __init__(self, engine: Engine | None = None, group: str = GROUP) -> None:
        self.engine = engine or Engine()
        self.group = group
        self.emitted = 0

    def handle(self, records: list[Record]) -> list[Outgoing]:
        out: list[Outgoing] = []
        for r in records:
            try:
                found = self.engine.process(r.value, at=r.event_ts, skew_s=r.skew_s, clamped=r.clamped)
            except InvalidEvent as exc:
                out.append(self._dead(r, f"invalid: {exc}"))
                continue
            except Exception as exc:  # noqa: BLE001 - a detector bug must cost one event, not the consumer
                log.exception("engine failed on %s/%s event %s", r.value.source, r.value.kind, r.value.id)
                out.append(self._dead(r, f"engine error: {type(exc).__name__}: {exc}"))
                continue
            out.extend(diagnosis_record(d) for d in found)
            self.emitted += len(found)
        return out

    def tick(self, now: float) -> Iterable[Outgoing]:
        found = self.engine.tick(now)
        self.emitted += len(found)
        return [diagnosis_record(d) for d in found]

    def flush(self) -> list[Outgoing]:
        found = self.engine.flush()
        self.emitted += len(found)
        return [diagnosis_record(d) for d in found]

    def _dead(self, r: Record, reason: str) -> Outgoing:
        raw = encode(r.value) if isinstance(r.value, Envelope) else None
        return dead_letter(r.topic, r.partition, r.offset, r.key, raw, reason, self.group)


def prime_topologies(engine: Engine, settings: KafkaSettings, idle_s: float = 1.0) -> int:
    """Read the compacted ``jobs`` topic from the start so topologies are known before telemetry."""
    n = 0
    for m in iter_topics(settings, [JOBS_TOPIC], idle_s=idle_s):
        try:
            event = decode(m.value)
            engine.book.update(event)
        except InvalidEvent as exc:
            log.warning("jobs topic offset %d: %s", m.offset, exc)
            continue
        n += event.kind == "topology"
    return n


def primed_handler(settings: KafkaSettings, config: EngineConfig | None = None, group: str = GROUP) -> DiagnoseHandler:
    """A handler over a fresh engine that already knows every job's topology."""
    engine = Engine(config)
    log.info("primed %d topology event(s) from the jobs topic", prime_topologies(engine, settings))
    return DiagnoseHandler(engine, group)


def diagnose_consumer(settings: KafkaSettings, config: EngineConfig | None = None, *, group: str = GROUP,
                      handler: Any = None) -> tuple[GroupRunner, Any]:
    """The diagnosis consumer, not started: `faultlens diagnose` and `faultlens up` both build it here.
    ``handler`` replaces the primed default (the demo routes some jobs to engines of their own)."""
    handler = handler if handler is not None else primed_handler(settings, config, group)
    return GroupRunner(settings, group, INPUT_TOPICS, handler, event_time=True), handler
