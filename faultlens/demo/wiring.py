"""Demo-only wiring of the pipeline's consumers: what a simulated cluster beside a real trainer needs
and production must not have (it plugs into PipelineOptions.wrap_remediation).

:class:`DiagnosisTap`: the live view sees every diagnosis remediation is about to decide, and the
policy's clock is each diagnosis's (and each check result's) own time instead of the wall clock,
so windows, dedup and command expiry follow the simulated clock that runs faster. A reproduction outcome
decided on the wall clock gave an eviction stamped 20 minutes ahead of the simulated cluster,
which refused it as "issued in the future". (Diagnosis needs no such help: the
engine keeps each job's own event time.)
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable

from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.remediation.consumer import DIAGNOSES_TOPIC, RemediationHandler
from faultlens.streams.producer import Outgoing
from faultlens.streams.runner.loop import Record

log = logging.getLogger(__name__)


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
            self._current = r.value.ts if isinstance(r.value, (Diagnosis, Envelope)) else None
            try:
                out.extend(self.handler.handle([r]))
            finally:
                self._current = None
        return out

