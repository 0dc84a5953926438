"""Demo-only wiring of the pipeline's consumers: what a simulated cluster beside a real trainer needs
and production must not have (both plug into PipelineOptions' extension points).

- :class:`EngineRouter`: jobs diagnosed by an engine of their own. The engine keeps one event
  clock; a job whose clock runs differently (a simulated cluster at 20x beside a real trainer)
  would otherwise look late or silent to it.
- :class:`DiagnosisTap`: the live view sees every diagnosis remediation is about to decide, and the
  policy's clock is each diagnosis's own decision time instead of the wall clock, so windows,
  dedup and command expiry follow the simulated clock that runs faster.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable

from diagnosis.consumer import DiagnoseHandler, primed_handler
from diagnosis.engine import EngineConfig
from remediation.consumer import DIAGNOSES_TOPIC, RemediationHandler
from streams.config import KafkaSettings
from streams.diagnosis_record import Diagnosis
from streams.producer import Outgoing
from streams.runner import Record

log = logging.getLogger(__name__)


class EngineRouter:
    """A diagnose handler that sends each job's events to its own engine (default: the shared one)."""

    def __init__(self, default: DiagnoseHandler, own: dict[str, DiagnoseHandler]):
        self.default = default
        self.own = own

    @property
    def handlers(self) -> list[DiagnoseHandler]:
        return [self.default, *self.own.values()]

    @property
    def emitted(self) -> int:
        return sum(h.emitted for h in self.handlers)

    def handle(self, records: list[Record]) -> list[Outgoing]:
        if not self.own:
            return self.default.handle(records)
        lanes: dict[int, tuple[DiagnoseHandler, list[Record]]] = {}
        for r in records:
            h = self.own.get(getattr(r.value, "job", None), self.default)
            lanes.setdefault(id(h), (h, []))[1].append(r)
        out: list[Outgoing] = []
        for h, recs in lanes.values():
            out.extend(h.handle(recs))
        return out

    def tick(self, now: float) -> list[Outgoing]:
        return [o for h in self.handlers for o in h.tick(now)]

    def flush(self) -> list[Outgoing]:
        return [o for h in self.handlers for o in h.flush()]


class DiagnosisTap:
    """Wraps the remediation handler (see the module's docstring)."""

    def __init__(self, on_diagnosis: Callable[[Diagnosis], None] | None = None, event_time: bool = False):
        self.on_diagnosis = on_diagnosis
        self.event_time = event_time
        self.handler: RemediationHandler | None = None
        self._current: float | None = None

    def wrap(self, handler: RemediationHandler) -> "DiagnosisTap":
        """For PipelineOptions.wrap_remediation: the handler now decides on this tap's clock."""
        self.handler = handler
        handler.clock = self.clock
        return self

    def clock(self) -> float:
        return self._current if self._current is not None else time.time()

    def _seen(self, r: Record) -> None:
        if self.on_diagnosis is not None and r.topic == DIAGNOSES_TOPIC and isinstance(r.value, Diagnosis):
            try:
                self.on_diagnosis(r.value)
            except Exception:  # noqa: BLE001 - a view callback must never cost a decision
                log.exception("diagnosis callback failed")

    def handle(self, records: list[Record]) -> Iterable[Outgoing]:
        assert self.handler is not None
        if not self.event_time:
            for r in records:
                self._seen(r)
            return self.handler.handle(records)
        out: list[Outgoing] = []
        for r in records:  # one at a time: the clock is this record's time while it is decided
            self._seen(r)
            self._current = r.value.ts if isinstance(r.value, Diagnosis) else None
            try:
                out.extend(self.handler.handle([r]))
            finally:
                self._current = None
        return out


def routed_engines(own_jobs: Iterable[str], config: EngineConfig) -> Callable[[KafkaSettings, str], EngineRouter]:
    """For PipelineOptions.diagnose_handler: one shared engine, and one of its own per job in ``own_jobs``."""
    def build(settings: KafkaSettings, group: str) -> EngineRouter:
        return EngineRouter(primed_handler(settings, config, group),
                            {job: primed_handler(settings, config, group) for job in own_jobs})
    return build
