"""A batch's plain steps through the engine in one loop (issue 56): :meth:`StepBatch.process_steps`,
what :meth:`~diagnosis.engine.core.Engine.process` with ``hold`` does for a step that goes the usual
way, with what each call of it looked up and checked looked up once a batch, or once a job. Four in
five events are steps; each through ``process`` cost the engine's admission (about ten calls and
the branches between them) besides its detectors' work. :class:`~diagnosis.engine.core.Engine` is
a :class:`StepBatch`; anything unusual (a copy, a late or skewed step, a step with no typed payload,
of a job with no lane yet or with a job record pending) is left to ``process``.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from faultlens.diagnosis.engine.config import EngineConfig
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.lane import Lane
from faultlens.diagnosis.engine.stages import NodeOutput, NodeStage, step_rank_mismatch
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.events.payloads_job import TrainStep


class StepBatch:
    """The engine's loop over a batch's plain steps (see the module's docstring)."""

    config: EngineConfig
    book: JobBook
    node_stage: NodeStage
    stats: Counter
    failed_at: int
    _lanes: dict[str, Lane]
    _seen: OrderedDict[str, str]
    _held: list[Envelope]
    _held_lane: Lane | None
    _ready: list[Diagnosis]
    _step_out: NodeOutput

    # the engine's (diagnosis/engine/core.py, job_clocks.py)
    _take_held: Callable[[], None]
    _job_side: Callable[[Lane, NodeOutput], list[Diagnosis]]
    _move_quiet_mates: Callable[[str, float], list[Diagnosis]]

    def process_steps(self, records: Sequence[Any], i: int, out: list[Diagnosis]) -> int:
        """``Engine.process(..., hold=True)`` of ``records[i:]`` (placed records: ``value``, ``skew_s``)
        for as long as each is a plain step it would take the usual way (typed, on its own clock, on
        time, not a copy, of a lane with its time and no pending job record): what each finds is
        added to ``out`` in process's order; returns the index of the first record not taken, for
        ``process``. Issue 56: four in five events are steps, and each through process cost the
        engine's admission as calls, lookups and branches one loop of a batch makes once. On an
        exception the record that raised is ``records[self.failed_at]``, and what the records
        before it found is in ``out``. tests/diagnosis/test_engine_step_runs.py and
        test_engine_step_batch.py hold it to process."""
        lanes, seen, book, node_stage = self._lanes, self._seen, self.book, self.node_stage
        config = self.config
        if config.stage == "job":
            return i
        max_late, every, seen_ids = config.max_lateness_s, config.tick_every_s, config.seen_ids
        observe_step, held = node_stage.observe_step, self._held
        advance, wall = book.advance, time.time
        n, taken, job = len(records), 0, ""
        lane: Lane | None = None
        places: Mapping[int, Any] | None = None
        try:
            while i < n:
                r = records[i]
                event = r.value
                if r.skew_s is not None or event.kind != "step" or event.source != "train":
                    break
                step = event._payload
                if type(step) is not TrainStep or event.id in seen:
                    break
                if event.job != job:
                    job = event.job
                    lane = lanes.get(job)
                    places = book.sole_placement(job)  # (the book changes only by a job record: none in a run)
                if lane is None or lane.pending or lane.now is None or lane.now - event.ts > max_late:
                    break
                if held and event.job != held[0].job:
                    self._take_held()
                    held = self._held
                seen[event.id] = job
                if len(seen) > seen_ids:
                    seen.popitem(last=False)
                taken += 1
                # Engine._node_step, held as process(hold=True) holds it
                node_out = self._step_out
                if node_out.forward or node_out.findings or node_out.windows:  # left by a step that raised
                    node_out = self._step_out = NodeOutput()
                mismatch = step_rank_mismatch(book, event, step.rank, places)
                if mismatch is not None:
                    self.stats["topology_mismatch"] += 1
                    node_out.findings.append(mismatch)
                observe_step(event, step, node_out)
                if not node_out.findings and not node_out.windows and len(node_out.forward) == 1:
                    node_out.forward.clear()
                    held.append(event)
                    self._held_lane = lane
                    found: list[Diagnosis] = []
                else:
                    self._step_out = NodeOutput()
                    if held:
                        self._take_held()
                        held = self._held
                    found = self._job_side(lane, node_out)
                ts = event.ts
                if ts > lane.now:
                    lane.now = ts
                    advance(job, ts)
                lane.arrival_wall = wall()
                lane.arrival_now = now = lane.now
                if now - lane.last_tick >= every:
                    if held:
                        self._take_held()
                        held = self._held
                    found.extend(lane.tick(now))
                    held = self._held
                if ts > lane.delivered:
                    lane.delivered = ts
                    if ts - lane.clock_checked >= every:
                        lane.clock_checked = ts
                        if held:
                            self._take_held()
                            held = self._held
                        found.extend(self._move_quiet_mates(job, ts))
                        held = self._held
                if self._ready:
                    out.extend(self._ready)
                    self._ready = []
                if found:
                    out.extend(found)
                i += 1
        except BaseException:
            self.failed_at = i
            raise
        finally:
            self.stats["events"] += taken
        return i
