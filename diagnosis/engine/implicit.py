"""The implicit-fault detector the engine plugs in: job hangs and fail-slow, sharing the stack dumps.

A stack dump answers whichever question is open for its job: while a hang is suspected (or
decided and not yet resolved by stepping again) it belongs to the hang's collection, otherwise
to the fail-slow rounds. The engine must keep the shared :class:`JobBook` up to date with the
``job``/``topology`` events; this detector only reads it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.hang.detector import HangConfig, HangDetector
from faultlens.diagnosis.peers.failslow import FailSlowConfig, FailSlowRounds
from faultlens.diagnosis.peers.features import NodeWindow
from faultlens.diagnosis.peers.net_traffic import NetTraffic, annotate
from faultlens.diagnosis.stacks.dump_set import (
    NoTrainerAnswer,
    UnrankedDump,
    is_recorder_dump,
    is_stack_dump,
    read_recorder_dump,
    read_stack_answer,
)
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import StackDump as StackDumpPayload


@dataclass(frozen=True, slots=True)
class ImplicitConfig:
    hang: HangConfig = field(default_factory=HangConfig)
    failslow: FailSlowConfig = field(default_factory=FailSlowConfig)


class ImplicitFaultDetector:
    """Detector + DiagnosisListener: ``observe``, ``tick``, ``observe_diagnosis``."""

    def __init__(self, book: JobBook, config: ImplicitConfig = ImplicitConfig(), net: NetTraffic | None = None):
        self.config = config
        self.net = net  # the port counters' word on a hang (job silence) or a slowdown (congestion)
        self.hang = HangDetector(book, config.hang)
        self.failslow = FailSlowRounds(book, config.failslow, stalled_since=self.hang.stalled_since)

    def _with_net(self, diags: list[Diagnosis]) -> list[Diagnosis]:
        if self.net is None or not diags:
            return diags
        return [annotate(self.net, d) for d in diags]

    def observe(self, event: Envelope) -> list[Diagnosis]:
        return self._with_net(self._observe(event))

    def _observe(self, event: Envelope) -> list[Diagnosis]:
        if is_recorder_dump(event):
            self.hang.add_recorder(event.job, read_recorder_dump(event))  # InvalidEvent → dead letter
            return []
        if is_stack_dump(event):
            dump = read_stack_answer(event)  # InvalidEvent → the engine dead-letters it
            if isinstance(dump, (NoTrainerAnswer, UnrankedDump)):
                # A node's answer that names no rank (no trainer there, or its rank unreadable)
                # matters to a hang; a fail-slow round counts it as answered (and clusters the other
                # ranks' stacks without waiting its window for that node).
                return self.hang.node_answer(event.job, dump) + self.failslow.add_node_answer(event.job, dump)
            answer = typed(event, StackDumpPayload)
            if answer.ok is False:
                # The capture failed (py-spy missing, ptrace denied): the rank answered, with no stack.
                return self.hang.capture_failed(event.job, dump)
            if self.hang.wants_dumps(event.job):
                return self.hang.add_dump(event.job, dump)
            self.hang.note_dump(event.job, dump)
            return self.failslow.add_dump(event.job, dump)
        if event.source == "train" and event.kind == "step":
            self.failslow.observe_step(event)  # the ranks' work: a hot expert is not a slow machine
        return self.hang.observe(event)

    def observe_steps(self, events: list[Envelope]) -> None:
        """:meth:`observe` for a run of one job's ``train``/``step`` events, in order: the ranks' work,
        then the hang detector's steps. Neither finds anything on a step, and neither reads the
        other's state, so each takes the run in one go (JobStage.observe_steps)."""
        observe_step = self.failslow.observe_step
        for event in events:
            observe_step(event)
        self.hang.observe_steps(events)

    def observe_window(self, window: NodeWindow) -> list[Diagnosis]:
        """A node's feature window: GPU-side evidence for a hang without stacks, and the counters a
        machine the fail-slow rounds blame is read by against its peers'."""
        self.failslow.observe_window(window)
        return self._with_net(self.hang.observe_window(window))

    def tick(self, now: float) -> list[Diagnosis]:
        hang = self.hang.tick(now)
        for d in hang:
            if d.action == "capture_stacks":
                # Dumps that started trace-driven rounds before the hang was seen were the hang's.
                self.failslow.abandon(d.job)
        return self._with_net(hang + self.failslow.tick(now))

    def observe_diagnosis(self, diagnosis: Diagnosis) -> list[Diagnosis]:
        self.hang.observe_diagnosis(diagnosis)  # a job's storage alert tempers a hang verdict on I/O
        return self._with_net(self.failslow.observe_diagnosis(diagnosis))

    def ended(self, job: str, at: float) -> None:
        """Call on a ``job``/``end`` event: no new hang is suspected until the job runs again."""
        self.hang.ended(job, at)
        self.failslow.ended(job)  # its ranks' recent work

    def restarted(self, job: str, nodes_out: Iterable[str] = (), at: float | None = None) -> None:
        """Call on a ``job``/``restart`` event: forget the old incarnation's steps, stalls and
        rounds (a fail-slow suspicion whose suspects stay in the job is kept, see FailSlowRounds)."""
        self.hang.restarted(job, at)
        self.failslow.restarted(job, nodes_out)
