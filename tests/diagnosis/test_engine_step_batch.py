"""A handled batch's plain steps taken in one loop (Engine.process_steps, issue 56) give what each
step through Engine.process gives, output for output, in the same order: held here on what leaves
that loop or raises inside it, where tests/diagnosis/test_engine_step_runs.py holds the usual run.
A rank reported from another node (the rank check), a second topology version (a swap: the rank
check by the book's time), a typed step with no rank (InvalidEvent raised by a step reader inside
the loop), a step a detector breaks on (an engine error inside the loop), a copy, a step placed by
the consumer, a job with no topology, and steps of two jobs interleaved."""

from __future__ import annotations

import random

import orjson
import pytest

from faultlens.diagnosis.edge.consumer import TELEMETRY_DECODERS, DiagnoseHandler
from faultlens.diagnosis.engine.core import Engine
from faultlens.diagnosis.engine.stages import NodeStage
from faultlens.events import topics
from faultlens.events.envelope import decode
from faultlens.events.topology import Topology
from faultlens.streams.runner.types import Record

T0 = 1_767_225_600.0
NODES = {"main": ("n1", "n2", "n3"), "side": ("s1", "s2", "s3")}
BROKEN = "s.main.4.70"  # a detector raises on it


def _raw(job: str, source: str, kind: str, ts: float, node: str, data: dict, event_id: str) -> bytes:
    return orjson.dumps(
        {"v": 1, "id": event_id, "ts": ts, "job": job, "node": node, "source": source, "kind": kind, "data": data}
    )


def _step(job: str, t: int, rank: int | None, node: str, ts: float, rng: random.Random, loss: float = 2.0) -> bytes:
    data = {"step": t, "loss": loss * (1 + 0.01 * rng.random()), "grad_norm": 1.0, "step_time_s": 1.0, "compute_s": 0.7}
    if rank is not None:
        data["rank"] = rank
    return _raw(job, "train", "step", ts, node, data, f"s.{job}.{rank}.{t}")


def _records(seed: int) -> list[Record]:
    rng = random.Random(seed)
    records = []
    for job in ("main",):  # "side" has no topology: every step of it is a rank-check finding
        topo = Topology.grid(list(NODES[job]), 2, 1, 3, 2).to_event(job, T0 - 1, event_id=f"topo.{job}")
        records.append(Record(topics.JOBS, 0, 0, None, topo, 0, topo.ts))
    messages: list[tuple[str, bytes, float | None]] = []
    for t in range(120):
        second = []
        for job, nodes in NODES.items():
            for n, node in enumerate(nodes):
                base = T0 + t + 0.01 * n
                for rank in (2 * n, 2 * n + 1):
                    where = nodes[(n + 1) % 3] if (job, t, rank) == ("main", 20, 0) else node  # reported elsewhere
                    skew = 5.0 if (job, t, rank) == ("main", 60, 3) else None
                    second.append((topics.TRAIN, _step(job, t, rank, where, base + 0.2 + 0.01 * rng.random(), rng), skew))
                second.append(
                    (
                        topics.HEARTBEAT,
                        _raw(job, "heartbeat", "beat", base + 0.5, node, {"seq": t, "pids": [1]}, f"h.{node}.{t}"),
                        None,
                    )
                )
        if t == 30:
            second.append((topics.TRAIN, _step("main", t, None, "n1", T0 + t + 0.3, rng), None))  # no rank
        if t == 50:
            second.append(second[3])  # a copy (at-least-once)
        rng.shuffle(second)
        messages += second
        if t == 80:  # n3 swapped for a standby (its ranks go on from it)
            swap = Topology.grid(["n1", "n2", "x3"], 2, 1, 3, 2).to_event("main", T0 + t + 0.9, event_id="topo.swap")
            messages.append(
                (
                    topics.JOBS,
                    orjson.dumps(
                        {
                            "v": 1,
                            "id": swap.id,
                            "ts": swap.ts,
                            "job": "main",
                            "node": swap.node,
                            "source": "job",
                            "kind": "topology",
                            "data": swap.data,
                        }
                    ),
                    None,
                )
            )
    for i, (topic, raw, skew) in enumerate(messages):
        value = TELEMETRY_DECODERS.get(topic, decode)(raw)
        at = value.ts + skew if skew is not None else value.ts
        records.append(Record(topic, 0, i, value.node.encode(), value, 0, at, skew, None, raw))
    return records


def _handled(records: list[Record], poll: int, runs: bool) -> tuple[list[tuple], Engine]:
    handler = DiagnoseHandler(Engine(), step_runs=runs)
    out = []
    for start in range(0, len(records), poll):
        out += handler.handle(records[start : start + poll])
        out += handler.tick(0.0)
    out += handler.flush()
    return [(o.topic, o.key, o.partition, _without_stamp(o.topic, o.value)) for o in out], handler.engine


def _without_stamp(topic: str, value: bytes) -> bytes:
    if topic != "dead-letter":
        return value
    body = orjson.loads(value)
    body.pop("ts", None)
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


@pytest.fixture
def broken_step(monkeypatch):
    observe_step = NodeStage.observe_step

    def breaks(self, event, step, out):
        if event.id == BROKEN:
            raise RuntimeError("a detector bug")
        observe_step(self, event, step, out)

    monkeypatch.setattr(NodeStage, "observe_step", breaks)


@pytest.mark.parametrize("poll", [1, 9, 500, 5000])
def test_steps_taken_in_one_loop_give_what_each_step_alone_gives(poll, broken_step):
    records = _records(58)
    alone, engine_alone = _handled(records, poll, runs=False)
    batched, engine = _handled(records, poll, runs=True)
    assert batched == alone
    assert engine.stats == engine_alone.stats
    # what the comparison covers: each of these happened (inside a run where the poll holds one)
    assert engine.stats["topology_mismatch"] > 1 and engine.stats["duplicates"] == 1
    dead = [orjson.loads(o[3])["reason"] for o in alone if o[0] == "dead-letter"]
    assert any("rank" in reason for reason in dead) and any("a detector bug" in reason for reason in dead), dead
    assert any(b'"fault":"clock_skew"' in o[3] for o in alone)


def test_the_loop_takes_the_steps():
    """The usual step does not leave it: the comparison above is of the loop, not of process()."""
    engine = Engine()
    handler = DiagnoseHandler(engine)
    records = _records(58)
    taken = []
    process_steps = engine.process_steps

    def counted(records, i, out):
        end = process_steps(records, i, out)
        taken.append(end - i)
        return end

    engine.process_steps = counted  # type: ignore[method-assign]
    handler.handle(records)
    steps = sum(1 for r in records if r.topic == topics.TRAIN)
    assert sum(taken) > 0.9 * steps
