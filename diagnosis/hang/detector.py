"""Job hang detection (docs/design.md §3-§4): no step progress while the processes live → stacks → evict a group.

Per job: the last step of every rank (``train``/``step``) and the last heartbeat that still lists
training pids. When no rank has advanced for max(k × median step time, floor) and heartbeats
keep coming, the job is hung, not dead: a ``job_hang`` suspicion asks for every rank's stack
(action ``capture_stacks``). The dumps that then arrive are read (diagnosis.hang.stack_reading: the wait
chains, else the outlier clustering) once every rank has sent one or the collection times out,
and the final ``job_hang`` diagnosis evicts the parallel group of the suspects; when every rank
waits in the same collective and nobody is behind, it evicts nobody and asks for stop-time
diagnosis instead. One suspicion per stall; stepping again clears it.

Stacks do not always come (py-spy missing, ptrace denied, an agent that cannot answer). Then
the hang is localised with the cues a real cluster has, in this order: GPU-side evidence (the
culprit's GPUs idle while every peer spins in NCCL kernels, from the node feature windows), the
ProcessGroupNCCL watchdog's sequence numbers (a minority of ranks behind the rest). Every rank
stopping at the same step is the rule in synchronous training, so the first rank to stop only
corroborates: alone it is an ``alert``, never an eviction. A rank whose capture failed
(``ok: false``) answered; it is not a silent suspect. A node whose agent found no training
process answers for all its ranks (diagnosis.stacks.dump_set.NoTrainerAnswer): nobody waits for their
dumps, and the verdict names that node without evicting it (diagnosis.hang.verdict). A node
whose agent could not read its processes' ranks answers with dumps that cannot be placed
(diagnosis.stacks.dump_set.UnrankedDump): they end the wait for that node, none of its ranks is blamed
for silence, and no eviction may rest on them. A verdict that named nobody is revisited
once if GPU-side or watchdog evidence arrives while the job is still stuck. Silence and the cues
without stacks are the weakest evidence: they evict only at a second capture that names the same
machines, corroborated (diagnosis.hang.weak_evidence); the first is an alert that asks again.

A hang is told from the job's telemetry flowing without steps: when the whole of it stops (no
beat, step or anything else of the job for ``quiet_s``), that is the job's or the pipeline's
silence (liveness' ``telemetry_lost``), never a hang. The live consumer moves a quiet job's time
by the wall clock, and that time alone once raised a suspicion 60 s after the last beat and,
30 s on, reattempted the job because "no stack dump arrived": dumps that travel the same
stopped pipeline (issue 47, a backlog's job stage left up longer after its end; `analyze` of
the same trace gave neither). So no suspicion is raised while the job is quiet, and a verdict
that falls due waits until something of the job sent at or after that moment has arrived: then
a dump sent in time would have arrived too, and its absence is evidence. If nothing comes, no
verdict is given (as `analyze` gives none past a trace's end); if the telemetry comes back (an
outage's backlog), the verdict is given on what it brought.

This module tells a stall; its dumps are collected by diagnosis.hang.collection, the per-job state
is diagnosis.hang.state and the verdict on a stall diagnosis.hang.verdict.
"""

from __future__ import annotations

import hashlib
import logging
import statistics
from collections import deque

from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.hang.collection import DumpCollection, hear
from faultlens.diagnosis.hang.cues import short as _short

# HangConfig is imported from here by its users (it was defined here first).
from faultlens.diagnosis.hang.state import HangConfig, JobState, Stall
from faultlens.diagnosis.hang.weak_evidence import note_gpu_fault
from faultlens.diagnosis.peers.features import NodeWindow
from faultlens.diagnosis.stacks.dump_set import DumpSet
from faultlens.events.diagnosis_record import Action, Diagnosis, FaultClass
from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import HeartbeatBeat, NcclTimeout, TrainStep

log = logging.getLogger(__name__)


class HangDetector(DumpCollection):
    """Detector of hung jobs; ``add_dump`` takes the stack dumps routed to it while a stall is open."""

    def __init__(self, book: JobBook, config: HangConfig = HangConfig()):
        self._book = book
        self.config = config
        self._jobs: dict[str, JobState] = {}

    # --- events ---------------------------------------------------------------------------
    def observe(self, event: Envelope) -> list[Diagnosis]:
        job = self._job(event.job)
        hear(job, event.ts, self.config.quiet_s)
        if event.source == "nccl" and event.kind == "nccl_timeout":
            return self._watchdog(event)
        if event.source == "train" and event.kind == "step":
            self._step(job, event)
        elif event.source == "heartbeat" and event.kind == "beat":
            beat = typed(event, HeartbeatBeat)
            pids = beat.pids
            # A beat without a pid list still proves the agent lives; an empty list says the trainer died.
            if pids is None or pids:
                job.last_beat = event.ts if job.last_beat is None else max(job.last_beat, event.ts)
                job.no_pids.pop(event.node, None)
                if pids:
                    job.with_pids.add(event.node)
            else:
                job.no_pids.setdefault(event.node, (event.ts, event.id))  # corroborates a "no trainer" answer
        return []

    def observe_steps(self, events: list[Envelope]) -> None:
        """:meth:`observe` for a run of one job's ``train``/``step`` events, in order (issue 56: the
        engine hands a run of plain steps over in one call, diagnosis/engine/core.py): the job's
        state is looked up once. A step finds nothing here; what it changes is read at a tick."""
        job = self._job(events[0].job)
        step, quiet_s = self._step, self.config.quiet_s
        for event in events:
            hear(job, event.ts, quiet_s)
            step(job, event)

    def observe_window(self, window: NodeWindow) -> list[Diagnosis]:
        job = self._job(window.job)
        hear(job, window.start, self.config.quiet_s)  # its data spans start..start+window_s: the start is what is sure
        old = job.windows.get(window.node)
        if old is None or window.start >= old.start:
            job.windows[window.node] = window
        return self._revisit(window.job, job, window.start + 1e-9)

    def _watchdog(self, event: Envelope) -> list[Diagnosis]:
        timeout = typed(event, NcclTimeout)
        rank, done = timeout.rank, timeout.last_completed
        if done is None and timeout.seq is not None:
            done = timeout.seq - 1
        if rank is None or done is None:
            return []
        job = self._job(event.job)
        job.progress[rank] = (done, event.id)
        if job.watchdog_first is None or (job.last_progress is not None and job.watchdog_first < job.last_progress):
            job.watchdog_first = event.ts  # the first report of this stall's timeouts
        return self._revisit(event.job, job, event.ts)

    def _revisit(self, name: str, job: JobState, now: float) -> list[Diagnosis]:
        """A verdict that named nobody gets one more look when new evidence names a culprit."""
        stall = job.stall
        if stall is None or not stall.inconclusive:
            return []
        asked = stall.relook_at
        found = self._without_stacks(name, job, stall, now, "new evidence while the job is still stuck")
        if found is None:
            return []
        if found.action != "evict":
            # Short of what an eviction needs (diagnosis.hang.weak_evidence): heard once, when it
            # first asks for the second capture, not at every window.
            return [found] if asked is None and stall.relook_at is not None else []
        stall.inconclusive = False
        return [found]

    def _job(self, name: str) -> JobState:
        job = self._jobs.get(name)
        if job is None:
            job = self._jobs[name] = JobState(step_times=deque(maxlen=self.config.step_window))
        return job

    def _step(self, job: JobState, event: Envelope) -> None:
        try:
            payload = typed(event, TrainStep)  # read once by the payload check (events/payloads.py)
        except InvalidEvent:
            return  # the payload check owns step validation (and its dead letters); nothing to learn here
        rank, step = payload.rank, payload.step
        if rank is None or step is None:
            return
        if job.ended_at is not None and event.ts > job.ended_at:
            job.ended_at = None  # it trains again
        job.rank_node[rank] = event.node
        step_time = payload.step_time_s  # a finite number, never negative, or null
        if step_time:
            job.step_times.append(float(step_time))
        old = job.last_step.get(rank)
        job.last_step[rank] = (step, event.ts, event.id)
        # A different step is progress; a lower one is a restart from a checkpoint, progress too.
        if old is None or old[0] != step:
            job.writing_until = job.writing_onset = None
            if _advances_job(job, step, old) and job.last_progress is not None and event.ts > job.last_progress:
                self._gap(job, event.ts - job.last_progress, event.ts)
            job.last_progress = event.ts if job.last_progress is None else max(job.last_progress, event.ts)
            if not job.recent.is_empty():  # a node's answer alone must not outlive progress either
                job.recent = DumpSet()
            job.recent_failed = set()
            if job.stall is not None:
                log.info("job %s steps again (rank %d step %d): hang %s cleared", event.job, rank, step,
                         "verdict" if job.stall.decided else "suspicion")
                job.stall = None

    def _gap(self, job: JobState, gap: float, at: float) -> None:
        """A gap between the job's progress, ended at ``at``: kept among the recent gaps, and, if the
        margin would raise the threshold for it, among the long pauses (JobState.pauses)."""
        job.gaps.append(gap)
        pauses, config = job.pauses, self.config
        while pauses and pauses[0][0] < at - config.pause_window_s:
            pauses.popleft()
        median = statistics.median(job.step_times) if job.step_times else 0.0
        if config.gap_margin * gap > max(config.k * median, config.floor_s):
            while pauses and pauses[-1][1] <= gap:
                pauses.pop()
            pauses.append((at, gap))

    def observe_diagnosis(self, diagnosis: Diagnosis) -> None:
        """Keep the job's storage alerts (shared storage no machine's eviction fixes): a stall's
        suspects that only wait on storage are not evicted for it (HangVerdicts._unless_storage)."""
        if diagnosis.fault == FaultClass.STORAGE and diagnosis.action == Action.ALERT:
            self._job(diagnosis.job).storage.append(diagnosis)
        note_gpu_fault(self._job(diagnosis.job), diagnosis)  # corroborates a hang's weak evidence

    # --- time -----------------------------------------------------------------------------
    def threshold(self, job: str) -> float:
        state = self._jobs.get(job)
        times = state.step_times if state else ()
        median = statistics.median(times) if times else 0.0
        longest = max(state.gaps) if state is not None and state.gaps else 0.0
        if state is not None and state.pauses:  # the longest pause within the window (JobState.pauses)
            longest = max(longest, state.pauses[0][1])
        return max(self.config.k * median, self.config.floor_s, self.config.gap_margin * longest)

    def stalled_since(self, job: str, now: float, k: float = 3.0, floor_s: float = 10.0) -> float | None:
        """When the job's steps stopped, if no rank has stepped for ``k`` median step times (at
        least ``floor_s``): well short of a hang, enough to say its stacks show a stall."""
        state = self._jobs.get(job)
        if state is None or state.last_progress is None:
            return None
        median = statistics.median(state.step_times) if state.step_times else 0.0
        return state.last_progress if now - state.last_progress >= max(k * median, floor_s) else None

    def tick(self, now: float) -> list[Diagnosis]:
        out: list[Diagnosis] = []
        for name, job in self._jobs.items():
            stall = job.stall
            if stall is not None and stall.decided and job.writing_until is not None and now >= job.writing_until:
                # A checkpoint save was under way when its stacks were read (HangVerdicts._saving): its
                # patience is over and the job has not stepped, so it is suspected again below. Until
                # then the decided stall keeps the job's late dumps from fail-slow's rounds.
                job.stall = stall = None
                job.writing_until = None
            if stall is not None and stall.relook_at is not None and now >= stall.relook_at:
                if _trainers_gone(job):
                    stall.relook_at = None  # nothing left to capture: the first look's alert stands
                else:
                    out.append(self._relook(name, job, stall, now))
            if stall is not None:
                if not stall.decided and self._verdict_due(name, job, stall, now):
                    out.append(self._decide(name, job, stall, now))
                continue
            if self._quiet(job, now):
                continue  # the whole job's telemetry stopped: its silence (telemetry_lost), no hang
            if job.resumed is not None and now - job.resumed < self.config.quiet_s:
                # Back from such a stop: its first beats say nothing of the steps still on their way
                # (each stream resumes at its own moment); a grace for them before a stall is told.
                continue
            if job.last_progress is None:
                out += self._startup_stall(name, job, now)
                continue
            stalled = now - job.last_progress
            alive = (
                job.last_beat is not None
                and job.last_beat > job.last_progress
                and now - job.last_beat <= self.config.heartbeat_fresh_s
                and not _trainers_gone(job)
            )
            # The floor bounds the threshold from below: skip the median until it could matter.
            if stalled >= self.config.floor_s and alive and stalled >= self.threshold(name):
                out.append(self._suspect(name, job, job.last_progress, now))
                out += self._check_complete(name, job, now)  # the dumps may all be here already
        return out

    def _relook(self, name: str, job: JobState, stall: Stall, now: float) -> Diagnosis:
        """The second capture of a stall whose first verdict rested on the weakest evidence
        (diagnosis.hang.weak_evidence): a fresh collection, decided as the first was."""
        stall.look, stall.relook_at, stall.decided, stall.inconclusive = 2, None, False, False
        stall.opened, stall.complete_at, stall.held = now, None, False
        stall.dumps, stall.failed = DumpSet(), set()
        topology = self._book.topology(name)
        nodes = topology.nodes if topology is not None else tuple(dict.fromkeys(job.rank_node.values()))
        return Diagnosis(
            id=f"{stall.suspicion_id}.look2", job=name, ts=now, onset=stall.onset, fault=FaultClass.JOB_HANG,
            action=Action.CAPTURE_STACKS, nodes=nodes, ranks=stall.first_stopped,
            # Below 0.5: a request for evidence, which the engine's folding never takes for a copy of
            # the stall's first suspicion (diagnosis.engine.dedup), so it reaches remediation.
            confidence=self.config.fallback_confidence, evidence=self._step_evidence(job, stall.first_stopped),
            detail=f"still no step progress {now - stall.onset:.0f}s after the last; the first capture named "
                   f"{_short(stall.named)} on evidence too weak to evict on: capturing every rank's stack again",
        )

    def _quiet(self, job: JobState, now: float) -> bool:
        """Nothing of the job reached diagnosis for ``quiet_s``: its whole telemetry stopped."""
        return job.heard is None or now - job.heard > self.config.quiet_s

    def _verdict_due(self, name: str, job: JobState, stall: Stall, now: float) -> bool:
        """Whether the stall's verdict is due now: its collection timed out (or every rank dumped,
        some only by faulthandler, and the py-spy grace is over), and something of the job sent at
        or after that moment has arrived, so the dumps still missing are missing, not stuck in a
        stopped pipeline with the job's other telemetry (module docstring)."""
        due = stall.opened + self.config.collect_timeout_s
        if stall.complete_at is not None:
            due = min(due, stall.complete_at + self.config.pyspy_grace_s)
        if now < due:
            return False
        if job.heard is not None and job.heard >= due:
            return True
        if not stall.held and self._quiet(job, now):
            stall.held = True
            log.info("job %s: hang verdict due at %.3f held: nothing of the job arrived for %.0fs (its "
                     "telemetry stopped; the dumps would travel the same way)", name, due, now - (job.heard or now))
        return False

    def _startup_stall(self, name: str, job: JobState, now: float) -> list[Diagnosis]:
        """A restart that never reaches its first step while its processes live (stuck loading a
        checkpoint, or in the first collective) is a hang from the restart on."""
        if job.started is None:
            return []
        alive = (job.last_beat is not None and job.last_beat > job.started
                 and now - job.last_beat <= self.config.heartbeat_fresh_s and not _trainers_gone(job))
        if not alive or now - job.started < max(self.config.startup_s, self.threshold(name)):
            return []
        return [self._suspect(name, job, job.started, now), *self._check_complete(name, job, now)]

    def _first_stopped(self, name: str, job: JobState) -> tuple[int, ...]:
        topology = self._book.topology(name)
        # Ranks a newer topology no longer lists (evicted, resized) say nothing about this stall.
        last = {r: v for r, v in job.last_step.items() if topology is None or r in topology.by_rank}
        if not last:
            return ()
        low = min(step for step, _, _ in last.values())
        return tuple(sorted(r for r, (step, _, _) in last.items() if step == low))

    def ended(self, job: str, at: float) -> None:
        """The launcher said the job ended: no new suspicion until a restart or a later step (one
        already open is decided as before: its culprit matters to the job's next run)."""
        self._job(job).ended_at = at

    def restarted(self, job: str, at: float | None = None) -> None:
        """The job was restarted (``job``/``restart``, at event time ``at``): its old steps and any
        open stall are history. Its pace is not: step times and the pauses between steps
        (checkpoints, evaluation) are the same job's after a restart, and a first checkpoint after
        it must not look like a hang. From ``at`` on its first step is awaited (``startup_s``)."""
        old = self._jobs.pop(job, None)
        fresh = self._job(job)
        if old is not None:
            # The pipeline's flow (heard) is not the incarnation's either.
            fresh.step_times, fresh.gaps, fresh.pauses, fresh.heard = old.step_times, old.gaps, old.pauses, old.heard
        fresh.started = at

    def _suspect(self, name: str, job: JobState, onset: float, now: float) -> Diagnosis:
        """The suspicion of a stall since ``onset``: the last step progress, or the restart that
        never reached its first step."""
        first = self._first_stopped(name, job)
        # The id follows from the stall (job, onset): a re-run over the same events names it alike.
        sid = hashlib.blake2b(f"{name}|job_hang|{onset:.3f}".encode(), digest_size=16).hexdigest()
        stall = Stall(suspicion_id=sid, onset=onset, opened=now, first_stopped=first, dumps=job.recent)
        stall.failed |= job.recent_failed
        job.stall = stall
        job.recent = DumpSet()
        job.recent_failed = set()
        topology = self._book.topology(name)
        nodes = topology.nodes if topology is not None else tuple(dict.fromkeys(job.rank_node.values()))
        low = job.last_step[first[0]][0] if first else None
        since = "" if job.last_progress is not None else " since the restart (no first step)"
        detail = (
            f"no step progress for {now - stall.onset:.0f}s{since} (threshold {self.threshold(name):.0f}s) while "
            f"heartbeats list live training processes; lowest last step {low} on {len(first)} rank(s) "
            f"[{_short(first)}] (the first to stop); capturing every rank's stack"
        )
        return Diagnosis(
            id=stall.suspicion_id, job=name, ts=now, onset=stall.onset, fault=FaultClass.JOB_HANG, action=Action.CAPTURE_STACKS,
            nodes=nodes, ranks=first, confidence=self.config.suspicion_confidence,
            evidence=self._step_evidence(job, first), detail=detail,
        )


def _advances_job(job: JobState, step: int, old: tuple[int, float, str] | None) -> bool:
    """Whether a rank's new step is the job's progress, not only the rank's: a step higher than any
    of the job's, or the first rank's arrival of a lower one than its own last (a restart from a
    checkpoint; the others' arrivals of that step follow it)."""
    top = job.top_step
    if top is None or step > top or (old is not None and step < old[0] and step < top):
        job.top_step = step
        return True
    return False


def _trainers_gone(job: JobState) -> bool:
    """The launcher said the job ended, or every node that listed training processes now lists
    none (the job ended or crashed): a job with no process left is no hang (found: a healthy
    job's end, its last pid-listing beats a few seconds after its last step, was suspected and
    reattempted a minute later, tests/fixtures/foreign/job_ends_staggered.jsonl)."""
    return job.ended_at is not None or (bool(job.with_pids) and job.with_pids <= job.no_pids.keys())
