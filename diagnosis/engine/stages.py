"""The two stages of the diagnosis engine (docs/design.md §1, scaling out).

:class:`NodeStage` needs only one node's events: it parses raw log lines, runs the node-local
rules and folds samples into feature windows. Its outputs are small: findings, closed
:class:`~diagnosis.peers.features.NodeWindow` summaries, and the parsed events the job stage reads
(NCCL reports, heartbeats, steps, stack dumps). :class:`JobStage` needs a whole job: the first
failing rank, silent nodes, peer comparison and hang / fail-slow localisation. Today both run in
one process; split, the node stage's outputs travel on the ``summaries`` topic keyed by job.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, Callable, Mapping, Sequence

from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.implicit import ImplicitConfig, ImplicitFaultDetector
from faultlens.diagnosis.peers.anomaly import PeerAnomalyDetector
from faultlens.diagnosis.peers.features import FeatureWindows, NodeWindow
from faultlens.diagnosis.peers.net_traffic import NetTraffic
from faultlens.diagnosis.rules import Finding, Rule, node_rules
from faultlens.diagnosis.rules.base import opt_int
from faultlens.diagnosis.rules.comms import FirstFailingRank
from faultlens.diagnosis.rules.liveness import GRACE_S, SilenceDetector
from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.events.payloads_job import TrainStep
from faultlens.events.topics import telemetry_partition
from faultlens.parsing.registry import LineEventParser
from faultlens.parsing.rules import LineRule
from faultlens.parsing.unrecognised import UnrecognisedMiner
from faultlens.streams import metrics

log = logging.getLogger(__name__)

# What the job stage reads from the node stage besides findings and windows.
JOB_SOURCES = frozenset({"nccl", "heartbeat", "train", "stack", "net"})


class NodeOutput:
    """What the node stage made of an event: findings, closed windows, events for the job stage.
    (A plain class: one is built per message, and a dataclass's default factories cost a call each.)"""

    __slots__ = ("findings", "windows", "forward")

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.windows: list[NodeWindow] = []
        self.forward: list[Envelope] = []


def rank_mismatch(book: JobBook, event: Envelope) -> Finding | None:
    """A rank-bearing event that disagrees with its job's topology, as a record-only finding."""
    # One key of any kind, read from ``data``: decoding every event (net and GPU samples included,
    # which the intake leaves as they came) into its Struct for it would cost more than all the rest.
    rank = event.data.get("rank")
    if rank is None:  # (opt_int inline where the rank is absent or a plain int: every step)
        return None
    if type(rank) is not int:
        rank = opt_int(event.data, "rank")
        if rank is None:
            return None
    # Judged by the topology in force when the event was sent, not at the job's time: a step sent
    # before an eviction's new topology may be read after other machines moved the job's time past it.
    topo = book.topology(event.job, event.ts)
    if topo is None:
        reason, entity = f"no topology for job {event.job}: ranks cannot be placed in parallel groups", "topology"
    else:
        place = topo.by_rank.get(rank)
        if place is not None and place.node == event.node:
            return None
        before = book.replaced_at(event.job, event.ts)  # the instant of a change: the old placement holds too
        if before is not None and (old := before.by_rank.get(rank)) is not None and old.node == event.node:
            return None
        where = f"on node {place.node}" if place else "absent"
        reason, entity = f"rank {rank} reported from {event.node} but the topology has it {where}", "rank-placement"
    return Finding(job=event.job, ts=event.ts, fault="unknown", action="none", nodes=(event.node,), entity=entity,
                   evidence=(event.id,), detail=reason)


def step_rank_mismatch(book: JobBook, event: Envelope, rank: int | None, places: Mapping[int, Any] | None) -> Finding | None:
    """:func:`rank_mismatch` for a typed step whose ``rank`` is read: none where ``places`` (the job's one
    topology's placement, :meth:`JobBook.sole_placement`) puts that rank on the step's node, a lookup
    (issue 56: four in five events are steps, and the general check finds the topology in force at the
    event's time each); else the general check."""
    place = places.get(rank) if places is not None and rank is not None else None
    if place is not None and place.node == event.node:
        return None
    return rank_mismatch(book, event)


def skew_detail(event: Envelope, skew_s: float, clamped: str | None) -> str:
    """What a clock_skew alert says about the event the consumer had to place itself."""
    if clamped == "future":
        return (f"{event.source}/{event.kind} from {event.node} is stamped {skew_s:.0f}s ahead of every clock this "
                f"consumer has: judged at its arrival instead (a broken clock or a bad sender)")
    if clamped == "outlier":
        return (f"{event.source}/{event.kind} from {event.node} is stamped {abs(skew_s):.0f}s off its node's own "
                f"clock: judged at its arrival instead (a broken clock or a bad sender)")
    side = "ahead of" if skew_s > 0 else "behind"
    return (f"the clock of {event.node} runs {abs(skew_s):.0f}s {side} its peers' in job {event.job}: its events "
            f"are placed by the broker's time and still count")


class NodeStage:
    def __init__(self, rules: list[Rule] | None = None, window_s: float = 10.0, line_rules: Sequence[LineRule] | None = None) -> None:
        # Alarming lines no rule took, mined per node stage (faultlens analyze --unrecognised; the
        # faultlens_log_lines_unrecognised counter on --metrics-port): never acted on.
        self.unrecognised = UnrecognisedMiner()
        self.parser = LineEventParser(rules=line_rules, on_unrecognised=self._unrecognised)
        self.rules = rules if rules is not None else node_rules()
        self._by_source: dict[str, list[Rule]] = {}
        for rule in self.rules:
            for source in rule.sources:
                self._by_source.setdefault(source, []).append(rule)
        # The step path's readers (observe_step): the rules of `train` by their own step methods, so the
        # payload is read once for all of them (None where one has none: then observe, as any event).
        readers: list[Any] = [getattr(rule, "observe_step", None) for rule in self._by_source.get("train", ())]
        # (Public: the node stage's handler calls them itself, diagnosis/edge/node_consumer.py.)
        self.step_readers: list[Callable[[Envelope, TrainStep], Sequence[Finding]]] | None = (
            readers if None not in readers else None)
        self.windows = FeatureWindows(window_s)

    def _unrecognised(self, source: str, node: str, message: str) -> None:
        metrics.UNRECOGNISED.labels(source=source).inc()
        self.unrecognised.add(message, source)

    def parse(self, event: Envelope) -> list[Envelope]:
        """Raw ``line`` events become parsed events (possibly none); others pass through."""
        if event.kind != "line":
            return [event]
        return self.parser.parse(event)

    def observe(self, event: Envelope, out: NodeOutput) -> None:
        """One parsed event; raises InvalidEvent when a rule needs a payload key it lacks."""
        for rule in self._by_source.get(event.source, ()):
            found = rule.observe(event)
            if found:
                out.findings.extend(found)
        windows = self.windows.observe(event)
        if windows:
            out.windows.extend(windows)
        if event.source in JOB_SOURCES:
            out.forward.append(event)

    def observe_step(self, event: Envelope, step: TrainStep, out: NodeOutput) -> None:
        """:meth:`observe` for a ``train``/``step`` whose payload the caller read: four in five of the
        node stage's messages (issue 56), each reader handed the Struct instead of reading it again.
        tests/diagnosis/test_engine_steps.py holds it to observe."""
        readers = self.step_readers
        if readers is None:
            self.observe(event, out)
            return
        for read in readers:
            found = read(event, step)
            if found:
                out.findings.extend(found)
        windows = self.windows.observe_step(event, step)
        if windows:
            out.windows.extend(windows)
        out.forward.append(event)  # train is a source the job stage reads (JOB_SOURCES)

    def flush(self) -> tuple[list[Envelope], list[NodeWindow]]:
        parsed = self.parser.flush()
        return parsed, self.windows.flush()


class JobStage:
    def __init__(self, book: JobBook, window_s: float = 10.0, *, implicit: bool = True,
                 implicit_config: ImplicitConfig | None = None, peer_model: bool = True,
                 telemetry_partitions: int | None = None, silence_grace_s: float = GRACE_S) -> None:
        self.book = book
        self.comms = FirstFailingRank(book)
        self.silence = SilenceDetector(silence_grace_s, book=book)
        self.stalled = LossStalledDetector()  # a loss that stopped learning (job-wide, names no machine)
        self.use_telemetry_partitions(telemetry_partitions)
        # peer_model off: only the robust z-score threshold compares a node with its peers.
        self.anomaly = PeerAnomalyDetector(window_s, use_forest=peer_model, drift=peer_model)
        self.net = NetTraffic()  # rails across nodes; job silence and congestion for the implicit detectors
        self.implicit = ImplicitFaultDetector(book, implicit_config or ImplicitConfig(), net=self.net) if implicit else None

    def use_telemetry_partitions(self, count: int | None) -> None:
        self.silence.partition_of = partial(telemetry_partition, count=count) if count else None

    def observe(self, event: Envelope) -> tuple[list[Finding], list[Diagnosis]]:
        findings: list[Finding] = []
        if event.source == "nccl":
            findings.extend(self.comms.observe(event))
        elif event.source in self.silence.sources:  # beats, and steps (agent down ≠ node down)
            findings.extend(self.silence.observe(event))
            if event.source == "train":
                findings.extend(self.stalled.observe(event))
        elif event.source == "net":
            findings.extend(self.net.observe(event))
            findings.extend(self.anomaly.observe_net(event))
        diags = self.implicit.observe(event) if self.implicit is not None else []
        return findings, list(diags)

    def observe_steps(self, events: list[Envelope], settle: Callable[[list[Finding], list[Diagnosis]], object]) -> None:
        """:meth:`observe` for a run of one job's ``train``/``step`` events, in order, each event's
        findings handed to ``settle`` in its turn, as observe's would be (issue 56: the engine holds
        a run of plain steps and hands it over in one call, diagnosis/engine/core.py). The hang
        detector and the ranks' work find nothing on a step and read nothing liveness, the stalled
        loss or a settled finding change: they take the run first, each in one call.
        tests/diagnosis/test_engine_step_runs.py holds it to observe, event by event."""
        if self.implicit is not None:
            self.implicit.observe_steps(events)
        silence, stalled = self.silence.observe_step, self.stalled.observe
        for event in events:
            found = silence(event)
            more = stalled(event)
            if found or more:
                settle(found + more, [])

    def observe_window(self, window: NodeWindow) -> list[Diagnosis]:
        self.anomaly.observe_window(window)
        return self.implicit.observe_window(window) if self.implicit is not None else []

    def observe_diagnosis(self, diagnosis: Diagnosis) -> list[Diagnosis]:
        if self.implicit is None:
            return []
        return list(self.implicit.observe_diagnosis(diagnosis))

    def tick(self, now: float, stream_stopped: bool = False) -> tuple[list[Finding], list[Diagnosis]]:
        if stream_stopped:
            # Moved by wall time (diagnosis/engine/lane.py): only liveness may say the stream stopped;
            # hangs, NCCL incidents and the peers wait for the job's own time.
            return self.silence.tick(now, True), []
        findings = self.comms.tick(now) + self.silence.tick(now, stream_stopped) + self.anomaly.tick(now)
        diags = self.implicit.tick(now) if self.implicit is not None else []
        return findings, list(diags)

    def flush(self) -> list[Finding]:
        return self.comms.flush() + self.anomaly.flush()

    def restarted(self, job: str, nodes_out: list[str], at: float | None = None) -> None:
        self.comms.restarted(job)
        self.stalled.restarted(job)
        self.net.restarted(job, nodes_out)
        if self.implicit is not None:
            self.implicit.restarted(job, nodes_out, at)  # a stall must not outlive a restart
        for node in nodes_out:
            self.silence.forget(job, node)
        self.silence.resumed(job)

    def ended(self, job: str, at: float, failed: bool = False) -> None:
        """The launcher said the job ended (``job``/``end``): no process is left to hang, and,
        unless it gave up on failures (machines may have died), its nodes going quiet is the end."""
        if not failed:
            self.silence.ended(job, at)
        if self.implicit is not None:
            self.implicit.ended(job, at)
