"""The node stage's step path (issue 56): a `train`/`step` handed to each reader with its payload read
once (NodeStage.observe_step, the training and thermal rules' and the windows' observe_step) must
make what the general path makes of it, event by event (NodeStage.observe: each reader reads the
payload itself). Held here on a seeded run through the whole handler, in polls, ranks of three
nodes interleaved: loss spikes, NaN losses and grad norms, grad-norm spikes the next step's loss
answers or does not, a rank reported from the wrong node, a node whose GPUs throttle while its
ranks slow down, windows closing on steps and on samples."""

from __future__ import annotations

import random
import re

import msgspec
import orjson

from faultlens.diagnosis.edge.consumer import TELEMETRY_DECODERS
from faultlens.diagnosis.edge.node_consumer import NodeStageHandler
from faultlens.diagnosis.engine.core import Engine
from faultlens.diagnosis.engine.stages import NodeOutput, NodeStage
from faultlens.events import topics
from faultlens.events.envelope import Envelope, decode
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import TrainStep
from faultlens.events.topics import telemetry_partition
from faultlens.streams.runner.types import Record

T0 = 1_767_225_600.0
NODES = ("n01", "n02", "n03")
RANKS = 4  # per node
_BUNDLE_ID = re.compile(rb'"id":"b\.[0-9a-f]{32}"')


def _raw(source: str, kind: str, ts: float, node: str, data: dict, event_id: str) -> bytes:
    return orjson.dumps(
        {"v": 1, "id": event_id, "ts": ts, "job": "llm", "node": node, "source": source, "kind": kind, "data": data}
    )


def _messages(seed: int) -> list[tuple[str, bytes]]:
    """(topic, bytes) in time order: 240 s of three nodes' steps, samples and beats."""
    rng = random.Random(seed)
    out: list[tuple[str, bytes]] = []
    for t in range(240):
        for n, node in enumerate(NODES):
            hot = n == 1 and 150 <= t < 200  # node 2's GPUs throttle, and its rank 5 slows down
            gpu = {
                "index": 0,
                "uuid": f"GPU-{n}",
                "util": 97.0,
                "temp_c": 93.0 if hot else 60.0 + rng.random(),
                "power_w": 640.0,
                "power_limit_w": 700.0,
                "sm_clock_mhz": 1700 if hot else 1980,
                "sm_clock_max_mhz": 1980,
                "throttle": ["hw_thermal"] if hot else [],
            }
            out.append((topics.GPU, _raw("gpu", "sample", T0 + t, node, {"gpus": [gpu], "interval_s": 1.0}, f"g.{node}.{t}")))
            ranks = list(range(n * RANKS, (n + 1) * RANKS))
            rng.shuffle(ranks)  # the ranks of a node report in any order
            for rank in ranks:
                loss = 2.5 / (1 + 0.01 * t) * (1 + 0.02 * rng.random())
                grad = 1.0 + 0.1 * rng.random()
                if (t, rank) in ((80, 1), (81, 1), (170, 9), (171, 9)):
                    loss *= 30  # a loss spike, standing once the next loss stays up
                if (t, rank) == (120, 2):
                    loss = "nan"
                if (t, rank) == (130, 10):
                    grad, loss = "inf", loss * 1000  # the model's: its loss blew up with it
                if (t, rank) == (140, 3):
                    grad = "inf"  # beside an ordinary loss: an fp16 loss scaler's skipped step, no NaN
                if (t, rank) in ((90, 6), (100, 7)):
                    grad *= 40  # a grad-norm spike: the next loss of rank 6 answers it, rank 7's does not
                if (t, rank) == (91, 6):
                    loss *= 20
                compute = 0.7 * (1.6 if hot and rank == 5 else 1.0)
                data = {
                    "rank": rank,
                    "step": t,
                    "loss": loss,
                    "grad_norm": grad,
                    "step_time_s": 0.95 + 0.01 * rng.random(),
                    "compute_s": compute,
                    "classes": 50_000,
                }
                reported_from = NODES[0] if (t, rank) == (60, 11) else node  # a rank on the wrong node
                out.append((topics.TRAIN, _raw("train", "step", T0 + t + 0.01 * rank, reported_from, data, f"s.{rank}.{t}")))
            out.append(
                (
                    topics.HEARTBEAT,
                    _raw(
                        "heartbeat",
                        "beat",
                        T0 + t + 0.5,
                        node,
                        {"seq": t, "pids": [1], "sources": {"nvml": "ok"}},
                        f"h.{node}.{t}",
                    ),
                )
            )
    return out


def _topology() -> Record:
    ranks = [
        {"rank": r, "node": NODES[r // RANKS], "tp": r % RANKS, "pp": 0, "dp": r // RANKS} for r in range(RANKS * len(NODES))
    ]
    event = decode(
        _raw(
            "job",
            "topology",
            T0 - 1,
            "-",
            {"tp": RANKS, "pp": 1, "dp": len(NODES), "ranks": ranks, "gpus_per_node": RANKS},
            "topo",
        )
    )
    return Record(topics.JOBS, 0, 0, None, event, 0, event.ts)


def _outputs(seed: int, poll: int) -> list[tuple]:
    """Everything the handler writes for the run, in polls of ``poll`` records (bundle ids aside)."""
    handler = NodeStageHandler()
    handler.member = "test"
    handler.watermarks(range(3))  # so the job clock's words go out too
    handler.handle([_topology()])
    records = []
    for i, (topic, raw) in enumerate(_messages(seed)):
        value = TELEMETRY_DECODERS[topic](raw)
        records.append(
            Record(topic, telemetry_partition(value.node), i, value.node.encode(), value, 0, value.ts, None, None, raw)
        )
    out = []
    for start in range(0, len(records), poll):
        out += handler.handle(records[start : start + poll])
    out += handler.flush()
    return [(o.topic, o.key, o.partition, _BUNDLE_ID.sub(b'"id":"b"', o.value)) for o in out]


def _one_at_a_time(monkeypatch) -> None:
    """Every step through NodeStage.observe, as any other event."""

    def general(self: NodeStage, event: Envelope, step: object, out: NodeOutput) -> None:
        self.observe(event, out)

    monkeypatch.setattr(NodeStage, "observe_step", general)


def _findings(outputs: list[tuple]) -> list[dict]:
    found = []
    for topic, _, _, value in outputs:
        event = orjson.loads(value)
        if topic == topics.SUMMARIES and event["kind"] == "finding":
            found.append(event["data"])
    return found


def test_the_run_has_what_the_step_path_must_get_right():
    outputs = _outputs(56, 500)
    found = _findings(outputs)
    spikes = [f for f in found if f["fault"] == "loss_spike"]
    assert {tuple(f["ranks"]) for f in spikes} == {(1,), (6,), (9,)}  # rank 7's loss did not answer
    assert any(len(f["evidence"]) == 2 for f in spikes)  # rank 6's grad norm, answered by its next loss
    assert {tuple(f["ranks"]) for f in found if f["fault"] == "nan_loss"} == {(2,), (10,)}  # not 3's skipped step
    assert any(f["entity"] == "rank-placement" for f in found)
    assert [f["ranks"] for f in found if f["fault"] == "gpu_thermal"] == [[5]]  # throttled, and its rank slowed
    windows = [orjson.loads(value) for topic, _, _, value in outputs if b'"kind":"window"' in value]
    assert len(windows) == 240 // 10 * len(NODES)
    for w in windows:  # a window's first events are its evidence; it names the ranks whose steps it holds
        assert len(w["data"]["evidence"]) == 4 and w["data"]["samples"] == 10, w
        node = NODES.index(w["node"])
        assert set(w["data"]["ranks"]) >= set(range(node * RANKS, (node + 1) * RANKS)), w
        slowed = node == 1 and 150 <= w["data"]["start"] - T0 < 200
        assert abs(w["data"]["features"]["compute_s"] - (1.12 if slowed else 0.7)) < 1e-9, w


def test_the_step_path_makes_what_the_general_path_makes(monkeypatch):
    for seed, poll in ((56, 500), (7, 61), (11, 2000)):
        fused = _outputs(seed, poll)
        with monkeypatch.context() as m:
            _one_at_a_time(m)
            general = _outputs(seed, poll)
        assert fused == general, (seed, poll)
        assert sum(b'"kind":"window"' in o[3] for o in fused) > 50


def test_a_rule_of_steps_without_a_step_method_is_run_the_general_way():
    class Counting:
        sources = frozenset({"train"})
        seen = 0

        def observe(self, event: Envelope) -> list:
            Counting.seen += 1
            return []

        def tick(self, now: float) -> list:
            return []

    stage = NodeStage(rules=[*NodeStage().rules, Counting()])
    event = TELEMETRY_DECODERS[topics.TRAIN](_raw("train", "step", T0, "n01", {"rank": 0, "step": 1, "loss": 2.0}, "s"))
    out = NodeOutput()
    stage.observe_step(event, typed(event, TrainStep), out)
    assert Counting.seen == 1 and out.forward == [event]


def _diagnoses(seed: int) -> list[bytes]:
    """What one engine (`diagnose --stage all`, `faultlens analyze`) diagnoses of the run."""
    engine = Engine()
    engine.process(_topology().value)
    out = []
    for topic, raw in _messages(seed):
        out += engine.process(TELEMETRY_DECODERS[topic](raw))
    out += engine.flush()
    return [msgspec.json.encode(d) for d in out]


def test_the_engine_step_path_diagnoses_what_the_general_path_diagnoses(monkeypatch):
    fused = _diagnoses(56)
    with monkeypatch.context() as m:
        _one_at_a_time(m)
        general = _diagnoses(56)
    assert fused == general
    assert {b"loss_spike", b"nan_loss", b"gpu_thermal"} <= {f for d in fused for f in re.findall(rb'"fault":"(\w+)"', d)}
