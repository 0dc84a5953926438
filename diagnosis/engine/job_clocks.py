"""The engine's clocks per job (diagnosis/engine/core.py): a quiet job's time moved by the jobs that
share its clock (diagnosis/engine/time_base.py), by a node-stage member's word on jobs held
elsewhere (`summary/clock`), and by the wall clock once nothing on its clock arrived for
``grace_s``. :class:`~diagnosis.engine.core.Engine` is a :class:`JobClocks`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from typing import NamedTuple

from faultlens.diagnosis.engine.config import EngineConfig
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.lane import Lane
from faultlens.diagnosis.engine.time_base import TimeBases
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.events.payloads import typed
from faultlens.events.payloads_stage import SummaryClock

log = logging.getLogger(__name__)


class Heard(NamedTuple):
    """A job held by another member: when (wall) its latest event time was heard here, and that time."""

    arrival_wall: float
    arrival_now: float


class JobClocks:
    """Moving each job's event time when its own events do not."""

    config: EngineConfig
    book: JobBook
    clocks: TimeBases
    _lanes: dict[str, Lane]
    _elsewhere: dict[str, Heard]
    _upstream_stopped: frozenset[str]

    def _apply_pending(self, lane: Lane, until: float) -> None:
        raise NotImplementedError  # the engine's: job records held until their place in event time

    def release(self) -> list[Diagnosis]:
        raise NotImplementedError  # the engine's: the job side of steps held to be taken as a run

    def _move_quiet_mates(self, job: str, delivered: float) -> list[Diagnosis]:
        """The jobs on ``job``'s clock that delivered nothing for ``grace_s`` of it: their time moves
        by what elapsed past the grace (a job whose whole stream stopped is one alert: liveness)."""
        out: list[Diagnosis] = []
        for mate, target in self.clocks.check(job, delivered):
            lane = self._lanes.get(mate)
            if lane is not None and lane.now is not None and target > lane.now and mate not in self._upstream_stopped:
                out.extend(self._move(mate, lane, target))
        return out

    def _clocks_elsewhere(self, event: Envelope) -> list[Diagnosis]:
        """A node-stage member's word on how far each job it reads has delivered (`summary/clock`):
        the jobs another job-stage member holds are mates of the jobs here as in one engine, and a
        quiet job here moves by their time (diagnosis/edge/node_consumer.py). The jobs held here
        check their clocks by their own events."""
        out: list[Diagnosis] = []
        wall = time.time()
        for job, delivered in typed(event, SummaryClock).jobs.items():
            lane = self._lanes.get(job)
            if lane is not None and lane.arrival_now is not None:
                continue
            heard = self._elsewhere.get(job)
            if heard is None or delivered > heard.arrival_now:
                self._elsewhere[job] = Heard(wall, delivered)
                out.extend(self._move_quiet_mates(job, delivered))
        return out

    def _heard(self, job: str) -> Lane | Heard | None:
        """Where and when ``job``'s latest event time was heard: its lane, or a node-stage word."""
        lane = self._lanes.get(job)
        return lane if lane is not None and lane.arrival_now is not None else self._elsewhere.get(job)

    def _move(self, job: str, lane: Lane, target: float, stream_stopped: bool = False) -> list[Diagnosis]:
        lane.now = target
        self.book.advance(job, target)
        self._apply_pending(lane, target)
        return lane.tick(target, stream_stopped)

    # --- time -------------------------------------------------------------------------------
    def tick(
        self, wall_now: float | None = None, busy: Collection[str] = (), until: Mapping[str, float] | None = None
    ) -> list[Diagnosis]:
        """The live consumer's clock (wall seconds since the epoch, default now), for a clock that
        stopped: once nothing of a job and of the jobs that share its clock (diagnosis/engine/time_base.py)
        arrived for ``grace_s`` wall seconds, the job's time moves by the wall time elapsed beyond the
        grace (pending verdicts fall due). No event time shows such a stop (offline, the end of a
        trace judges no absence): the input ended or the pipeline stopped, and a whole job found
        quiet so is recorded, not alerted on (diagnosis/rules/liveness.py). A job quiet while jobs
        on its clock report on is moved by their event time instead (process), as offline. The
        jobs in ``busy`` have records the consumer still holds back: their time, and their mates',
        waits for them. ``until`` caps the wall time a job's clock may use: where its upstream stage
        stopped (events.event_time.UpstreamStop), its silence is the pipeline's, and its time stays there."""
        wall = time.time() if wall_now is None else wall_now
        self._upstream_stopped = frozenset(until or ())
        out = self.release()  # held steps come before any time moved
        for job, lane in self._lanes.items():
            if lane.now is None or lane.arrival_now is None or job in busy:
                continue
            mates = self.clocks.mates(job)
            if any(j in busy for j in mates):
                continue
            base = [lane, *(m for j in mates if (m := self._heard(j)) is not None)]
            heard_wall = max(m.arrival_wall for m in base)
            idle = (wall if until is None or job not in until else min(wall, until[job])) - heard_wall
            if idle <= self.config.grace_s:
                continue
            target = (
                max(t for m in base if (t := m.arrival_now) is not None) + (idle - self.config.grace_s) * self.config.wall_rate
            )
            if target <= lane.now:
                continue
            if lane.now == lane.arrival_now:
                log.info(
                    "nothing of job %s (nor of the %d job(s) on its clock) arrived for %.0fs of wall time: its "
                    "event time moves with the wall clock from %.3f",
                    job,
                    len(base) - 1,
                    idle,
                    lane.now,
                )
            out.extend(self._move(job, lane, target, stream_stopped=True))
        return out

    def wall_when_judged(self, past_s: float) -> float | None:
        """The wall time by which, nothing more arriving, :meth:`tick` has moved every job's time
        ``past_s`` beyond what it and the jobs on its clock last delivered: where a run whose input
        ended has every quiet job's end judged (the runner's ``input_ended``). None: nothing heard, or
        a wall clock that moves no job's time (``wall_rate`` 0)."""
        if self.config.wall_rate <= 0:
            return None
        heard = [lane.arrival_wall for lane in self._lanes.values() if lane.arrival_now is not None]
        heard += [h.arrival_wall for h in self._elsewhere.values()]
        if not heard:
            return None
        return max(heard) + self.config.grace_s + past_s / self.config.wall_rate
