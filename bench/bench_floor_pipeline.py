"""The node stage's loop in memory on bench_floor's backlog: the runner's own parts and the handler,
no Kafka (issue 56). For instruction counts (callgrind) and load-free comparisons of two trees.

    .venv/bin/python -m bench.bench_floor_pipeline [--stage node|all] [--nodes 32] [--duration 60]
        [--per-poll 60] [--repeat 3] [--setup-only] [--parts]

``--parts`` also prints each part's CPU µs a message (split, ordered, complete, handler; best of
the repeats). ``--stage decode`` runs bench_floor's floor (each message decoded as the stages decode it, a
generally decoded one's payload checked) over the same messages without the client: the node
stage's count minus the floor's is what the node stage does past decoding, load-free.

The backlog's messages (bench_floor.backlog) are laid out per topic and partition as a broker
holds them (key → partition as kafka-python's default partitioner puts them), and polled as the
client hands them out: ``--per-poll`` messages of each partition in turn, a poll a round. Each poll
goes through the node stage's runner parts exactly as streams/runner/loop.py calls them:
``Intake.split``, ``EventTimeOrder.ordered`` (the merge, over a stand-in consumer that reports
every partition behind until the last poll), ``Intake.complete`` and ``NodeStageHandler.handle``
(``--stage all``: ``DiagnoseHandler.handle`` over a fresh engine that knows the topology, both
stages in one process as `diagnose --stage all` runs them);
then the merge is drained (no partition goes idle by wall time: the outputs are the same however
slowly it runs). It prints CPU µs a message (best of ``--repeat``) and the sha256 of every
output (topic, key, value) with the dead letters' bytes, so two trees can be held to the same outputs
(``--no-hash`` leaves the hash out: it is the bench's work, not the stage's, and callgrind counts it).

``--setup-only`` builds everything and runs nothing: callgrind's count of a run minus that of a
setup-only run, over the message count, is the loop's instructions a message. Count with
``PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 setarch x86_64 -R valgrind --tool=callgrind ...``: numpy's
BLAS threads spin while they wait, and left to start they moved a run's count by up to ±2.6k
instructions a message; with one, two runs of a tree agree to a fraction of an instruction.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import time
import uuid
from collections import defaultdict
from typing import Any, NamedTuple

from kafka.partitioner.default import murmur2
from kafka.structs import TopicPartition

from bench.bench_floor import backlog
from faultlens.diagnosis.edge.consumer import DEFERRED_TOPICS, TELEMETRY_DECODERS, DiagnoseHandler
from faultlens.diagnosis.edge.node_consumer import NodeStageHandler
from faultlens.diagnosis.engine.core import Engine
from faultlens.events.envelope import decode
from faultlens.events.payloads import check_payload
from faultlens.events.topics import JOBS, TELEMETRY_PARTITIONS, TELEMETRY_TOPICS
from faultlens.streams.gc_policy import tune_for_streaming
from faultlens.streams.runner.loop import GroupRunner

_BUNDLE_ID = re.compile(rb'"id":"b\.[0-9a-f]{32}"')


class Message(NamedTuple):
    """A polled message as kafka-python's ConsumerRecord has it (the fields the intake reads)."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


class StandIn:
    """The few consumer calls EventTimeOrder makes: every partition behind until ``caught_up``."""

    def __init__(self, partitions: list[TopicPartition]) -> None:
        self.partitions = set(partitions)
        self.caught_up = False

    def assignment(self) -> set[TopicPartition]:
        return self.partitions

    def highwater(self, tp: TopicPartition) -> int:
        return 1

    def position(self, tp: TopicPartition) -> int:
        return 1 if self.caught_up else 0

    def pause(self, *tps: TopicPartition) -> None:
        pass

    def resume(self, *tps: TopicPartition) -> None:
        pass


def polls(nodes: int, duration: int, per_poll: int) -> tuple[bytes, list[dict[TopicPartition, list[Message]]]]:
    """The topology message, and the telemetry as the client's polls would hand it out."""
    held: dict[TopicPartition, list[Message]] = defaultdict(list)
    seeded = random.Random(56)
    uuid4, uuid.uuid4 = uuid.uuid4, lambda: uuid.UUID(int=seeded.getrandbits(128), version=4)  # the same ids every run

    topology = b""
    ms = 1_767_225_600_000
    for topic, key, raw in backlog(nodes, duration, t0=1_767_225_600.0):
        if topic == JOBS:
            topology = raw
            continue
        tp = TopicPartition(topic, (murmur2(key) & 0x7FFFFFFF) % TELEMETRY_PARTITIONS)
        queue = held[tp]
        ms += 1
        queue.append(Message(len(queue), key, raw, ms))
    uuid.uuid4 = uuid4
    out = []
    at = dict.fromkeys(held, 0)
    while any(at[tp] < len(held[tp]) for tp in held):
        poll = {}
        for tp, queue in held.items():
            if at[tp] < len(queue):
                poll[tp] = queue[at[tp]:at[tp] + per_poll]
                at[tp] += per_poll
        out.append(poll)
    return topology, out


def run(topology: bytes, batches: list[dict[TopicPartition, list[Message]]], stage: str = "node",
        hashed: bool = True, parts: dict[str, float] | None = None) -> tuple[float, Any]:
    """One pass of a stage's loop parts over the polls: (CPU seconds, sha256 of the outputs); with
    ``parts``, each part's CPU seconds added to it by name (the drain at the end not among them)."""
    if stage == "decode":
        return decode_floor(batches, hashed)
    handler: Any
    if stage == "node":
        handler = NodeStageHandler()
        handler.member = "bench"  # (a random name each run otherwise: the bundles carry it)
    else:
        handler = DiagnoseHandler(Engine())
    handler.handle([_record(topology)])
    runner = GroupRunner.__new__(GroupRunner)  # the parts alone: no client, no producer
    from faultlens.streams.runner.options import RunnerOptions  # noqa: PLC0415 - bench-only
    # No partition goes idle by wall time (a caught-up one after 2 s otherwise): under callgrind a
    # run takes minutes, and which records a release let go then moved the outputs and the count.
    o = RunnerOptions.of(None, event_time=True, deferred_topics=DEFERRED_TOPICS, max_idle_s=1e9)
    GroupRunner.__init__(runner, None, "bench", TELEMETRY_TOPICS, handler, TELEMETRY_DECODERS,  # type: ignore[arg-type]
                         producer=_NoProducer(), options=o)
    tps = sorted({tp for b in batches for tp in b}, key=lambda tp: (tp.topic, tp.partition))
    consumer = StandIn(tps)
    runner.order.assigned(tps)
    digest = hashlib.sha256()
    clock = time.process_time
    t0 = clock()
    for i, poll in enumerate(batches):
        consumer.caught_up = i == len(batches) - 1
        if parts is None:
            good, dead = runner.intake.split(poll)
            out = list(dead)
            good = runner._released(runner.order.ordered(consumer, good), out)
            runner._handle_into(good, out)
        else:  # each part's CPU time (four clock reads a poll of ~3,000 records)
            a = clock()
            good, dead = runner.intake.split(poll)
            out = list(dead)
            b = clock()
            good = runner.order.ordered(consumer, good)
            c = clock()
            good = runner._released(good, out)
            d = clock()
            runner._handle_into(good, out)
            e = clock()
            for name, took in (("split", b - a), ("ordered", c - b), ("complete", d - c), ("handler", e - d)):
                parts[name] = parts.get(name, 0.0) + took
        if hashed:
            _digest(digest, out)
    out = []
    runner._handle_into(runner._released(runner.order.ordered(consumer, [], drain=True), out), out)
    out += handler.flush()
    if hashed:
        _digest(digest, out)
    return time.process_time() - t0, digest.hexdigest()[:12]


def decode_floor(batches: list[dict[TopicPartition, list[Message]]], hashed: bool = True) -> tuple[float, Any]:
    """bench_floor's "raw + decode + check" without the client: each message decoded as the stages
    decode it and a generally decoded one's payload checked (bench_throughput._raw's loop), so that
    a stage's instructions a message can be set against the floor's on the same messages, load-free.
    The timed pass keeps nothing it read, as the floor keeps nothing (thousands of events held would
    cost the collector's passes). The hash, of each event's envelope, to hold two trees' decoders to
    the same reading, is a second pass after the clock; ``hashed`` False leaves it out, for
    callgrind's count."""
    readers = {tp: TELEMETRY_DECODERS.get(tp.topic, decode) for b in batches for tp in b}
    t0 = time.process_time()
    for poll in batches:
        for tp, messages in poll.items():
            reader = readers[tp]
            for m in messages:
                event = reader(m.value)
                if reader is decode:
                    check_payload(event)
    cpu = time.process_time() - t0
    digest = hashlib.sha256()
    if hashed:
        for poll in batches:
            for tp, messages in poll.items():
                for m in messages:
                    e = readers[tp](m.value)
                    digest.update(f"{e.source}|{e.kind}|{e.ts}|{e.job}|{e.node}|{e.id}|".encode())
    return cpu, digest.hexdigest()[:12]


def _digest(digest: Any, out: list) -> None:
    for o in out:
        value = _BUNDLE_ID.sub(b'"id":"b"', o.value or b"")  # a bundle's own id is random
        if o.topic == "dead-letter":  # its wall-clock stamp aside
            body = json.loads(value)
            body.pop("ts", None)
            value = json.dumps(body, sort_keys=True).encode()
        digest.update(f"{o.topic}|{o.key!r}|{getattr(o, 'partition', None)}|".encode() + value)


def _record(raw: bytes):
    from faultlens.streams.runner.types import Record  # noqa: PLC0415

    event = decode(raw)
    return Record(JOBS, 0, 0, None, event, 0, event.ts, None, None, raw)


class _NoProducer:
    def close(self) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage", choices=["node", "all", "decode"], default="node",
                    help="decode: bench_floor's raw + decode + check without the client (the floor's share)")
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--duration", type=int, default=60)
    ap.add_argument("--per-poll", type=int, default=60)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--setup-only", action="store_true")
    ap.add_argument("--no-hash", action="store_true",
                    help="no hash of what was read (decode) or written (node, all): for callgrind, whose count of a "
                         "hashed node stage held ~10k instructions a message of the bench's own sha256 and regex")
    ap.add_argument("--parts", action="store_true", help="also CPU µs a message of each part (best of --repeat)")
    args = ap.parse_args(argv)
    topology, batches = polls(args.nodes, args.duration, args.per_poll)
    n = sum(len(m) for b in batches for m in b.values())
    tune_for_streaming()
    if args.stage == "all":
        import sklearn.ensemble  # noqa: F401, PLC0415 - as primed_handler does: imported before the first forest
    if args.setup_only:
        print(json.dumps({"messages": n, "setup_only": True}))
        return 0
    timed: list[dict[str, float]] = []
    runs = []
    for _ in range(args.repeat):
        parts: dict[str, float] | None = {} if args.parts and args.stage != "decode" else None
        runs.append(run(topology, batches, args.stage, not args.no_hash, parts))
        if parts is not None:
            timed.append(parts)
    best = min(cpu for cpu, _ in runs)
    line = {"stage": args.stage, "load_average": os.getloadavg(), "messages": n, "polls": len(batches),
            "cpu_s": round(best, 3), "us_per_message": round(1e6 * best / n, 2),
            "outputs_sha256": sorted({d for _, d in runs})}
    if timed:
        line["parts_us_per_message"] = {name: round(1e6 * min(t[name] for t in timed) / n, 2) for name in timed[0]}
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
