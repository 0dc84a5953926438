"""The dumps a hang capture collects (diagnosis.hang.detector): each rank's stack dump, Flight Recorder
dump, failed capture or node answer goes to the open stall's collection (or is kept until progress in
case a suspicion follows), and the verdict is given once every rank answered. An answer sent before a
second capture was asked for belongs to the first. :class:`DumpCollection` is a base of
:class:`~diagnosis.hang.detector.HangDetector` (it uses its ``_jobs`` and ``_book``).
"""

from __future__ import annotations

from faultlens.diagnosis.hang.state import JobState, Stall
from faultlens.diagnosis.hang.verdict import HangVerdicts
from faultlens.diagnosis.stacks.dump_set import NodeAnswer, RecorderDumpEvent, StackDump
from faultlens.events.diagnosis_record import Diagnosis


class DumpCollection(HangVerdicts):
    """The open stall's dumps per job, and when they are enough for a verdict."""

    _jobs: dict[str, JobState]  # the hang detector's, set in its __init__

    def capture_failed(self, job: str, dump: StackDump) -> list[Diagnosis]:
        """A rank's capture failed (``ok: false``): it answered, and is not a silent suspect."""
        state = self._jobs.get(job)
        if state is None:
            return []
        hear(state, dump.ts, self.config.quiet_s)
        if state.stall is None:
            if state.last_progress is not None and dump.ts >= state.last_progress:
                state.recent_failed.add(dump.rank)  # as note_dump: the suspicion may follow
            return []
        if state.stall.decided or _earlier_look(state.stall, dump.ts):
            return []
        state.stall.failed.add(dump.rank)
        return self._check_complete(job, state, dump.ts)

    def node_answer(self, job: str, answer: NodeAnswer) -> list[Diagnosis]:
        """A node answered a capture without naming a rank: no training process there, or a dump
        whose rank its agent could not read. Either answers for the node's ranks (the collection
        stops waiting for them); neither is placed among the stacks (diagnosis.hang.verdict)."""
        state = self._jobs.get(job)
        if state is None:
            return []
        hear(state, answer.ts, self.config.quiet_s)
        if state.stall is None:
            if state.last_progress is not None and answer.ts >= state.last_progress:
                state.recent.add_answer(answer)  # as note_dump: the suspicion may follow
            return []
        if state.stall.decided or _earlier_look(state.stall, answer.ts):
            return []
        state.stall.dumps.add_answer(answer)
        return self._check_complete(job, state, answer.ts)

    def wants_dumps(self, job: str) -> bool:
        """True while a stall is open: its stack dumps belong here, not to fail-slow rounds."""
        state = self._jobs.get(job)
        return state is not None and state.stall is not None

    def note_dump(self, job: str, dump: StackDump) -> None:
        """A dump that arrived with no stall open: kept in case a suspicion follows before progress."""
        state = self._jobs.get(job)
        if state is not None:
            hear(state, dump.ts, self.config.quiet_s)
        if state is not None and state.last_progress is not None and dump.ts >= state.last_progress:
            state.recent.add(dump)

    def add_recorder(self, job: str, dump: RecorderDumpEvent) -> None:
        """A rank's Flight Recorder dump: to the open stall's capture, else kept until progress."""
        state = self._jobs.get(job)
        if state is None:
            return
        hear(state, dump.ts, self.config.quiet_s)
        if state.stall is not None and not state.stall.decided:
            if not _earlier_look(state.stall, dump.ts):
                state.stall.dumps.add_recorder(dump)
        elif state.stall is None and state.last_progress is not None and dump.ts >= state.last_progress:
            state.recent.add_recorder(dump)

    def add_dump(self, job: str, dump: StackDump) -> list[Diagnosis]:
        state = self._jobs.get(job)
        if state is not None:
            hear(state, dump.ts, self.config.quiet_s)
        if state is None or state.stall is None or state.stall.decided or _earlier_look(state.stall, dump.ts):
            return []
        state.stall.dumps.add(dump)
        return self._check_complete(job, state, dump.ts)

    def _check_complete(self, job: str, state: JobState, now: float) -> list[Diagnosis]:
        stall = state.stall
        if stall is None:
            return []
        dumps = stall.dumps
        topology = self._book.topology(job)
        if topology is not None and dumps.answered(topology.ranks_by_node) | stall.failed >= set(topology.by_rank):
            # A rank whose agent's capture failed answered, but its trainer's faulthandler dump for the
            # same capture may still come (py-spy times out on a loaded node): a verdict given at once
            # reads fewer dumps than there will be, and its confidence falls with the share it read.
            undumped = stall.failed - dumps.ranks()
            # A trainer hook sends its Flight Recorder dump after its stacks, and the agent's py-spy
            # dumps race it: once any rank's recorder is here the others' are on the way, and a
            # verdict read without them takes a rank that was inside the collective for one that
            # never came.
            recorders = dumps.recorders(topology.by_rank)
            unrecorded = bool(recorders) and len(recorders) < len(topology.by_rank)
            if dumps.all_preferred() and not undumped and not unrecorded:
                return [self._decide(job, state, stall, now)]
            # py-spy names the threads; the node agent's dump usually trails the trainer's by a moment.
            if stall.complete_at is None:
                stall.complete_at = now
        return []


def hear(job: JobState, ts: float, quiet_s: float) -> None:
    """Something of ``job`` sent at ``ts`` arrived; after ``quiet_s`` of nothing (the detector's
    whole-job quiet, HangConfig.quiet_s: the same span that told the job quiet) it is back."""
    if job.heard is not None and ts - job.heard > quiet_s:
        job.resumed = ts  # back after the whole job's telemetry was lost (a pipeline outage)
    job.heard = ts if job.heard is None else max(job.heard, ts)


def _earlier_look(stall: Stall, ts: float) -> bool:
    """An answer sent before the stall's second capture was asked for belongs to the first."""
    return stall.look > 1 and ts < stall.opened
