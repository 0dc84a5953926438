"""The two diagnosis stages split as deployed, without Kafka: a test bed for their event-time
contract (docs/design.md §1: any number of members give what `faultlens analyze` gives).

Node-stage members each read the nodes of their input partitions (telemetry keyed by node, the
topics co-partitioned, partition numbers split among members as the range assignor splits them)
in batches, in event-time order, and after each batch announce the time of the last record they
handled. The job stage holds what they write and hands on, in event-time order, what every member
has announced past, as events.event_time.WatermarkMerge does; what arrives below what it already
handed on is late (judged at once, at the wrong place).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from kafka.partitioner.default import murmur2

from faultlens.diagnosis.edge.node_consumer import NodeStageHandler
from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.events.bundle import Bundle, decode_bundled
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope, encode
from faultlens.events.topics import DEAD_LETTER, TELEMETRY_PARTITIONS
from faultlens.streams.runner.loop import Record


@dataclass
class SplitRun:
    diagnoses: list[Diagnosis]
    late: list[Envelope] = field(default_factory=list)  # written below what the job stage had handed on


def partition_of(node: str, partitions: int = TELEMETRY_PARTITIONS) -> int:
    return (murmur2(node.encode()) & 0x7FFFFFFF) % partitions


def _written(outputs) -> list[Envelope]:
    events: list[Envelope] = []
    for o in outputs:
        if o.topic == DEAD_LETTER:
            continue
        value = decode_bundled(o.value)
        events.extend(value.events if isinstance(value, Bundle) else (value,))
    return events


def telemetry_records(events: list[Envelope]) -> list[Record]:
    """The telemetry of ``events`` as node-stage members read it (each on its node's partition):
    built once for the runs of one trace with several member counts (encoding is most of it)."""
    return [Record("telemetry", partition_of(e.node), i, e.node.encode(), e, 0, event_ts=e.ts, raw=encode(e))
            for i, e in enumerate(events) if e.source != "job"]


def run_split(events: list[Envelope], members: int, batch: int = 200,
              telemetry: list[Record] | None = None) -> SplitRun:
    """``events`` through ``members`` node-stage members and one job stage; ``telemetry``:
    telemetry_records(events), where the caller has it already."""
    jobs = [e for e in events if e.source == "job"]
    handlers = [NodeStageHandler() for _ in range(members)]
    for h in handlers:
        for e in jobs:
            if e.kind == "topology":
                h.book.update(e)
    inputs: list[list[Record]] = [[] for _ in handlers]
    for r in telemetry_records(events) if telemetry is None else telemetry:
        inputs[r.partition * members // TELEMETRY_PARTITIONS].append(r)
    engine = Engine(EngineConfig(stage="job"))
    found: dict[str, Diagnosis] = {}
    held: list = []
    seq = itertools.count()
    for e in jobs:
        heapq.heappush(held, (e.ts, next(seq), e))
    handed_on = float("-inf")
    run = SplitRun([])
    progress = [float("-inf")] * members
    at = [0] * members

    def judge(batch_events):
        for e in batch_events:
            for d in engine.process(e):
                found[d.id] = d

    while True:
        busy = [m for m in range(members) if at[m] < len(inputs[m])]
        if not busy:
            break
        m = min(busy, key=lambda k: inputs[k][at[k]].event_ts)
        chunk = inputs[m][at[m]:at[m] + batch]
        at[m] += len(chunk)
        for e in _written(handlers[m].handle(chunk)):
            if e.ts < handed_on:
                run.late.append(e)
            heapq.heappush(held, (e.ts, next(seq), e))
        progress[m] = chunk[-1].event_ts if at[m] < len(inputs[m]) else float("inf")
        limit = min(progress)
        ready = []
        while held and held[0][0] <= limit:
            ready.append(heapq.heappop(held)[2])
        if ready:
            handed_on = max(handed_on, ready[-1].ts)
        judge(ready)
    for h in handlers:
        for e in _written(h.flush()):
            heapq.heappush(held, (e.ts, next(seq), e))
    judge([heapq.heappop(held)[2] for _ in range(len(held))])
    for d in engine.flush():
        found[d.id] = d
    run.diagnoses = list(found.values())
    return run
