"""The diagnosis engine: events in, diagnosis records out, the same on a live stream and a trace.

Composition (docs/design.md §1): the job book (topologies) → the node stage (log parsing, node-local
rules, feature windows) → the job stage (first failing rank, silent nodes, peer anomaly,
hang / fail-slow localisation) → dedup (folding, suppression, escalation). Diagnoses that come
out are shown to the job stage again, so a fail-slow suspicion can start stack rounds. Each job
has a lane of its own (diagnosis/engine/lane.py: its job stage, clock, waves, debounce and dedup);
this module admits events (diagnosis/engine/kinds.py, payload check, copies, lateness), routes them
and keeps the jobs' clocks (diagnosis/engine/job_clocks.py).

Time is event time, and each job has its own: a job's time is the latest event time it delivered,
and its absence detectors (silence, hangs, windows) tick on it. The live consumer hands events
over in event-time order across partitions (streams.runner.loop, event_time mode) and may place an
event whose sender's clock is off at another time (``process(..., at=)``). A job that went quiet
has its time moved by the jobs that share its clock (diagnosis/engine/time_base.py: they agreed
while both delivered), by what elapsed past ``grace_s`` of theirs, the same live, as a backlog and
offline; never by a job on another clock (a simulated cluster beside a real trainer, an old trace
replayed beside live jobs). The live consumer also calls :meth:`Engine.tick` with the wall clock,
which moves a job's time only once nothing on its clock arrived for ``grace_s`` wall seconds (the
input's end or the pipeline's silence: recorded, not alerted on). A telemetry sample more than
``max_lateness_s`` behind its job's time is counted and not judged; a late fault report is
diagnosed and marked late.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping

import msgspec

from faultlens.diagnosis.engine.config import EngineConfig
from faultlens.diagnosis.engine.debounce import Debounce
from faultlens.diagnosis.engine.dedup import Dedup
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.fleet_waves import FleetWaves, Seen, seen_of
from faultlens.diagnosis.engine.job_clocks import Heard, JobClocks
from faultlens.diagnosis.engine.kinds import KNOWN_KINDS, known_kind
from faultlens.diagnosis.engine.lane import Lane
from faultlens.diagnosis.engine.stages import JOB_SOURCES, JobStage, NodeOutput, NodeStage, rank_mismatch
from faultlens.diagnosis.engine.step_batch import StepBatch
from faultlens.diagnosis.engine.thresholds import shipped as shipped_thresholds
from faultlens.diagnosis.engine.time_base import TimeBases
from faultlens.diagnosis.engine.waves import Waves, is_candidate, is_own_evidence
from faultlens.diagnosis.peers.features import NodeWindow
from faultlens.diagnosis.rules.base import Finding
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.payloads import check_payload, typed
from faultlens.events.payloads_job import TrainStep
from faultlens.events.payloads_stage import JobEnd, JobRestart

log = logging.getLogger(__name__)

# The engine's settings live beside it (callers import them from here too); its offline runs are in
# diagnosis/engine/offline.py, which imports this module.
__all__ = ["Engine", "EngineConfig"]

# A job that ended this way may have ended because machines died: their silence is still judged.
FAILED_ENDS = ("gave_up", "failed")


_DEAD = "\0dead letter"  # an id in Engine._seen that was a dead letter (no job is named so)


# Samples and progress reports: judged only while they are on time. Everything else a node sends
# reports a fault (an Xid, a lost GPU, a link down, an NCCL error), and a fault is never dropped
# for being late: it is diagnosed, and the diagnosis says it came late.
_TIMELY_ONLY = frozenset({("gpu", "sample"), ("host", "sample"), ("train", "step"), ("heartbeat", "beat"),
                          ("summary", "window"), ("stack", "stack_dump"), ("stack", "recorder_dump"),
                          ("train", "checkpoint"), ("net", "sample")})


class Engine(JobClocks, StepBatch):
    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig()
        self.book = JobBook()
        self.node_stage = NodeStage(window_s=self.config.window_s, line_rules=self.config.line_rules)
        self._lanes: dict[str, Lane] = {}
        self.stats: Counter = Counter()
        self._seen: OrderedDict[str, str] = OrderedDict()  # event id → its job
        self.clocks = TimeBases(self.config.grace_s, self.config.grace_s / 2)  # which jobs share a clock
        # Jobs whose upstream stage stopped at the live consumer's latest tick (``until``): their
        # time stays where it stopped, whatever the jobs on their clock do.
        self._upstream_stopped: frozenset[str] = frozenset()
        # Jobs other job-stage members hold, as node-stage members said they delivered (summary/clock)
        self._elsewhere: dict[str, Heard] = {}
        # Waves across jobs (diagnosis/engine/fleet_waves.py): one index beside the job lanes.
        self.fleet = FleetWaves((self.config.thresholds or shipped_thresholds()).wave, self._machines, self.book.jobs)
        # process(..., hold=True): plain steps of one job whose job side waits to be taken as a run
        # (JobStage.observe_steps), and what a run taken found that no call has handed out yet.
        self._held: list[Envelope] = []
        self._held_lane: Lane | None = None
        self._ready: list[Diagnosis] = []
        self._step_out = NodeOutput()
        self.failed_at = 0  # process_steps (diagnosis/engine/step_batch.py): the record that raised

    def _job_size(self, job: str) -> int:
        topo = self.book.topology(job)
        return len(topo.nodes) if topo is not None else 0

    def _lane(self, job: str) -> Lane:
        lane = self._lanes.get(job)
        if lane is None:
            stage = JobStage(self.book, self.config.window_s, implicit=self.config.implicit,
                             implicit_config=self.config.implicit_config, peer_model=self.config.peer_model,
                             telemetry_partitions=self.config.telemetry_partitions,
                             silence_grace_s=self.config.silence_grace_s)
            thresholds = self.config.thresholds or shipped_thresholds()
            lane = self._lanes[job] = Lane(stage, Dedup(job_size=self._job_size),
                                           Waves(thresholds.wave, self._job_size, self._machines, self.fleet, job),
                                           Debounce(thresholds), self.stats)
        return lane

    def _machines(self, job: str) -> Mapping:
        """What the topology says of each machine (rack, NVLink domain, IB switch): a wave's cause."""
        topo = self.book.topology(job)
        machines = (topo.extra or {}).get("machines") if topo is not None else None
        return machines if isinstance(machines, Mapping) else {}

    def telemetry_partitions(self, count: int) -> None:
        """The broker's telemetry partition count (a consumer learns it on start)."""
        self.config = dataclasses.replace(self.config, telemetry_partitions=count)
        for lane in self._lanes.values():
            lane.stage.use_telemetry_partitions(count)

    @property
    def dedup_stats(self) -> Counter:
        return sum((lane.dedup.stats + lane.waves.stats + lane.debounce.stats for lane in self._lanes.values()),
                   Counter(self.fleet.stats))

    def job_time(self, job: str) -> float | None:
        """The job's event time: the latest event time it delivered (or the wall clock moved it to)."""
        lane = self._lanes.get(job)
        return None if lane is None else lane.now

    # --- events -----------------------------------------------------------------------------
    def process(self, event: Envelope, *, at: float | None = None, skew_s: float | None = None,
                clamped: str | None = None, hold: bool = False) -> list[Diagnosis]:
        """One event. ``at`` is where the consumer placed it in event time when that differs from
        its own ``ts`` (its sender's clock was off by ``skew_s``; ``clamped`` says why).
        Raises InvalidEvent (→ dead letter) for input no detector can use.

        ``hold`` (issue 56): a step whose node side found nothing may leave its job side held, to be
        taken with the plain steps of its job that follow in one call (JobStage.observe_steps); the
        run is taken before anything else touches the job stage or finds something (any other event,
        a tick, a step of another job), and what it finds comes out first, so the diagnoses and
        their order are the same. What the last run finds comes from :meth:`release`: a caller that
        holds calls it once its batch is done, and after an InvalidEvent, before its dead letter."""
        out = self._process(event, at, skew_s, clamped, hold)
        if self._ready:
            out = self._ready + out
            self._ready = []
        return out

    def release(self) -> list[Diagnosis]:
        """What the held steps' job side finds, with what a run taken earlier found (process(hold=True))."""
        if self._held:
            self._take_held()
        out, self._ready = self._ready, []
        return out

    def _take_held(self) -> None:
        lane, held = self._held_lane, self._held
        self._held, self._held_lane = [], None
        assert lane is not None
        ready = self._ready
        lane.stage.observe_steps(held, lambda findings, diags: ready.extend(lane.settle(findings, diags)))

    def _process(self, event: Envelope, at: float | None, skew_s: float | None, clamped: str | None,
                 hold: bool) -> list[Diagnosis]:
        seen = self._seen.get(event.id)
        if seen is not None and seen is not _DEAD:
            self.stats["duplicates"] += 1
            return []
        try:
            # (known_kind and check_payload's own first tests inline: a typed read kept its payload)
            kinds = KNOWN_KINDS.get(event.source)
            if kinds is not None and event.kind not in kinds and not known_kind(event):
                raise InvalidEvent("kind", f"unknown kind {event.kind!r} for source {event.source!r} (docs/events.md)")
            if event._payload is None and (self.config.stage != "job" or event.source not in JOB_SOURCES):
                # A job stage's telemetry comes from `summaries`, passed on by a node stage that
                # checked each payload already (diagnosis/edge/node_consumer.py); checked again, the
                # net samples' ports alone cost a fifth of the job stage.
                check_payload(event)
        except InvalidEvent:
            # A bad record redelivered (at-least-once) is one dead letter; only another bad one is
            # dropped by its id, so a good event sharing the id is never lost.
            if seen is _DEAD:
                self.stats["duplicates"] += 1
                return []
            self._remember(event.id, _DEAD)
            raise
        step = event.kind == "step" and event.source == "train"  # four in five
        if self._held and not (hold and step and skew_s is None and event.job == self._held[0].job):
            self._take_held()  # anything else comes after the run
        if not step and event.source == "summary":
            if event.kind == "finding" and event.data.get("wave_copy") is True:
                self._wave_copy(event)
                return []
            if event.kind == "clock":
                return self._clocks_elsewhere(event)
        lane = self._lanes.get(event.job) or self._lane(event.job)
        out: list[Diagnosis] = []
        if skew_s is not None:
            out.extend(lane.skew_alert(event, skew_s, clamped, at, self.config.skew_alert_every_s))
            if at is not None and at != event.ts:
                event = event.retimed(at)
        late_by = 0.0 if lane.now is None else lane.now - event.ts
        # A job record (topology, restart) is read from the broadcast `jobs` topic, which a job
        # stage member reads in full even for jobs whose data another member holds: it must not
        # move the job's time, or a member that takes the job's data over later (a rebalance)
        # would read all of it as late, under a topology from its future.
        timed = event.source != "job"
        if lane.now is None and timed:
            self.book.advance(event.job, event.ts)
        if late_by > self.config.max_lateness_s and (step or (event.source, event.kind) in _TIMELY_ONLY):
            # Counted and logged (the history keeps it); judging a window or a silence from it
            # now could only produce a false verdict.
            self.stats["late"] += 1
            if self.stats["late"] <= 5 or self.stats["late"] % 1000 == 0:
                log.warning("late %s/%s from %s/%s: %.0fs behind the job's time (limit %.0fs); not judged "
                            "(%d so far)", event.source, event.kind, event.job, event.node, late_by,
                            self.config.max_lateness_s, self.stats["late"])
            self._remember(event.id, event.job)
            return out
        self._remember(event.id, event.job)
        self.stats["events"] += 1
        if step and not lane.pending and self.config.stage != "job":
            found = self._node_step(lane, event, hold)
        else:
            found = self._observe(lane, event, hold)
        if late_by > self.config.max_lateness_s:
            self.stats["late_faults"] += 1
            found = [msgspec.structs.replace(d, detail=f"late by {late_by:.0f}s: {d.detail}") for d in found]
        out.extend(found)
        if not timed:
            return out
        if lane.now is None or event.ts > lane.now:
            lane.now = event.ts
            self.book.advance(event.job, lane.now)
        lane.arrival_wall = time.time()
        lane.arrival_now = lane.now
        if lane.now - lane.last_tick >= self.config.tick_every_s:
            if self._held:
                self._take_held()
            out.extend(lane.tick(lane.now))
        if event.ts > lane.delivered:
            lane.delivered = event.ts
            if event.ts - lane.clock_checked >= self.config.tick_every_s:
                lane.clock_checked = event.ts
                if self._held:
                    self._take_held()
                out.extend(self._move_quiet_mates(event.job, event.ts))
        return out

    def _wave_copy(self, event: Envelope) -> None:
        """A node stage's copy of a wave candidate, or of evidence of a machine's own, of any job
        (diagnosis/engine/fleet_waves.py): into the fleet index only; the job's own lane, wherever it
        is, gets the finding itself."""
        f = Finding.from_event(event)
        if is_own_evidence(f) and not is_candidate(self.fleet.config, f):
            self.fleet.note_own(Seen(f.ts, f.job, f.nodes[0]))  # named by the fleet wave that holds its machine
        elif len(f.nodes) == 1:
            self.fleet.note(f.fault, seen_of(f.ts, f.job, f.nodes[0], f.action, f.sympathetic, f.rule_id,
                                             f.evidence[0] if f.evidence else ""))

    def delivered_under(self, d: Diagnosis) -> tuple[str, ...]:
        """The jobs whose `diagnoses` partition gets ``d`` from here: its own, or for a fleet wave
        every job of its part whose input this engine reads (diagnosis/engine/fleet_waves.py)."""
        return self.fleet.delivered_under(d, lambda job: self.job_time(job) is not None)

    def _observe(self, lane: Lane, event: Envelope, hold: bool = False) -> list[Diagnosis]:
        if event.source == "job":
            # A restart waits for the job's own data to reach it (none yet: it waits too), so the
            # detectors forget the old incarnation at its place in event time.
            if event.kind in ("restart", "end") and (lane.now is None or event.ts > lane.now):
                lane.pending.append(event)
                lane.pending.sort(key=lambda e: e.ts)
            else:
                self._job_event(lane, event)
            return []
        if lane.pending:
            if self._held:
                self._take_held()
            self._apply_pending(lane, event.ts)
        if event.source == "summary":
            # The node stage of another process summarised a window or found something (docs/design.md
            # §1, split stages); its watermarks are the runner's business.
            if event.kind == "window":
                return lane.settle([], lane.stage.observe_window(NodeWindow.from_event(event)))
            if event.kind == "finding":
                return lane.settle([Finding.from_event(event)], [])
            return []
        if self.config.stage == "job":
            if hold and event.kind == "step" and event.source == "train":
                self._held.append(event)
                self._held_lane = lane
                return []
            findings, diags = lane.stage.observe(event)
            return lane.settle(findings, diags)
        if event.kind == "step" and event.source == "train":
            return self._node_step(lane, event, hold)
        node_out = NodeOutput()
        for parsed in self.node_stage.parse(event) if event.kind == "line" else (event,):
            self.stats["parsed"] += parsed is not event
            self._check_rank(parsed, node_out)
            self.node_stage.observe(parsed, node_out)
        return self._job_side(lane, node_out)

    def _node_step(self, lane: Lane, event: Envelope, hold: bool) -> list[Diagnosis]:
        """A step's node side (four in five events: its Struct read once for every reader), then its
        job side, or held to be taken with its job's next plain steps (``hold``)."""
        node_out = self._step_out
        if node_out.forward or node_out.findings or node_out.windows:  # left by a step that raised
            node_out = self._step_out = NodeOutput()
        self._check_rank(event, node_out)
        step = event._payload
        self.node_stage.observe_step(event, step if type(step) is TrainStep else typed(event, TrainStep), node_out)
        if hold and not node_out.findings and not node_out.windows and len(node_out.forward) == 1:
            node_out.forward.clear()
            self._held.append(event)  # (the step itself, passed on: a train event)
            self._held_lane = lane
            return []
        self._step_out = NodeOutput()
        if self._held:
            self._take_held()
        return self._job_side(lane, node_out)

    def _apply_pending(self, lane: Lane, until: float) -> None:
        while lane.pending and lane.pending[0].ts <= until:
            self._job_event(lane, lane.pending.pop(0))

    def _job_event(self, lane: Lane, event: Envelope) -> None:
        if event.kind == "topology":
            self.book.update(event)
            self.stats["topologies"] += 1
        elif event.kind == "restart":
            lane.dedup.restarted(event.job, event.ts)
            restart = typed(event, JobRestart)
            lane.stage.restarted(event.job, list(restart.nodes_out or ()), at=event.ts)
        elif event.kind == "end":
            end = typed(event, JobEnd)
            lane.stage.ended(event.job, at=event.ts, failed=end.reason in FAILED_ENDS)

    def _check_rank(self, event: Envelope, out: NodeOutput) -> None:
        """Rank-bearing events must agree with the job's topology; disagreement is reported, once."""
        finding = rank_mismatch(self.book, event)
        if finding is not None:
            self.stats["topology_mismatch"] += 1
            out.findings.append(finding)

    def _job_side(self, lane: Lane, node_out: NodeOutput) -> list[Diagnosis]:
        forward = node_out.forward
        if not node_out.findings and not node_out.windows and len(forward) < 2:
            # The usual event (a step, a beat, a sample): nothing found, at most itself passed on.
            if not forward:
                return []
            f, d = self._lane(forward[0].job).stage.observe(forward[0])
            return lane.settle(f, d) if f or d else []
        findings = list(node_out.findings)
        diags: list[Diagnosis] = []
        for w in node_out.windows:
            diags.extend(self._lane(w.job).stage.observe_window(w))
        for ev in node_out.forward:
            f, d = self._lane(ev.job).stage.observe(ev)
            findings.extend(f)
            diags.extend(d)
        return lane.settle(findings, diags)

    def forget_job(self, job: str) -> None:
        """Drop a job's state and the ids of its events (its input moved to another consumer: if it
        comes back, it is rebuilt from retained input, which must not then be taken for copies)."""
        if self._held:
            self._take_held()  # (handed out with the next call)
        self._lanes.pop(job, None)
        self.clocks.forget(job)
        for event_id in [i for i, j in self._seen.items() if j == job]:
            del self._seen[event_id]

    def flush(self) -> list[Diagnosis]:
        """End of input (a trace's end, shutdown): decide what is pending, report final counts.

        Absence is not judged here: a trace that ends is not a cluster that went silent."""
        out = self.release()
        parsed, windows = self.node_stage.flush()
        by_job: dict[str, NodeOutput] = {}
        for w in windows:
            by_job.setdefault(w.job, NodeOutput()).windows.append(w)
        for ev in parsed:
            self.node_stage.observe(ev, by_job.setdefault(ev.job, NodeOutput()))
        for job, node_out in by_job.items():
            out.extend(self._job_side(self._lane(job), node_out))
        for lane in self._lanes.values():
            self._apply_pending(lane, float("inf"))
            out.extend(lane.flush())
        return out

    def _remember(self, event_id: str, job: str) -> None:
        self._seen[event_id] = job
        if len(self._seen) > self.config.seen_ids:
            self._seen.popitem(last=False)
