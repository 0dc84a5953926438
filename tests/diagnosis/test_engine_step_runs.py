"""The job stage's runs of steps (issue 56): a handled batch's plain steps of a job reach the job
stage as runs (Engine.process(..., hold=True), JobStage.observe_steps), and must give what every
step's job side taken alone gives (Engine.process without hold), output for output, in the same
order. Held here on seeded runs through `diagnose --stage all`'s handler, the split job stage's
handler (reading what the node stage passed on) and `faultlens analyze`, in polls of 1 to 2,000
records: two jobs interleaved, ranks in any order, steps late and out of order (one past the
lateness bound), a rank that stops, a node that dies, a NaN loss, a node whose clock runs behind, a
loss whose gradient norm goes to zero, records the consumer placed itself, a bad record, a copy,
and a hang (every rank stops while the beats go on, then steps again)."""

from __future__ import annotations

import random
import re

import msgspec
import orjson
import pytest

from faultlens.diagnosis.edge.consumer import TELEMETRY_DECODERS, DiagnoseHandler
from faultlens.diagnosis.edge.node_consumer import NodeStageHandler
from faultlens.diagnosis.engine.config import EngineConfig
from faultlens.diagnosis.engine.core import Engine
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.engine.stages import JobStage
from faultlens.events import topics
from faultlens.events.bundle import Bundle, decode_bundled
from faultlens.events.envelope import decode
from faultlens.events.topics import telemetry_partition
from faultlens.streams.runner.types import Record

T0 = 1_767_225_600.0
SECONDS = 340
JOBS = {"llm": ("n01", "n02", "n03", "n04"), "aux": ("a01", "a02")}
RANKS = {"llm": 4, "aux": 2}  # per node
BEHIND = "n04"  # its clock runs 20 s behind its peers'
HANG = (180, 270)  # no rank of llm steps, its beats go on
_BUNDLE_ID = re.compile(rb'"id":"b\.[0-9a-f]{32}"')


def _raw(job: str, source: str, kind: str, ts: float, node: str, data: dict, event_id: str) -> bytes:
    return orjson.dumps(
        {"v": 1, "id": event_id, "ts": ts, "job": job, "node": node, "source": source, "kind": kind, "data": data}
    )


def _topologies() -> list[bytes]:
    out = []
    for job, nodes in JOBS.items():
        per = RANKS[job]
        ranks = [{"rank": r, "node": nodes[r // per], "tp": r % per, "pp": 0, "dp": r // per} for r in range(per * len(nodes))]
        out.append(
            _raw(
                job,
                "job",
                "topology",
                T0 - 1,
                "-",
                {"tp": per, "pp": 1, "dp": len(nodes), "ranks": ranks, "gpus_per_node": per},
                f"topo.{job}",
            )
        )
    return out


def _step(job: str, t: int, rank: int, node: str, ts: float, rng: random.Random) -> bytes:
    loss: float | str = 2.5 / (1 + 0.01 * t) * (1 + 0.02 * rng.random())
    grad: float | str = 1.0 + 0.1 * rng.random()
    if (job, t, rank) == ("llm", 50, 3):
        loss = "nan"
    if job == "aux" and rank == 0 and t >= 40:
        grad = 0.0  # the weights no longer move: a stalled loss, found on a step in the middle of a run
    data = {
        "rank": rank,
        "step": t,
        "loss": loss,
        "grad_norm": grad,
        "step_time_s": 0.95 + 0.01 * rng.random(),
        "compute_s": 0.7,
        "classes": 1000,
    }
    return _raw(job, "train", "step", ts, node, data, f"s.{job}.{rank}.{t}")


def _messages(seed: int) -> list[tuple[str, bytes, float | None]]:
    """(topic, bytes, skew_s) in the order a consumer hands them over."""
    rng = random.Random(seed)
    out: list[tuple[str, bytes, float | None]] = []
    held_back: list[tuple[str, bytes, float | None]] = []
    for t in range(SECONDS):
        second: list[tuple[str, bytes, float | None]] = []
        for job, nodes in JOBS.items():
            for n, node in enumerate(nodes):
                if node == "n03" and t >= 300:
                    continue  # the machine died
                behind = 20.0 if node == BEHIND else 0.0
                base = T0 + t + 0.003 * n + (0.5 if job == "aux" else 0.0) - behind
                gpu = {
                    "index": 0,
                    "uuid": f"GPU-{node}",
                    "util": 97.0,
                    "temp_c": 60.0 + rng.random(),
                    "power_w": 640.0,
                    "power_limit_w": 700.0,
                    "sm_clock_mhz": 1980,
                    "sm_clock_max_mhz": 1980,
                    "throttle": [],
                }
                second.append(
                    (
                        topics.GPU,
                        _raw(job, "gpu", "sample", base, node, {"gpus": [gpu], "interval_s": 1.0}, f"g.{node}.{t}"),
                        None,
                    )
                )
                for rank in range(n * RANKS[job], (n + 1) * RANKS[job]):
                    if job == "llm" and (HANG[0] <= t < HANG[1] or (rank == 5 and t >= 120)):
                        continue  # the hang; rank 5 stops for good
                    skew = 7.0 if job == "aux" and t % 50 == 0 and rank == 1 else None  # placed by the consumer
                    second.append((topics.TRAIN, _step(job, t, rank, node, base + 0.2 + 0.01 * rng.random(), rng), skew))
                second.append(
                    (
                        topics.HEARTBEAT,
                        _raw(
                            job,
                            "heartbeat",
                            "beat",
                            base + 0.5,
                            node,
                            {"seq": t, "pids": [1], "sources": {"nvml": "ok"}},
                            f"h.{node}.{t}",
                        ),
                        None,
                    )
                )
        second.sort(key=lambda m: orjson.loads(m[1])["ts"] + rng.random() * 0.3)  # jobs and ranks interleaved
        for m in second:
            if m[0] == topics.TRAIN and rng.random() < 0.02:
                held_back.append(m)  # comes a few records late, after later steps
            else:
                out.append(m)
                if held_back and rng.random() < 0.3:
                    out.append(held_back.pop(0))
        if t == 30:
            out.append((topics.TRAIN, _step("llm", 0, 2, "n01", T0 - 1000.0, rng), None))  # past the lateness bound
            out.append(
                (
                    topics.TRAIN,
                    _raw("llm", "train", "step", T0 + t + 0.4, "n02", {"rank": 4, "step": "x", "loss": 1.0}, "bad"),
                    None,
                )
            )  # a dead letter
            out.append(out[-3])  # a copy (at-least-once)
    return out + held_back


def _records(seed: int) -> list[Record]:
    records = []
    for i, raw in enumerate(_topologies()):
        event = decode(raw)
        records.append(Record(topics.JOBS, 0, i, None, event, 0, event.ts))
    for i, (topic, raw, skew) in enumerate(_messages(seed)):
        try:
            value = TELEMETRY_DECODERS[topic](raw)
        except Exception:  # noqa: BLE001 - the bad record: the engine's payload check rejects it
            value = decode(raw)
        at = value.ts + skew if skew is not None else value.ts
        records.append(Record(topic, telemetry_partition(value.node), i, value.node.encode(), value, 0, at, skew, None, raw))
    return records


def _handled(handler: DiagnoseHandler, records: list[Record], poll: int) -> list[tuple]:
    out = []
    for start in range(0, len(records), poll):
        out += handler.handle(records[start : start + poll])
        out += handler.tick(0.0)  # a wall clock that never moves a job's time: only its order is held
    out += handler.flush()
    return [(o.topic, o.key, o.partition, _dead_letter(o.topic, o.value)) for o in out]


def _dead_letter(topic: str, value: bytes) -> bytes:
    if topic != "dead-letter":
        return value
    body = orjson.loads(value)
    body.pop("ts", None)  # its wall-clock stamp
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def _stage_all(seed: int, poll: int, runs: bool) -> list[tuple]:
    return _handled(DiagnoseHandler(Engine(), step_runs=runs), _records(seed), poll)


def _forwarded(seed: int) -> list[Record]:
    """What the node stage passes on to the job stage (`summaries`), unbundled as its runner does."""
    node = NodeStageHandler()
    node.member = "test"
    records = _records(seed)
    out = [o for start in range(0, len(records), 500) for o in node.handle(records[start : start + 500])] + node.flush()
    forwarded = [r for r in records if r.topic == topics.JOBS]
    for o in out:
        if o.topic != topics.SUMMARIES:
            continue
        value = decode_bundled(o.value)
        for event in value.events if isinstance(value, Bundle) else (value,):
            forwarded.append(Record(topics.SUMMARIES, 0, len(forwarded), o.key, event, 0, event.ts))
    return forwarded


def _stage_job(forwarded: list[Record], poll: int, runs: bool) -> list[tuple]:
    return _handled(DiagnoseHandler(Engine(EngineConfig(stage="job")), step_runs=runs), forwarded, poll)


def _analyzed(seed: int, runs: bool) -> list[bytes]:
    events = [r.value for r in _records(seed)]
    if runs:
        return [msgspec.json.encode(d) for d in analyze(events)]
    engine = Engine()
    latest = {}
    for event in events:
        try:
            found = engine.process(event)
        except Exception:  # noqa: BLE001 - the bad record
            continue
        latest.update((d.id, d) for d in found)
    latest.update((d.id, d) for d in engine.flush())
    return [msgspec.json.encode(d) for d in latest.values()]


def _faults(outputs: list[tuple]) -> set[str]:
    return {m.decode() for o in outputs for m in re.findall(rb'"fault":"(\w+)"', o[3])}


def test_the_run_has_what_runs_of_steps_must_get_right():
    outputs = _stage_all(56, 500, runs=False)
    found = [orjson.loads(o[3]) for o in outputs if o[0] == topics.DIAGNOSES]
    faults = {d["fault"] for d in found}
    assert {"nan_loss", "clock_skew", "loss_stalled", "job_hang", "node_silent"} <= faults, faults
    assert any(d["fault"] == "node_silent" and d["nodes"] == ["n03"] for d in found)
    assert any(d["fault"] == "job_hang" and d["action"] == "capture_stacks" for d in found)
    assert any(d["fault"] == "clock_skew" and d["nodes"] == [BEHIND] for d in found)
    assert any(d["fault"] == "clock_skew" and d["nodes"] == ["a01"] for d in found)  # placed by the consumer
    assert [o for o in outputs if o[0] == "dead-letter"]


@pytest.mark.parametrize(("seed", "polls"), [(56, (1, 2000)), (7, (61,)), (11, (500,))])
def test_stage_all_runs_of_steps_diagnose_what_steps_one_by_one_diagnose(seed, polls):
    for poll in polls:
        alone = _stage_all(seed, poll, runs=False)
        assert _stage_all(seed, poll, runs=True) == alone, (seed, poll)
        assert {"job_hang", "node_silent", "loss_stalled"} <= _faults(alone)


def test_the_job_stage_takes_forwarded_steps_as_runs_with_the_same_diagnoses():
    for seed, polls in ((56, (1, 2000)),):
        forwarded = _forwarded(seed)
        for poll in polls:
            alone = _stage_job(forwarded, poll, runs=False)
            assert _stage_job(forwarded, poll, runs=True) == alone, (seed, poll)
            assert {"job_hang", "node_silent"} <= _faults(alone)


def test_analyze_takes_runs_of_steps_with_the_same_diagnoses():
    for seed in (56, 3):
        assert _analyzed(seed, runs=True) == _analyzed(seed, runs=False), seed


def test_a_broken_run_is_told(monkeypatch):
    """The comparison sees the runs: a run whose steps are taken in reverse, or whose last step is
    taken with the next run, gives other diagnoses."""
    alone = _stage_all(56, 2000, runs=False)
    real = JobStage.observe_steps
    with monkeypatch.context() as m:
        m.setattr(JobStage, "observe_steps", lambda self, events, settle: real(self, events[::-1], settle))
        assert _stage_all(56, 2000, runs=True) != alone
    take = Engine._take_held

    def carried_over(self: Engine) -> None:
        last = self._held.pop() if len(self._held) > 1 else None
        lane = self._held_lane
        take(self)
        if last is not None:
            self._held, self._held_lane = [last], lane

    with monkeypatch.context() as m:
        m.setattr(Engine, "_take_held", carried_over)
        assert _stage_all(56, 2000, runs=True) != alone
