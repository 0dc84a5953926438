"""Demo-only wiring of the pipeline's consumers: what a simulated cluster beside a real trainer needs
and production must not have (it plugs into PipelineOptions.wrap_remediation).

:class:`DiagnosisTap`: the live view sees every diagnosis remediation is about to decide, and the
policy's clock is each diagnosis's (and each check result's) own time instead of the wall clock,
so windows, dedup and command expiry follow the simulated clock that runs faster. A reproduction outcome
decided on the wall clock gave an eviction stamped 20 minutes ahead of the simulated cluster,
which refused it as "issued in the future". (Diagnosis needs no such help: the
engine keeps each job's own event time.)

:func:`quicken_for_lockstep`: with ``--speed 0`` the driver waits after every slice until
diagnosis has handed on what it published; the diagnosis consumer's waits for more data are
what that wait was made of, so they are shortened for it alone.

:class:`PacedWrites`: in lockstep the history consumer is on no one's path, but it wrote each poll
in its own DuckDB transaction, and a transaction costs ~8 ms however few rows it holds (a slice of
the lockstep brings a few dozen): it now writes at most once a second until the run ends, then as
it reads again, so the shutdown's drain finds it as quick as before. Not in a paced demo: there its
polls are big already, and paced it fell behind.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Callable, Iterable

from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.remediation.consumer import DIAGNOSES_TOPIC, RemediationHandler
from faultlens.streams.producer import Outgoing
from faultlens.streams.runner.loop import GroupRunner, Record

log = logging.getLogger(__name__)

# Measured on one lockstep demo (bench/results_throughput.md, "the demo's lockstep"): a slice's
# 0.30 s wait (p50) was the diagnosis consumer's alone, nearly all of it waiting, not working. Its
# fetch parked at the broker up to fetch_max_wait_ms (100 ms) after the slice was published; its
# ordering step waited up to 100-200 ms more on the `jobs` reader, whose fetches park the same way;
# and the records the merge let go once their partitions were quiet for max_idle_s waited for the
# poll timeout (200 ms) to end before it looked again. The other hops were done by then.
LOCKSTEP_FETCH_WAIT_MS = 10
LOCKSTEP_POLL_TIMEOUT_MS = 20


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


def quicken_for_lockstep(runner: GroupRunner) -> None:
    """Shorter waits for data for one runner not started yet (the diagnosis consumer of a lockstep
    demo): its fetches, its broadcast reader's and its poll. Only for it: the others' waits were
    not on the lockstep's path, and each shorter one costs a loop or a fetch more a second."""
    runner.settings = dataclasses.replace(runner.settings, fetch_max_wait_ms=LOCKSTEP_FETCH_WAIT_MS)
    runner.options = dataclasses.replace(runner.options, poll_timeout_ms=LOCKSTEP_POLL_TIMEOUT_MS)


HISTORY_WRITE_EVERY_S = 1.0


class PacedWrites:
    """Paces one runner's handler (see the module's docstring): after each batch it waits out the
    rest of ``every_s`` before the runner polls again, so the next poll brings what came meanwhile
    (up to the runner's max_records) and is handled as one batch; a batch of half max_records or
    more is not paced (the consumer is behind). The runner still commits only
    what its handler returned from, so nothing is committed unwritten. :meth:`release` ends the
    pacing, and any wait under way, at once."""

    def __init__(self, runner: GroupRunner, every_s: float = HISTORY_WRITE_EVERY_S,
                 clock: Callable[[], float] = time.monotonic):
        self.every_s = every_s
        self.clock = clock
        # A batch this big means the consumer is behind (a poll brings at most max_records): it
        # reads on at once, or pacing would cap it at max_records a second (the 64-node demo at
        # 20x publishes ~1,100 events a second and more when a fault bursts).
        self.behind_at = max(2, runner.options.max_records // 2)
        self.batches = 0
        self._released = threading.Event()
        self._handle = runner.handler.handle
        runner.handler = dataclasses.replace(runner.handler, handle=self.handle)

    def handle(self, records: list[Record]) -> Iterable[Outgoing]:
        started = self.clock()
        out = list(self._handle(records))
        self.batches += 1
        # A batch that failed is retried one record at a time (GroupRunner._run_handler): those
        # calls are not paced, or a bad batch of n would take n seconds.
        if 1 < len(records) < self.behind_at:
            self._released.wait(max(0.0, self.every_s - (self.clock() - started)))
        return out

    def release(self) -> None:
        self._released.set()
