"""A poll through the node stage's runner parts as the runner runs them now (typed readers, the merge
taking each partition's records in one call, a release letting its offsets go in one pass) against
the same polls read the general way and merged one record at a time: every output the same, in the
same order, malformed records in the middle of a poll included (their dead letters the same, the
good records around them not lost). Kafka-free: polls built by hand, a stand-in consumer."""

from __future__ import annotations

import json

import orjson
from kafka.structs import TopicPartition

from faultlens.diagnosis.edge.consumer import DEFERRED_TOPICS, TELEMETRY_DECODERS
from faultlens.diagnosis.edge.node_consumer import NodeStageHandler
from faultlens.events import topics
from faultlens.events.envelope import decode
from faultlens.events.event_time import WatermarkMerge
from faultlens.streams.kafka_client import Message
from faultlens.streams.runner.loop import GroupRunner
from faultlens.streams.runner.options import RunnerOptions
from faultlens.streams.runner.types import Record
from tests.events.one_heap import one_heap

T = 1_790_000_000.0
NODES = ("dgx-a1", "dgx-a2")


class _Consumer:
    """What EventTimeOrder asks of a consumer: every partition behind (a backlog) until drained."""

    def __init__(self, partitions):
        self.partitions = set(partitions)

    def assignment(self):
        return self.partitions

    def highwater(self, tp):
        return 1

    def position(self, tp):
        return 0

    def pause(self, *tps):
        pass

    def resume(self, *tps):
        pass


class _NoProducer:
    def close(self):
        pass


def _envelope(source, kind, ts, node, data, **over):
    e = {"v": 1, "id": f"{source}.{node}.{ts:.1f}", "ts": ts, "job": "llm", "node": node, "source": source,
         "kind": kind, "data": data}
    e.update(over)
    return orjson.dumps(e)


def _gpu(t, node):
    gpu = {"index": 0, "uuid": "GPU-0", "util": 97.0, "temp_c": 61.0 + t % 3, "power_w": 640.5,
           "power_limit_w": 700.0, "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "throttle": [],
           "ecc_dbe_volatile": 0, "ecc_dbe_aggregate": 0, "remap_uncorrectable": 0, "retired_pages_sbe": 0,
           "retired_pages_dbe": 0, "pcie_replay": 0}
    return _envelope("gpu", "sample", T + t, node, {"gpus": [gpu], "interval_s": 1.0})


def _step(t, node, r, **over):
    rank = r
    data = {"rank": rank, "step": t, "loss": 2.5 / (1 + 0.01 * t) + (40.0 if t in (55, 56) and rank == 1 else 0.0),
            "grad_norm": 1.0, "step_time_s": 0.95, "compute_s": 0.7}
    data.update(over)
    return _envelope("train", "step", T + t + 0.2, node, data, id=f"train.{rank}.{t}")


def _beat(t, node, **over):
    return _envelope("heartbeat", "beat", T + t + 0.5, node, {"seq": t, "pids": [1, 2], "sources": {"nvml": "ok"},
                                                              **over})


def _backlog():
    """Per topic (one partition each, as bench_floor's nodes share them), 60 s of two nodes, with
    malformed messages in the middle: not JSON, an implausible time, a step whose rank is text (the
    handler refuses it), a beat with a key nobody documents (read the general way, kept), an NVML
    sample whose whole reading refuses it (deferred: refused on release), a message over the limit."""
    by_topic = {topics.GPU: [], topics.TRAIN: [], topics.HEARTBEAT: []}
    for t in range(60):
        for n, node in enumerate(NODES):
            gpu = _gpu(t, node)
            if t == 20 and n == 0:
                gpu = gpu.replace(b'"temp_c":', b'"temp_c":"hot","x":', 1)
            by_topic[topics.GPU].append(gpu)
            for rank in (2 * n, 2 * n + 1):
                by_topic[topics.TRAIN].append(_step(t, node, rank, rank="1") if (t, rank) == (25, 3)
                                              else _step(t, node, rank))
            by_topic[topics.HEARTBEAT].append(_beat(t, node, extra=1) if t == 30 else _beat(t, node))
        if t == 10:
            by_topic[topics.TRAIN].append(b"{not json")
        if t == 15:
            by_topic[topics.HEARTBEAT].append(_envelope("heartbeat", "beat", 1e12, NODES[0], {"seq": 0}))
        if t == 40:
            by_topic[topics.TRAIN].append(b"x" * 5000)
    return by_topic


def _polls(by_topic, per_poll):
    tps = {topic: TopicPartition(topic, 0) for topic in by_topic}
    out = []
    for start in range(0, max(len(v) for v in by_topic.values()), per_poll):
        poll = {}
        for topic, raws in by_topic.items():
            chunk = raws[start:start + per_poll]
            if chunk:
                poll[tps[topic]] = [Message(topic, 0, start + i, b"k", raw, int((T + start + i) * 1000))
                                    for i, raw in enumerate(chunk)]
        out.append(poll)
    return list(tps.values()), out


def _topology():
    ranks = [{"rank": r, "node": NODES[r // 2], "tp": r % 2, "pp": 0, "dp": r // 2} for r in range(4)]
    event = decode(_envelope("job", "topology", T - 1, "-", {"tp": 2, "pp": 1, "dp": 2, "ranks": ranks,
                                                            "gpus_per_node": 2}))
    return Record(topics.JOBS, 0, 0, None, event, 0, event.ts)


def _run(polls, tps, *, typed: bool, runs: bool) -> list[tuple]:
    handler = NodeStageHandler()
    handler.member = "m"
    handler.handle([_topology()])
    runner = GroupRunner.__new__(GroupRunner)
    options = RunnerOptions.of(None, event_time=True, deferred_topics=DEFERRED_TOPICS, max_message_bytes=4096)
    GroupRunner.__init__(runner, None, "g", list(topics.TELEMETRY_TOPICS), handler,
                         TELEMETRY_DECODERS if typed else decode, producer=_NoProducer(), options=options)
    merge = runner.order.merge
    if not runs:  # the merge as it was: each record added, and each offset let go, alone
        merge.add_run = lambda p, offsets, times, items, wall, broker_ts: [
            WatermarkMerge.add(merge, p, o, ts, item, wall, broker_ts) for o, ts, item in zip(offsets, times, items, strict=True)]
        one_heap(merge)  # on one heap, each offset let go alone
    consumer = _Consumer(tps)
    runner.order.assigned(tps)
    outputs = []
    for i, poll in enumerate(polls):
        good, dead = runner.intake.split(poll)
        out = list(dead)
        runner._handle_into(runner._released(runner.order.ordered(consumer, good, drain=i == len(polls) - 1), out),
                            out)
        outputs += out
    outputs += handler.flush()
    return [_plain(o) for o in outputs]


def _plain(o) -> tuple:
    value = json.loads(o.value)
    if o.topic == topics.DEAD_LETTER:
        value.pop("ts")  # the wall time it was written
    if value.get("kind") == "bundle":
        value.pop("id")  # a bundle's own id is random
    return o.topic, o.key, o.partition, value


def test_a_poll_through_the_typed_readers_and_the_merge_by_runs_gives_what_one_at_a_time_gives():
    tps, polls = _polls(_backlog(), per_poll=45)
    now = _run(polls, tps, typed=True, runs=True)
    assert now == _run(polls, tps, typed=False, runs=False)
    dead = [o[3] for o in now if o[0] == topics.DEAD_LETTER]
    reasons = sorted(d["reason"].split(":")[0] for d in dead)
    assert reasons == ["invalid", "invalid", "invalid", "invalid", "oversized"], reasons
    assert any("data.rank" in d["reason"] for d in dead) and any("temp_c" in d["reason"] for d in dead)
    # every good record was handed on: each step and beat forwarded to the job stage, once
    forwarded = [e["id"] for o in now if o[3].get("kind") == "bundle" for e in o[3]["data"]["events"]]
    forwarded += [o[3]["id"] for o in now if o[0] == topics.SUMMARIES and o[3].get("kind") in ("step", "beat")]
    assert len(forwarded) == len(set(forwarded)) == 60 * 4 - 1 + 60 * 2
    kinds = {o[3].get("kind") for o in now if o[0] == topics.SUMMARIES}
    assert {"window", "finding"} <= kinds  # the loss spike of rank 1 at steps 55-56 (judged after 50 values of its series, standing once the next loss stays up), closed windows


def test_the_same_polls_one_record_a_partition_at_a_time_lose_nothing_either():
    """The batching of the polls themselves: 45 records a partition or one, the same dead letters
    and the same events handed on (bundles differ: they are per poll)."""
    tps, wide = _polls(_backlog(), per_poll=45)
    _, narrow = _polls(_backlog(), per_poll=1)
    a, b = _run(wide, tps, typed=True, runs=True), _run(narrow, tps, typed=True, runs=True)

    def handed_on(outputs):
        ids = [e["id"] for o in outputs if o[3].get("kind") == "bundle" for e in o[3]["data"]["events"]]
        ids += [o[3]["id"] for o in outputs if o[0] == topics.SUMMARIES and o[3].get("kind") in ("step", "beat")]
        return sorted(ids)

    assert sorted(str(o) for o in a if o[0] == topics.DEAD_LETTER) == sorted(str(o) for o in b if o[0] == topics.DEAD_LETTER)
    assert handed_on(a) == handed_on(b)
    findings = [o[3] for o in a if o[3].get("kind") == "finding"]
    assert findings == [o[3] for o in b if o[3].get("kind") == "finding"]
