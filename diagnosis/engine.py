"""The diagnosis engine: events in, diagnosis records out, the same on a live stream and a trace.

Composition (DESIGN.md §1): the job book (topologies) → the node stage (log parsing, node-local
rules, feature windows) → the job stage (first failing rank, silent nodes, peer anomaly,
hang / fail-slow localisation) → dedup (folding, suppression, escalation). Diagnoses that come
out are shown to the job stage again, so a fail-slow suspicion can start stack rounds.

Time is event time: ``now`` is the largest event timestamp seen, and the absence detectors
(silence, hangs, windows) tick on it. A live consumer also calls :meth:`Engine.tick` with the wall
clock; that moves event time only after ``grace_s`` without any event, by the wall time elapsed
since, so a replay of an old trace is never judged silent by today's clock.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from diagnosis.dedup import Dedup
from diagnosis.detector import JobBook
from diagnosis.features import NodeWindow
from diagnosis.implicit import ImplicitConfig
from streams.diagnosis_record import Diagnosis
from diagnosis.rules.base import Finding, opt_int
from diagnosis.stages import JobStage, NodeOutput, NodeStage
from streams.events import Envelope, InvalidEvent

log = logging.getLogger(__name__)

# Kinds each source may send (docs/events.md); anything else is a dead letter naming the kind.
KNOWN_KINDS = {
    "gpu": {"sample", "xid", "lost"},
    "kernel": {"xid", "gpu_lost", "sxid", "link_down", "link_up", "nic_error", "pcie_aer", "mce", "edac",
               "soft_lockup", "hung_task", "panic", "oom_kill", "segfault", "line"},
    "nccl": {"nccl_warn", "nccl_timeout", "nccl_error", "cuda_error", "exception", "nan", "line"},
    "train": {"step", "checkpoint", "command_ack"},
    "heartbeat": {"beat"},
    "stack": {"stack_dump"},
    "host": {"sample"},
    "job": {"topology", "restart"},
    "summary": {"window", "finding"},
}


@dataclass(frozen=True)
class EngineConfig:
    window_s: float = 10.0  # feature window of the peer comparison
    tick_every_s: float = 1.0  # event-time cadence of the absence detectors
    grace_s: float = 30.0  # wall seconds without events before the wall clock moves event time
    max_lateness_s: float = 900.0  # an event older than now - this is too late to judge
    implicit: bool = True  # hang / fail-slow localisation (diagnosis.implicit)
    implicit_config: ImplicitConfig = field(default_factory=ImplicitConfig)
    seen_ids: int = 200_000  # redelivered events (at-least-once) are recognised by id


class Engine:
    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig()
        self.book = JobBook()
        self.node_stage = NodeStage(window_s=self.config.window_s)
        self.job_stage = JobStage(self.book, self.config.window_s, implicit=self.config.implicit,
                                  implicit_config=self.config.implicit_config)
        self.dedup = Dedup(job_size=self._job_size)
        self.now: float | None = None
        self._job_now: dict[str, float] = {}
        self.stats: Counter = Counter()
        self._last_tick: float = float("-inf")
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._arrival_wall = time.time()
        self._arrival_now: float | None = None

    def _job_size(self, job: str) -> int:
        topo = self.book.topology(job)
        return len(topo.nodes) if topo is not None else 0

    # --- events -----------------------------------------------------------------------------
    def process(self, event: Envelope) -> list[Diagnosis]:
        """One event. Raises InvalidEvent (→ dead letter) for input no detector can use."""
        if event.id in self._seen:
            self.stats["duplicates"] += 1
            return []
        kinds = KNOWN_KINDS.get(event.source)
        if kinds is not None and event.kind not in kinds:
            raise InvalidEvent("kind", f"unknown kind {event.kind!r} for source {event.source!r} (docs/events.md)")
        # Lateness is judged against the event's own job: jobs keep their own clocks (a replayed
        # trace beside live jobs, a test job beside others on a shared broker).
        job_now = self._job_now.get(event.job)
        if job_now is not None and event.ts < job_now - self.config.max_lateness_s:
            raise InvalidEvent("ts", f"{event.ts:.3f} is {job_now - event.ts:.0f}s behind job {event.job}'s stream "
                                     f"(limit {self.config.max_lateness_s:.0f}s): too late to judge")
        if job_now is None or event.ts > job_now:
            self._job_now[event.job] = event.ts
        self._remember(event.id)
        self.stats["events"] += 1
        self._arrival_wall = time.time()
        out: list[Diagnosis] = []
        if event.source == "job":
            self._job_event(event)
        elif event.source == "summary":
            # The node stage of another process summarised a window (DESIGN.md §1, split stages).
            if event.kind == "window":
                out.extend(self._settle([], self.job_stage.observe_window(NodeWindow.from_event(event))))
        else:
            node_out = NodeOutput()
            for parsed in self.node_stage.parse(event):
                self.stats["parsed"] += parsed is not event
                self._check_rank(parsed, node_out)
                self.node_stage.observe(parsed, node_out)
            out.extend(self._job_side(node_out))
        if self.now is None or event.ts > self.now:
            self.now = event.ts
            self._arrival_now = event.ts
        if self.now - self._last_tick >= self.config.tick_every_s:
            out.extend(self._tick(self.now))
        return out

    def _job_event(self, event: Envelope) -> None:
        if event.kind == "topology":
            self.book.update(event)
            self.stats["topologies"] += 1
        elif event.kind == "restart":
            self.dedup.restarted(event.job, event.ts)
            nodes_out = event.data.get("nodes_out") or []
            self.job_stage.restarted(event.job, [str(n) for n in nodes_out if isinstance(n, str)])

    def _check_rank(self, event: Envelope, out: NodeOutput) -> None:
        """Rank-bearing events must agree with the job's topology; disagreement is reported, once."""
        rank = opt_int(event.data, "rank")
        if rank is None:
            return
        topo = self.book.topology(event.job)
        if topo is None:
            reason, entity = f"no topology for job {event.job}: ranks cannot be placed in parallel groups", "topology"
        else:
            place = topo.by_rank.get(rank)
            if place is not None and place.node == event.node:
                return
            where = f"on node {place.node}" if place else "absent"
            reason, entity = f"rank {rank} reported from {event.node} but the topology has it {where}", "rank-placement"
        self.stats["topology_mismatch"] += 1
        out.findings.append(Finding(job=event.job, ts=event.ts, fault="unknown", action="none",
                                    nodes=(event.node,), entity=entity, evidence=(event.id,), detail=reason))

    def _job_side(self, node_out: NodeOutput) -> list[Diagnosis]:
        findings = list(node_out.findings)
        diags: list[Diagnosis] = []
        for w in node_out.windows:
            diags.extend(self.job_stage.observe_window(w))
        for ev in node_out.forward:
            f, d = self.job_stage.observe(ev)
            findings.extend(f)
            diags.extend(d)
        return self._settle(findings, diags)

    def _settle(self, findings: list[Finding], diags: list[Diagnosis]) -> list[Diagnosis]:
        """Dedup everything, then let the job stage react to what came out (a fail-slow suspicion
        starts stack rounds), until nothing new appears."""
        if not findings and not diags:
            return []
        out: list[Diagnosis] = []
        for f in findings:
            out.extend(self.dedup.admit(f))
        for d in diags:
            out.extend(self.dedup.admit_diagnosis(d))
        queue = list(out)
        for _ in range(4):  # reactions of reactions are rare; bounded so a loop cannot spin
            follow: list[Diagnosis] = []
            for d in queue:
                for r in self.job_stage.observe_diagnosis(d):
                    follow.extend(self.dedup.admit_diagnosis(r))
            if not follow:
                break
            out.extend(follow)
            queue = follow
        self.stats["diagnoses"] += len(out)
        return out

    # --- time -------------------------------------------------------------------------------
    def _tick(self, now: float) -> list[Diagnosis]:
        self._last_tick = now
        findings, diags = self.job_stage.tick(now)
        out = self._settle(findings, diags)
        out.extend(self.dedup.tick(now))
        return out

    def tick(self, wall_now: float | None = None) -> list[Diagnosis]:
        """The live consumer's clock (wall seconds since the epoch, default now): moves event time
        only after ``grace_s`` without events, by the wall time elapsed beyond the grace."""
        if self.now is None or self._arrival_now is None:
            return []
        idle = (time.time() if wall_now is None else wall_now) - self._arrival_wall
        if idle <= self.config.grace_s:
            return []
        target = self._arrival_now + (idle - self.config.grace_s)
        if target <= self.now:
            return []
        self.now = target
        return self._tick(target)

    def flush(self) -> list[Diagnosis]:
        """End of input (a trace's end, shutdown): decide what is pending, report final counts.

        Absence is not judged here: a trace that ends is not a cluster that went silent."""
        out: list[Diagnosis] = []
        parsed, windows = self.node_stage.flush()
        node_out = NodeOutput(windows=windows)
        for ev in parsed:
            self.node_stage.observe(ev, node_out)
        out.extend(self._job_side(node_out))
        out.extend(self._settle(self.job_stage.flush(), []))
        out.extend(self.dedup.flush())
        return out

    def _remember(self, event_id: str) -> None:
        self._seen[event_id] = None
        if len(self._seen) > self.config.seen_ids:
            self._seen.popitem(last=False)


def analyze(events, engine: Engine | None = None, on_dead=None) -> list[Diagnosis]:
    """Run the engine over an iterable of events; the final version of each diagnosis (by id),
    in the order first emitted. ``on_dead(event, reason)`` hears about dead letters."""
    engine = engine or Engine()
    latest: dict[str, Diagnosis] = {}
    for event in events:
        try:
            found = engine.process(event)
        except InvalidEvent as exc:
            engine.stats["dead_letters"] += 1
            if on_dead is not None:
                on_dead(event, str(exc))
            continue
        for d in found:
            latest[d.id] = d
    for d in engine.flush():
        latest[d.id] = d
    return list(latest.values())


def analyze_trace(path, *, config: EngineConfig | None = None, progress: bool = False) -> tuple[list[Diagnosis], Engine]:
    """:func:`analyze` over a Parquet trace (streams.trace), with a progress bar on stderr if asked."""
    from streams.trace import iter_trace, trace_rows

    engine = Engine(config)
    events = iter_trace(path)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=trace_rows(path), unit="ev", unit_scale=True, desc="analyze", leave=False)

        def counted(it):
            for i, e in enumerate(it, 1):
                if i % 4096 == 0:
                    bar.update(4096)
                yield e

        events = counted(events)

    def dead(event: Envelope, reason: str) -> None:
        log.warning("dead letter: %s/%s event %s: %s", event.source, event.kind, event.id, reason)

    try:
        found = analyze(events, engine, on_dead=dead)
    finally:
        if bar is not None:
            bar.close()
    return found, engine
