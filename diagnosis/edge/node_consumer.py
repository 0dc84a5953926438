"""The node stage as a consumer of its own (docs/design.md §1, scaling out): telemetry keyed by node in,
`summaries` keyed by job out.

Everything here needs one node's events only: raw lines are parsed, the node-local rules run,
samples fold into feature windows. What the job stage needs goes to `summaries`, keyed by job so
one job-stage member sees a whole job: each node finding (`summary/finding`), each closed window
(`summary/window`), and the events the job-level detectors read themselves (NCCL reports,
heartbeats, steps, stack dumps) as they are, bundled per job and batch (`summary/bundle`,
events/bundle.py). Ids are derived from the input's, so a redelivered
batch produces the same records and the job stage drops the copies.

A finding that may belong to a wave (diagnosis/engine/waves.py) also goes, flagged ``wave_copy``, to every
partition of `summaries`: each job-stage member keeps the whole fleet's wave candidates
(diagnosis/engine/fleet_waves.py), so machines of jobs held by different members that share a switch make
one finding. So does evidence of a machine's own (an Xid 79), which that finding names.

Each member also announces how far it has got in event time (`summary/watermark`, to every
partition of `summaries`): a job-stage partition holds records from several node-stage members,
and is only as far along as the slowest of them.

And how far each job it reads has delivered (`summary/clock`, to every partition, once a job went
on CLOCK_EVERY_S): a job is judged quiet against the jobs on its clock (diagnosis/engine/time_base.py),
which may be held by other job-stage members; each member learns their times from these words,
as one engine sees every job's.

State moves with its partitions: the telemetry topics are co-partitioned (events/topics.py), so
partition number p of every topic holds the same nodes, and each p has a node stage of its own.
When p leaves this member, or comes to it from another, that state is dropped and rebuilt from the
retained input the runner reads again (streams/runner/loop.py): kept, a node's events read twice would
count twice (a single NIC flap read again made "2 alerts in 5 min" and evicted a healthy node).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
import uuid
from typing import Any, Iterable, Sequence

from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.kinds import KNOWN_KINDS, known_kind
from faultlens.diagnosis.engine.stages import NodeOutput, NodeStage, rank_mismatch, skew_detail, step_rank_mismatch
from faultlens.diagnosis.engine.thresholds import WaveConfig
from faultlens.diagnosis.engine.waves import is_candidate, is_own_evidence
from faultlens.diagnosis.peers.features import NodeWindow
from faultlens.diagnosis.rules.base import Finding
from faultlens.events import topics
from faultlens.events.bundle import pack
from faultlens.events.envelope import Envelope, InvalidEvent, encode
from faultlens.events.event_time import WriterWord
from faultlens.events.payloads import check_payload, typed
from faultlens.events.payloads_job import TrainStep
from faultlens.events.step_reading import StepEvent
from faultlens.parsing.rules import LineRule
from faultlens.streams.producer import Outgoing
from faultlens.streams.runner.loop import Record, dead_letter, record_bytes

log = logging.getLogger(__name__)

NODE_GROUP = "faultlens-diagnose-node"
# How much of a job's event time passes between two words on it (`summary/clock`): the engine checks
# its clocks every 1 s of a job's time and judges a mate quiet only after 30 s (the grace), so a word
# every 5 s moves a quiet job by its mates a few seconds later than one engine does, never earlier.
CLOCK_EVERY_S = 5.0
_NEVER = float("-inf")


def member_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def summary(event: Envelope) -> Outgoing:
    return Outgoing(topics.SUMMARIES, event.job.encode(), encode(event))


def window_summary(w: NodeWindow, closed_at: float) -> Outgoing:
    """A closed window for `summaries`, its id derived from the window (a redelivery repeats it).

    It is stamped with the time it closed (the node's first event past it), not its start: this
    member announced progress past the start before the window could close, so stamped at its
    start it reached the job stage after records up to 10 s later, at a place that depended on
    the read; at the closing event's time it comes where `faultlens analyze` sees it."""
    return summary(dataclasses.replace(w.to_event(), id=f"w.{w.job}.{w.node}.{w.start:.3f}", ts=closed_at))


class NodeStageHandler:
    """GroupRunner handler of the node stage; ``book`` learns topologies from the `jobs` topic."""

    def __init__(self, *, window_s: float = 10.0, group: str = NODE_GROUP, skew_alert_every_s: float = 3600.0,
                 line_rules: Sequence[LineRule] | None = None, wave: WaveConfig | None = None):
        self.window_s = window_s
        self.wave = wave
        self._own_copied: dict[tuple[str, str, str], float] = {}  # (job, node, class) → ts of its last copy
        self._partitions: list[int] = []  # of `summaries`, learnt with watermarks()
        self.line_rules = line_rules
        self._stages: dict[int, NodeStage] = {}  # input partition number → its nodes' state
        self.book = JobBook()
        self.group = group
        self.skew_alert_every_s = skew_alert_every_s
        self._skew_alerted: dict[tuple[str, str], float] = {}
        self.member = member_id()
        self.emitted = 0
        self._clock_said: dict[str, float] = {}  # job → the time last said of it (`summary/clock`)
        self._node_out = NodeOutput()  # every record's but a step's, emptied as the next one comes (_each)

    def handle(self, records: list[Record]) -> list[Outgoing]:
        out: list[Outgoing] = []
        # job → the times and the bytes of the events it passed on, two lists (the bundle's time is the
        # latest, found by max() in C, not a pass over (ts, bytes) pairs: issue 56)
        forwards: dict[str, tuple[list[float], list[bytes]]] = {}
        self._each(records, out, forwards)
        for job, items in forwards.items():
            out.extend(self._bundle(job.encode(), items))
        self.emitted += len(out)
        return out

    def _clock_word(self) -> list[Outgoing]:
        """How far each job that went on since its last word has delivered (the book's time: its
        latest event handed on), to every partition of `summaries` (`summary/clock`)."""
        said = self._clock_said
        moved = {job: t for job, t in self.book.times().items() if t > said.get(job, float("-inf"))}
        if not moved or not self._partitions:
            return []
        said.update(moved)
        latest = max(moved.values())
        word = Envelope(ts=latest, job="-", node=self.member, source="summary", kind="clock",
                        id=f"clock.{self.member}.{latest:.3f}", data={"jobs": moved})
        raw = encode(word)
        return [Outgoing(topics.SUMMARIES, None, raw, partition=p) for p in self._partitions]

    def _bundle(self, key: bytes, items: tuple[list[float], list[bytes]]) -> list[Outgoing]:
        """What a job had passed on since its last other output (its events' times and bytes): one
        bundle (events/bundle.py), a lone event as itself."""
        times, raws = items
        if len(raws) == 1:
            return [Outgoing(topics.SUMMARIES, key, raws[0])]
        return [Outgoing(topics.SUMMARIES, key, value) for value in pack(key.decode(), self.member, max(times), raws)]

    def stage(self, partition: int) -> NodeStage:
        """The node stage of the nodes on input partition number ``partition``."""
        stage = self._stages.get(partition)
        if stage is None:
            stage = self._stages[partition] = NodeStage(window_s=self.window_s, line_rules=self.line_rules)
        return stage

    def partitions_moved(self, partitions) -> None:
        """The runner's word that these partitions left this member or came to it (bookkeeping
        only: it runs inside the client's rebalance callback)."""
        for number in {tp.partition for tp in partitions}:
            self._stages.pop(number, None)

    def _each(self, records: list[Record], out: list[Outgoing], forwards: dict[str, tuple[list[float], list[bytes]]]) -> None:
        """Each record's outputs into ``out``, and the (ts, event bytes) it passes on to the job stage
        into ``forwards`` by job; of a record that raises InvalidEvent, a dead letter and nothing else.
        (One loop over the batch, its body a record's work, not a call a record: in this CPython a
        method call and return were ~480 instructions, half a percent of the node stage: issue 56.)"""
        for r in records:
            try:
                event: Envelope = r.value
                step: TrainStep | None
                if type(event) is StepEvent:
                    # Four in five: a plain step as the train topic's reader reads it (events/step_reading.py), its
                    # kind known and its payload typed by that reading: none of the tests below (per step: issue 56).
                    step = event._payload
                else:
                    # (known_kind and check_payload's own first tests inline: a typed read kept its payload)
                    kinds = KNOWN_KINDS.get(event.source)
                    if kinds is not None and event.kind not in kinds and not known_kind(event):
                        raise InvalidEvent("kind", f"unknown kind {event.kind!r} for source {event.source!r} "
                                                   "(docs/events.md)")
                    if event._payload is None:
                        check_payload(event)
                    if event.source == "job":
                        self.book.update(event)
                        continue
                    step = typed(event, TrainStep) if event.kind == "step" and event.source == "train" else None
                placed = r.event_ts if r.event_ts is not None else event.ts
                self.book.now[event.job] = placed  # (JobBook.advance, inline: per message)
                # Said as the job's time goes on, not once a batch: a backlog's batch spans minutes of it,
                # and the job stage learns which jobs share a clock only from times said along the way.
                # (What is made a list only where something is: per message, issue 56.)
                made: list[Outgoing] | None = (
                    self._clock_word() if placed - self._clock_said.get(event.job, _NEVER) >= CLOCK_EVERY_S
                    and self._partitions else None)
                if r.skew_s is not None:
                    made = [*(made or ()), *self._skew(event, r, r.skew_s)]
                    if r.event_ts is not None and r.event_ts != event.ts:
                        event = event.retimed(r.event_ts)
                stage = self._stages.get(r.partition) or self.stage(r.partition)
                # (Per message, a call or a comprehension skipped is ~2 % of this handler: issue 56.)
                findings: Sequence[Finding]
                windows: Sequence[NodeWindow]
                if step is not None and (readers := stage.step_readers) is not None:
                    # The step path: its Struct handed to the stage's step readers here (NodeStage.observe_step's
                    # work without its frame or the NodeOutput: per step, issue 56).
                    # The rank where the job's one topology puts it (nearly every step) looked up here, with no
                    # call; else step_rank_mismatch's judgement (per step: issue 56).
                    places = self.book.placements.get(event.job)
                    place = places.get(step.rank) if places is not None else None  # type: ignore[arg-type]
                    findings = ()  # (a list only where something is found: per step, issue 56)
                    if place is None or place.node != event.node:
                        mismatch = step_rank_mismatch(self.book, event, step.rank, places)
                        if mismatch is not None:
                            findings = [mismatch]
                    for read in readers:
                        found = read(event, step)
                        if found:
                            findings = [*findings, *found]
                    windows = stage.windows.observe_step(event, step)
                    # A step passes on itself alone (train is a source the job stage reads): as read, its
                    # bytes; known here, not found again from what was passed on (per step: issue 56).
                    one = r.raw if event is r.value else encode(event)
                else:
                    # One NodeOutput for every other record, its lists emptied here: built per record, it was
                    # ~0.1 µs a message (issue 56). What was made of the last record was copied out of it already.
                    node_out = self._node_out
                    if node_out.findings:
                        node_out.findings.clear()
                    if node_out.windows:
                        node_out.windows.clear()
                    node_out.forward.clear()
                    for parsed in stage.parse(event) if event.kind == "line" else (event,):
                        # (rank_mismatch's own first test inline: a sample or a beat states no rank, and is
                        # no call: issue 56)
                        if parsed.data.get("rank") is not None:
                            mismatch = rank_mismatch(self.book, parsed)
                            if mismatch is not None:
                                node_out.findings.append(mismatch)
                        stage.observe(parsed, node_out)
                    findings, windows = node_out.findings, node_out.windows
                    one = None
                if findings or windows:
                    made = self._summaries(event, findings, windows, made or [])
                # An event passed on as read goes as the bytes it came in: no second encoding. Most (a step,
                # a beat) pass on only themselves, added straight to their job's list below (per message: issue 56).
                passed: Sequence[tuple[str, float, bytes]] = ()
                if one is None:
                    as_read = r.raw if event is r.value else None
                    forward = self._node_out.forward
                    one = as_read if as_read is not None and len(forward) == 1 and forward[0] is event else None
                    if one is None:
                        passed = [(e.job, e.ts, as_read if e is event and as_read is not None else encode(e))
                                  for e in forward]
                for o in made or ():
                    # A job's outputs keep the order they were made in: what was passed on before a window
                    # or a finding goes out before it (a job stage reading a backlog may take a window's
                    # time as the partition's progress).
                    key = o.key
                    if key is not None and (job := key.decode()) in forwards:
                        out.extend(self._bundle(key, forwards.pop(job)))
                    out.append(o)
                if one is not None:
                    held = forwards.get(event.job)
                    if held is None:
                        forwards[event.job] = ([event.ts], [one])
                    else:
                        held[0].append(event.ts)
                        held[1].append(one)
                    continue
                for job, ts, raw in passed:
                    held = forwards.get(job)
                    if held is None:
                        forwards[job] = ([ts], [raw])
                    else:
                        held[0].append(ts)
                        held[1].append(raw)
            except InvalidEvent as exc:
                out.append(dead_letter(r.topic, r.partition, r.offset, r.key, record_bytes(r), f"invalid: {exc}",
                                       self.group))

    def _summaries(self, event: Envelope, findings: Sequence[Finding], windows: Sequence[NodeWindow],
                   made: list[Outgoing]) -> list[Outgoing]:
        """``made`` with what ``event`` made for `summaries`: its findings (and their wave copies), then
        the windows it closed."""
        if findings:
            made += [summary(f.to_event(f"{event.id}.f{i}")) for i, f in enumerate(findings)]
            if self.wave is not None and self._partitions:
                made += [o for i, f in enumerate(findings) if self._fleet_copy(f)
                         for o in self._wave_copies(f, f"{event.id}.f{i}")]
        if windows:
            made += [window_summary(w, event.ts) for w in windows]
        return made

    def _fleet_copy(self, f: Finding) -> bool:
        """A wave candidate; or evidence of a machine's own (an Xid 79), which the fleet wave holding
        its machine names on every member: copied once per machine and class a half window, so a
        flood of its lines is a few copies."""
        if self.wave is None or is_candidate(self.wave, f):
            return self.wave is not None
        if not is_own_evidence(f):
            return False
        key = (f.job, f.nodes[0], str(f.fault))
        last = self._own_copied.get(key)
        if last is not None and 0 <= f.ts - last < self.wave.window_s / 2:
            return False
        if len(self._own_copied) > 100_000:
            self._own_copied.clear()
        self._own_copied[key] = f.ts
        return True

    def _wave_copies(self, f: Finding, event_id: str) -> list[Outgoing]:
        copy = f.to_event(f"{event_id}.w")
        copy = dataclasses.replace(copy, data={**copy.data, "wave_copy": True})
        raw = encode(copy)
        return [Outgoing(topics.SUMMARIES, None, raw, partition=p) for p in self._partitions]

    def _skew(self, event: Envelope, r: Record, skew_s: float) -> list[Outgoing]:
        key = (event.job, event.node)
        when = r.event_ts if r.event_ts is not None else event.ts
        last = self._skew_alerted.get(key)
        if last is not None and abs(when - last) < self.skew_alert_every_s:
            return []
        self._skew_alerted[key] = when
        finding = Finding(job=event.job, ts=when, fault="clock_skew", action="none", nodes=(event.node,),
                          entity="clock", evidence=(event.id,), detail=skew_detail(event, skew_s, r.clamped))
        return [summary(finding.to_event(f"{event.id}.skew"))]

    def flush(self) -> list[Outgoing]:
        node_out = NodeOutput()
        for stage in self._stages.values():
            parsed, windows = stage.flush()
            node_out.windows.extend(windows)
            for ev in parsed:
                stage.observe(ev, node_out)
        out = [window_summary(w, w.start + self.window_s) for w in node_out.windows]
        out += [summary(f.to_event(f"flush.{f.job}.{f.ts:.3f}.f{i}")) for i, f in enumerate(node_out.findings)]
        out += [summary(e) for e in node_out.forward]
        return out + self._clock_word()

    def watermarks(self, partitions: Iterable[int]):
        """``on_progress`` for the runner: this member's progress to every partition of `summaries`."""
        parts = list(partitions)
        self._partitions = parts

        def announce(progress: float, reads: tuple[tuple[str, ...], int] | None = None,
                     behind: bool = False, idle: bool = False, done: bool = False) -> list[Outgoing]:
            # -inf ("nothing written yet") travels as null: JSON has no infinity.
            known = progress != float("-inf")
            data: dict[str, Any] = {"member": self.member, "watermark": progress if known else None, "behind": behind, "idle": idle}
            if done:
                data["done"] = True
            if reads is not None:
                data["reads"], data["of"] = list(reads[0]), reads[1]
            mark = Envelope(ts=progress if known else time.time(), job="-", node=self.member, source="summary",
                            kind="watermark", data=data)
            return [Outgoing(topics.SUMMARIES, None, encode(mark), partition=p) for p in parts]
        return announce


def watermark_of(record: Record) -> WriterWord | None:
    """``watermark_of`` for the job stage's runner: a node-stage member's announcement, if this is one."""
    value = record.value
    if isinstance(value, Envelope) and value.source == "summary" and value.kind == "watermark":
        try:
            # data, not typed(): the runner reads this before any intake check, and a word
            # that says its coverage badly still counts for its watermark (SummaryWatermark would
            # refuse it whole).
            data = value.data
            mark, reads, of = data["watermark"], data.get("reads"), data.get("of")
            if reads is not None and not (isinstance(reads, list) and all(isinstance(r, str) for r in reads)
                                          and type(of) is int and of > 0):
                reads = of = None  # a word that says it badly says nothing of coverage
            return WriterWord(str(data["member"]), float("-inf") if mark is None else float(mark), reads,
                              of if reads is not None else None, data.get("behind") is True, data.get("idle") is True,
                              data.get("done") is True)
        except (KeyError, TypeError, ValueError):
            return None
    return None
