"""The step readers' batch entry points (issue 56): a poll's run of `train`/`step` events handed to the
training and thermal rules and the feature windows at once (NodeStage.observe_steps, each reader's
observe_steps) must make exactly what observe_step makes of them one step at a time, in the same
order, and leave the same state. Held here on seeded steps of several nodes and ranks, cut into runs
of every length: gaps of several windows, steps out of order within a run (a straggler of a closed
window among them), loss spikes and NaNs, a node whose GPUs throttle between runs while a rank
slows down. And through the whole node-stage handler: its outputs with runs read at once are its
outputs with every step read alone, dead letters in a run included."""

from __future__ import annotations

import random

import orjson
import pytest

from faultlens.diagnosis.edge.consumer import TELEMETRY_DECODERS
from faultlens.diagnosis.engine.stages import NodeOutput, NodeStage
from faultlens.events import topics
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import TrainStep
from faultlens.streams.runner.types import Record
from tests.diagnosis.test_engine_steps import T0, _outputs, _raw

NODES = ("a1", "a2", "b1", "b2")


def _event(source: str, kind: str, ts: float, node: str, data: dict, event_id: str):
    topic = topics.TRAIN if source == "train" else topics.GPU
    return TELEMETRY_DECODERS[topic](_raw(source, kind, ts, node, data, event_id))


def _sample(ts: float, node: str, hot: bool, i: int):
    gpu = {"index": 0, "uuid": f"GPU-{node}", "util": 97.0, "temp_c": 95.0 if hot else 60.0, "power_w": 600.0,
           "power_limit_w": 700.0, "sm_clock_mhz": 1700 if hot else 1980, "sm_clock_max_mhz": 1980,
           "throttle": ["hw_thermal"] if hot else []}
    return _event("gpu", "sample", ts, node, {"gpus": [gpu], "interval_s": 1.0}, f"g.{node}.{i}")


def _stream(seed: int) -> list[tuple[str, list]]:
    """("steps", events) runs and ("sample", [event]) between them, in the order a poll hands them."""
    rng = random.Random(seed)
    out: list[tuple[str, list]] = []
    t, i = T0, 0
    run: list = []
    for tick in range(400):
        t += rng.choice((0.4, 1.0, 1.0, 2.5, 37.0 if rng.random() < 0.05 else 1.0))  # gaps of several windows
        nodes = rng.sample(NODES, rng.randint(1, len(NODES)))
        if tick in (200, 201) and "a1" not in nodes:
            nodes.append("a1")
        for node in nodes:
            base = NODES.index(node) * 3
            for rank in rng.sample(range(base, base + 3), 3):
                i += 1
                loss: object = 2.0 / (1 + 0.002 * tick) * (1 + 0.05 * rng.random())
                if rng.random() < 0.01 or (tick in (200, 201) and rank == 1):
                    loss = loss * 40  # a spike (standing where the next loss stays up)
                if rng.random() < 0.004:
                    loss = "nan"
                grad: object = "inf" if rng.random() < 0.004 else 1.0 + rng.random() * (30 if rng.random() < 0.01 else 0.2)
                slow = node == "a2" and rank == base + 1 and 150 <= tick < 260
                data = {"rank": rank, "step": tick, "loss": loss, "grad_norm": grad,
                        "step_time_s": rng.choice((None, 0.9 + 0.1 * rng.random())),
                        "compute_s": rng.choice((None, 0.7 * (1.5 if slow else 1.0) + 0.01 * rng.random())),
                        "classes": 1000}
                # out of order within a run: a step up to 12 s behind (a straggler of a closed window)
                ts = t - (rng.random() * 12 if rng.random() < 0.05 else 0.0) + 0.001 * rank
                run.append(_event("train", "step", ts, node, data, f"s.{i}"))
        if rng.random() < 0.3 or tick == 399:
            if run:
                out.append(("steps", run))
                run = []
            if rng.random() < 0.5:
                node = rng.choice(NODES)
                out.append(("sample", [_sample(t, node, node == "a2" and 140 <= tick < 270, i)]))
    return out


def _step_by_step(stream) -> tuple[list, list]:
    stage = NodeStage()
    made = []
    for what, events in stream:
        for event in events:
            out = NodeOutput()
            if what == "sample":
                stage.observe(event, out)
            else:
                stage.observe_step(event, typed(event, TrainStep), out)
            made.append((event.id, list(out.findings), list(out.windows)))
    return made, stage.flush()[1]


def _in_runs(stream, rng: random.Random) -> tuple[list, list]:
    stage = NodeStage()
    made = []
    for what, events in stream:
        if what == "sample":
            out = NodeOutput()
            stage.observe(events[0], out)
            made.append((events[0].id, list(out.findings), list(out.windows)))
            continue
        at = 0
        while at < len(events):  # the run cut into batches of every length, one step alone too
            batch = events[at:at + rng.choice((1, 2, 3, 7, 40, 500))]
            at += len(batch)
            read = stage.observe_steps(batch, [typed(e, TrainStep) for e in batch])
            assert read is not None
            findings, windows = read
            assert set(findings) | set(windows) <= set(range(len(batch)))
            made += [(e.id, findings.get(k, []), windows.get(k, [])) for k, e in enumerate(batch)]
    return made, stage.flush()[1]


@pytest.mark.parametrize("seed", [56, 3, 2026])
def test_a_run_through_the_readers_makes_what_one_step_at_a_time_makes(seed):
    stream = _stream(seed)
    one, left_one = _step_by_step(stream)
    runs, left_runs = _in_runs(stream, random.Random(seed))
    assert runs == one
    assert left_runs == left_one  # the same state after: the windows still open close the same
    found = [f for _, fs, _ in one for f in fs]
    # the run has what the readers must get right
    assert {f.fault for f in found} >= {"loss_spike", "nan_loss", "gpu_thermal"}, {f.fault for f in found}
    assert sum(len(ws) for _, _, ws in one) > 100


def test_a_run_with_a_step_without_a_rank_is_read_by_nobody():
    stage = NodeStage()
    events = [_event("train", "step", T0 + k, "a1", {"rank": 0 if k != 1 else None, "step": k, "loss": 1.0}, f"s{k}")
              for k in range(3)]
    assert stage.observe_steps(events, [typed(e, TrainStep) for e in events]) is None
    training = next(rule for rule in stage.rules if type(rule).__name__ == "TrainingRule")
    thermal = next(rule for rule in stage.rules if type(rule).__name__ == "ThermalRule")
    assert not stage.windows._acc and not training._series and not thermal._nodes  # nothing read


def _one_at_a_time(monkeypatch) -> None:
    monkeypatch.setattr(NodeStage, "observe_steps", lambda self, events, steps: None)


def test_the_handler_makes_of_runs_what_it_makes_of_each_step_alone(monkeypatch):
    for seed, poll in ((56, 500), (7, 61), (11, 2000)):
        in_runs = _outputs(seed, poll)
        with monkeypatch.context() as m:
            _one_at_a_time(m)
            alone = _outputs(seed, poll)
        assert in_runs == alone, (seed, poll)
        assert sum(b'"kind":"finding"' in o[3] for o in in_runs) > 5


def _handled(records: list[Record]) -> list[tuple]:
    from faultlens.diagnosis.edge.node_consumer import NodeStageHandler

    handler = NodeStageHandler()
    handler.member = "test"
    out = handler.handle(records) + handler.flush()
    # (a dead letter is stamped with the wall time it was written: left out)
    return [(o.topic, o.key, {**orjson.loads(o.value), "ts": None} if o.topic == topics.DEAD_LETTER else o.value)
            for o in out]


def test_a_dead_letter_in_a_run_keeps_its_place(monkeypatch):
    raws = []
    for k in range(12):
        data: dict = {"rank": k % 3, "step": k, "loss": 1.0 + 0.01 * k, "step_time_s": 1.0}
        if k == 4:
            data["rank"] = None  # refused by the training rule: the run is read step by step
        if k == 7:
            data["loss"] = {"not": "a number"}  # refused by the payload check
        raws.append(_raw("train", "step", T0 + 3 * k, "a1", data, f"s{k}"))
    def records() -> list[Record]:  # decoded afresh for each handler (a read caches the payload)
        values = [TELEMETRY_DECODERS[topics.TRAIN](raw) for raw in raws]
        return [Record(topics.TRAIN, 0, k, b"a1", v, 0, v.ts, None, None, raw) for k, (v, raw) in enumerate(zip(values, raws))]

    in_runs = _handled(records())
    with monkeypatch.context() as m:
        _one_at_a_time(m)
        alone = _handled(records())
    assert in_runs == alone
    dead = [v for t, _, v in in_runs if t == topics.DEAD_LETTER]
    assert len(dead) == 2 and len(in_runs) > 10, in_runs  # steps 4 and 7, in their places
