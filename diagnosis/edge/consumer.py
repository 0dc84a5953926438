"""The Kafka edge of the diagnosis engine: telemetry + jobs in, diagnosis records out.

A thin :class:`streams.runner.loop.GroupRunner` handler. Each record goes through the engine on its
own, so one bad event becomes one dead letter (with the engine's reason) and never makes the
runner redeliver the whole batch through a stateful engine. Redelivered records (at-least-once)
are recognised by event id inside the engine. A batch's plain steps of a job reach the job stage as
runs (``Engine.process(..., hold=True)``, issue 56), with the same diagnoses in the same order, and
the engine takes a batch's steps in one loop (``Engine.process_steps``, diagnosis/engine/step_batch.py),
with what a bad one costs the same: its own dead letter.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Collection, Iterable, Mapping

from faultlens.diagnosis.edge.node_consumer import NODE_GROUP, NodeStageHandler, watermark_of
from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.engine.thresholds import shipped as shipped_thresholds
from faultlens.events import topics
from faultlens.events.beat_reading import decode_beat_message
from faultlens.events.bundle import decode_bundled
from faultlens.events.diagnosis_record import Action, Diagnosis, FaultClass
from faultlens.events.envelope import InvalidEvent
from faultlens.events.event_time import UpstreamStop
from faultlens.events.gpu_reading import decode_gpu_message
from faultlens.events.net_reading import decode_net_message
from faultlens.events.step_reading import decode_train_message
from faultlens.events.topics import TELEMETRY_TOPICS
from faultlens.streams.config import KafkaSettings
from faultlens.streams.jobs_topic import prime_from_jobs_topic
from faultlens.streams.metrics import DIAGNOSES
from faultlens.streams.producer import Outgoing
from faultlens.streams.runner.loop import GroupRunner, Record, dead_letter, record_bytes
from faultlens.streams.topic_missing import TopicMissingError

log = logging.getLogger(__name__)


class TopicLayoutError(ValueError):
    """The topics on the broker cannot give a right answer with this stage (a clear error at start)."""

GROUP = "faultlens-diagnose"
JOB_GROUP = "faultlens-diagnose-job"
# How much retained input a member re-reads for a partition it takes over (streams.runner.loop): the
# job stage's state spans a hang (floor, stack rounds) and the dedup window; the node stage's its
# feature windows, half-read multi-line records and the NIC rule's 5 minutes of link alerts.
JOB_REBUILD_S = 900.0
NODE_REBUILD_S = 300.0
STAGES = ("all", "node", "job")
DIAGNOSES_TOPIC = topics.DIAGNOSES
END_TICK_S = 1.0  # input_ended's wall step: the runner's tick_interval_s, as a member that stayed up ticks
JOBS_TOPIC = topics.JOBS
# NVML samples, half of all telemetry, and NIC port samples, a tenth of it but ~13 kB each, are
# read by typed decoders (events/gpu_reading.py, events/net_reading.py), and only once event
# time lets them go (streams/intake.py: deferred topics). Training steps, one per rank and step,
# and heartbeats are read by typed decoders too (events/step_reading.py, events/beat_reading.py),
# at once: small, they hold little.
TELEMETRY_DECODERS = {topics.GPU: decode_gpu_message, topics.NET: decode_net_message,
                      topics.TRAIN: decode_train_message, topics.HEARTBEAT: decode_beat_message}
DEFERRED_TOPICS = (topics.GPU, topics.NET)


def upstream_alert(job: str, partition: int, stop: UpstreamStop, wall_now: float, job_time: float | None) -> Diagnosis:
    """A job whose upstream stage stopped: an alert about the pipeline, naming who stopped."""
    at = job_time if job_time is not None else (stop.watermark if stop.watermark != float("-inf") else wall_now)
    members = ", ".join(stop.members)
    return Diagnosis(job=job, ts=at, onset=at, fault=FaultClass.TELEMETRY_LOST, action=Action.ALERT, nodes=(), confidence=1.0,
                     detail=f"no node-stage member has announced progress on {topics.SUMMARIES} partition {partition} "
                            f"for {wall_now - stop.since:.0f}s (the last: {members}): job {job}'s telemetry is not "
                            f"reaching diagnosis. Its time stays where the node stage stopped and no node is judged "
                            f"silent until it resumes; start or fix `faultlens diagnose --stage node` (alert, no "
                            f"eviction)")


def diagnosis_record(d: Diagnosis) -> Outgoing:
    DIAGNOSES.labels(d.fault, d.action).inc()
    if d.fault == FaultClass.TELEMETRY_LOST:
        # Recorded with action none where nothing on the job's clock arrives any more (the input's end
        # or the pipeline's silence): no alert follows, so the operator's log says it.
        log.warning("job %s: telemetry lost (%s): %s", d.job, d.action, d.detail)
    return Outgoing(DIAGNOSES_TOPIC, d.job.encode(), d.encode())


def diagnosis_records(engine: Engine, found: list[Diagnosis]) -> list[Outgoing]:
    """Each diagnosis under its job; a fleet wave under every job of its part whose input this
    member reads, its own or not (the same record: remediation members split `diagnoses` by job,
    and each must hear it; the member of each of those jobs writes it under that job)."""
    out: list[Outgoing] = []
    for d in found:
        record = diagnosis_record(d)
        out.extend(Outgoing(DIAGNOSES_TOPIC, job.encode(), record.value) for job in engine.delivered_under(d))
    return out


class DiagnoseHandler:
    def __init__(self, engine: Engine | None = None, group: str = GROUP, *, step_runs: bool = True) -> None:
        self.engine = engine or Engine()
        self.group = group
        self.emitted = 0
        # False: every step's job side taken alone (the reference tests/diagnosis/test_engine_step_runs.py holds runs to)
        self.step_runs = step_runs
        # The job stage: which `summaries` partition each job's records come from (a job lives on
        # one), so a job whose partition moves to another member leaves nothing behind here.
        self._partition_of: dict[str, int] | None = {} if self.engine.config.stage == "job" else None
        self._upstream_alerted: dict[str, float] = {}  # job → the upstream stop it was alerted for

    def partitions_moved(self, partitions) -> None:
        """Runner hook (bookkeeping only, inside the rebalance callback): jobs whose `summaries`
        partition left this member, or came to it, are forgotten; what comes is rebuilt from
        retained input. A lane left behind would go on judging a job this member no longer reads
        (the wall clock moves a quiet job's time: stack rounds and silences would fall due)."""
        if self._partition_of is None:
            return
        moved = {tp.partition for tp in partitions if tp.topic == topics.SUMMARIES}
        for job in [j for j, p in self._partition_of.items() if p in moved]:
            del self._partition_of[job]
            self._upstream_alerted.pop(job, None)
            self.engine.forget_job(job)

    def handle(self, records: list[Record]) -> list[Outgoing]:
        out: list[Outgoing] = []
        where = self._partition_of
        engine, hold = self.engine, self.step_runs
        steps = hold and where is None  # (a job stage's records are summaries: each is read for its partition)
        i, n = 0, len(records)
        while i < n:
            if steps and records[i].value.kind == "step":
                found: list[Diagnosis] = []
                try:
                    i = engine.process_steps(records, i, found)  # a run of plain steps, in one loop
                except Exception as exc:  # noqa: BLE001 - as below
                    self._found(out, found)  # what the steps before the one that raised found
                    i = engine.failed_at + 1
                    self._refused(out, records[i - 1], exc)
                    continue
                self._found(out, found)
                if i == n:
                    break
            r = records[i]
            i += 1
            if where is not None and r.topic == topics.SUMMARIES:
                job = getattr(r.value, "job", None)
                # A wave candidate's copy comes on every partition (diagnosis/engine/fleet_waves.py), as
                # a node-stage member's word on its jobs' clocks (job "-"): they say nothing of where a job lives.
                if type(job) is str and job != "-" and not getattr(r.value, "data", {}).get("wave_copy"):
                    where[job] = r.partition
            try:
                found = engine.process(r.value, at=r.event_ts, skew_s=r.skew_s, clamped=r.clamped, hold=hold)
            except Exception as exc:  # noqa: BLE001 - a detector bug must cost one event, not the consumer
                self._refused(out, r, exc)
                continue
            if found:
                self._found(out, found)
        self._release(out)
        return out

    def _refused(self, out: list[Outgoing], r: Record, exc: Exception) -> None:
        """Record ``r``, on which the engine raised ``exc`` (called in the ``except``): what the held
        steps before it found, then its dead letter with the engine's reason."""
        if isinstance(exc, InvalidEvent):
            self._found(out, self.engine.release())  # what the steps before it found comes first
            out.append(self._dead(r, f"invalid: {exc}"))
            return
        log.exception("engine failed on %s/%s event %s", r.value.source, r.value.kind, r.value.id)
        self._release(out)
        out.append(self._dead(r, f"engine error: {type(exc).__name__}: {exc}"))

    def _found(self, out: list[Outgoing], found: list[Diagnosis]) -> None:
        if found:
            out.extend(diagnosis_records(self.engine, found))
            self.emitted += len(found)

    def _release(self, out: list[Outgoing]) -> None:
        """The held steps' job side (Engine.process(..., hold=True)). A detector bug there costs the
        run's steps their job side, logged; their records are not dead letters (each was read)."""
        try:
            self._found(out, self.engine.release())
        except Exception:  # noqa: BLE001
            log.exception("engine failed on a run of held steps")

    def tick(self, now: float, busy: Collection[str] = (),
             upstream: Mapping[Any, UpstreamStop] | None = None) -> Iterable[Outgoing]:
        """The engine's wall clock. ``upstream``: the input partitions whose every upstream writer
        (node-stage member) fell silent; the jobs read from them keep their time where the writers
        stopped, and each is named once in a ``telemetry_lost`` alert per stop (issue 32: what the
        job stage does not receive is the pipeline's silence, never its machines')."""
        until, found = self._upstream_stops(now, upstream)
        found += self.engine.tick(now, busy, until)
        self.emitted += len(found)
        return diagnosis_records(self.engine, found)

    def _upstream_stops(self, now: float, upstream: Mapping[Any, UpstreamStop] | None
                        ) -> tuple[dict[str, float], list[Diagnosis]]:
        """Where each job's time must stay (its upstream writers stopped), and an alert per new stop."""
        until: dict[str, float] = {}
        found: list[Diagnosis] = []
        if upstream and self._partition_of is not None:
            stops = {tp.partition: stop for tp, stop in upstream.items() if tp.topic == topics.SUMMARIES}
            for job, partition in self._partition_of.items():
                stop = stops.get(partition)
                if stop is None:
                    self._upstream_alerted.pop(job, None)
                    continue
                # Writers that fell silent behind on their input vouch for no quiet: the job's time stays
                # where its records brought it (events.event_time.UpstreamStop.behind).
                until[job] = float("-inf") if stop.behind else stop.since
                if self._upstream_alerted.get(job) != stop.since:
                    self._upstream_alerted[job] = stop.since
                    found.append(upstream_alert(job, partition, stop, now, self.engine.job_time(job)))
        return until, found

    def tick_held(self, now: float, busy: frozenset[str], upstream: Mapping[Any, UpstreamStop]) -> Iterable[Outgoing]:
        """The runner's clock in event time (streams.runner.handler.HeldAwareClock): :meth:`tick`."""
        return self.tick(now, busy, upstream)

    def input_ended(self, now: float, upstream: Mapping[Any, UpstreamStop]) -> Iterable[Outgoing]:
        """The member's input ended (a bounded run's idle or drained stop; streams.runner.handler.InputEnd):
        each quiet job's end is judged now, as the wall clock judges it once nothing arrived for the
        grace and the silence grace after it, ticked a second at a time as the loop ticks. Before, it
        was judged only if the member happened to stay up that long: a starved job member reached
        its idle stop before its wall clock got there, and a job's stream end went unnamed
        (test_silence_starved, CI). Jobs whose upstream writers stopped stay where they stopped."""
        until, found = self._upstream_stops(now, upstream)
        config = self.engine.config
        end = self.engine.wall_when_judged(config.silence_grace_s + 2 * config.tick_every_s)
        wall = now
        while end is not None and wall < end:
            wall = min(end, wall + END_TICK_S)
            found += self.engine.tick(wall, (), until)
        self.emitted += len(found)
        return diagnosis_records(self.engine, found)

    def flush(self) -> list[Outgoing]:
        found = self.engine.flush()
        self.emitted += len(found)
        return diagnosis_records(self.engine, found)

    def _dead(self, r: Record, reason: str) -> Outgoing:
        return dead_letter(r.topic, r.partition, r.offset, r.key, record_bytes(r), reason, self.group)


def prime_topologies(engine: Engine, settings: KafkaSettings, idle_s: float = 1.0) -> int:
    """Read the compacted ``jobs`` topic from the start so topologies are known before telemetry
    (streams/jobs_topic.py: tombstones skipped quietly, malformed records said and counted)."""
    return prime_from_jobs_topic(settings, engine.book.update, idle_s=idle_s).topologies


def primed_handler(settings: KafkaSettings, config: EngineConfig | None = None, group: str = GROUP) -> DiagnoseHandler:
    """A handler over a fresh engine that already knows every job's topology."""
    engine = Engine(config)
    if engine.config.peer_model and engine.config.stage != "node":
        # scikit-learn is imported where the first forest is fitted (the CLI starts fast without
        # it); a consumer pays the ~2 s now, not in the middle of its first backlog.
        import sklearn.ensemble  # noqa: F401
    log.info("primed %d topology event(s) from the jobs topic", prime_topologies(engine, settings))
    return DiagnoseHandler(engine, group)


def diagnose_consumer(settings: KafkaSettings, config: EngineConfig | None = None, *, stage: str = "all",
                      group: str | None = None, handler: Any = None,
                      max_idle_s: float = 2.0) -> tuple[GroupRunner, Any]:
    """The diagnosis consumer of one stage, not started: `faultlens diagnose` and `faultlens up`
    both build it here (docs/design.md §1). Every stage reads in event-time order and reads the
    compacted `jobs` topic in full, outside its group (every member needs every topology).

    - ``all``: telemetry → diagnoses, both stages in one process (one member: each member of a
      group sees only some nodes of a job);
    - ``node``: telemetry → `summaries` (any number of members);
    - ``job``: `summaries` → diagnoses (any number of members; a job lives on one partition).

    ``handler`` replaces the default (tests, the demo); ``max_idle_s`` is how long a caught-up,
    silent partition holds event time back."""
    config = config or EngineConfig()
    if stage == "node":
        group = group or NODE_GROUP
        node = handler if handler is not None else NodeStageHandler(
            window_s=config.window_s, group=group, line_rules=config.line_rules,
            wave=(config.thresholds or shipped_thresholds()).wave)
        runner = GroupRunner(settings, group, TELEMETRY_TOPICS, node, event_time=True, broadcast_topics=[JOBS_TOPIC],
                             max_idle_s=max_idle_s, rebuild_s=NODE_REBUILD_S, decoders=TELEMETRY_DECODERS,
                             deferred_topics=DEFERRED_TOPICS)
        _require_topics(runner, [*TELEMETRY_TOPICS, topics.SUMMARIES, JOBS_TOPIC])
        problem = topics.copartition_problem({t: len(runner.producer.partitions(t)) for t in TELEMETRY_TOPICS})
        if problem is not None:
            runner.producer.close()
            raise TopicLayoutError(problem)
        runner.on_progress = node.watermarks(runner.producer.partitions(topics.SUMMARIES))
        return runner, node
    if stage == "job":
        group = group or JOB_GROUP
        handler = handler if handler is not None else primed_handler(settings, replace(config, stage="job"), group)
        runner = GroupRunner(settings, group, [topics.SUMMARIES], handler, event_time=True, max_idle_s=max_idle_s,
                             decoders={topics.SUMMARIES: decode_bundled}, broadcast_topics=[JOBS_TOPIC],
                             watermark_of=watermark_of, rebuild_s=JOB_REBUILD_S,
                             # the node stage placed each event (its clock judged on the telemetry
                             # topics); here a record's broker time is only when a member wrote it
                             judge_clocks=False)
        _require_topics(runner, [topics.SUMMARIES, JOBS_TOPIC, DIAGNOSES_TOPIC])
        return _learn_partitions(runner, handler), handler
    if stage != "all":
        raise ValueError(f"unknown stage {stage!r} (one of {', '.join(STAGES)})")
    group = group or GROUP
    handler = handler if handler is not None else primed_handler(settings, config, group)
    runner = GroupRunner(settings, group, TELEMETRY_TOPICS, handler, event_time=True, decoders=TELEMETRY_DECODERS,
                         deferred_topics=DEFERRED_TOPICS, broadcast_topics=[JOBS_TOPIC], max_idle_s=max_idle_s,
                         rebuild_s=JOB_REBUILD_S)
    _require_topics(runner, [*TELEMETRY_TOPICS, JOBS_TOPIC, DIAGNOSES_TOPIC])
    return _learn_partitions(runner, handler), handler


def _require_topics(runner: GroupRunner, names: Iterable[str]) -> None:
    """Every topic the stage reads or writes exists: on a broker that creates none, a missing one
    read as an outage (nothing read, every output retried for ever). A clear error at start."""
    for name in names:
        try:
            runner.producer.partitions(name)
        except TopicMissingError as exc:
            runner.producer.close()
            raise TopicLayoutError(str(exc)) from None


def _learn_partitions(runner: GroupRunner, handler: Any) -> GroupRunner:
    """Tells the engine how many partitions the broker's telemetry topics have: nodes that share one
    share a path to diagnosis and fall silent together when it stops (diagnosis/rules/liveness.py)."""
    engine = getattr(handler, "engine", None)
    if engine is not None:
        count = len(runner.producer.partitions(topics.HEARTBEAT))
        if count:
            engine.telemetry_partitions(count)
    return runner
