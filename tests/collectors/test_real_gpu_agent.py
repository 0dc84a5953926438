"""What `faultlens collect` published on a real H100 with the per-call NVML deadline (issue 39) while a
CUDA trainer, a world-size-1 NCCL job and a real NCCL watchdog timeout ran beside it
(tests/fixtures/real_gpu/gpu40/agent_events.jsonl: every record of the job as the broker held it;
docs/real_gpu.md "2026-11-26")."""

from __future__ import annotations

import functools
import json
from itertools import pairwise
from pathlib import Path

from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.replay.scoring import is_scored
from faultlens.diagnosis.stacks.flight_recorder import load_recorder
from faultlens.diagnosis.stacks.stack_dump import parse_dump, training_thread
from faultlens.events.envelope import Envelope, decode
from faultlens.events.payloads import check_payload

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real_gpu" / "gpu40"


@functools.lru_cache(maxsize=None)
def records() -> tuple[tuple[str, Envelope], ...]:
    out = []
    for line in (FIXTURES / "agent_events.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out.append((rec["topic"], decode(rec["value"])))
    return tuple(out)


def of(source: str, kind: str | None = None) -> list[Envelope]:
    return [e for _, e in records() if e.source == source and (kind is None or e.kind == kind)]


def test_every_record_is_a_valid_event_on_its_topic():
    assert len(records()) > 100
    for topic, event in records():
        check_payload(event)
        assert topic == f"telemetry.{'stacks' if event.source == 'stack' else event.source}"
        assert event.job == "gpu40" and event.node == "h100"


def test_one_sample_a_second_and_no_false_gpu_event_on_a_healthy_gpu():
    samples = of("gpu", "sample")
    assert 70 <= len(samples) <= 76  # 75 s at 1 s
    gaps = [b.ts - a.ts for a, b in pairwise(samples)]
    assert max(gaps) < 1.5 and all(len(e.data["gpus"]) == 1 for e in samples)
    assert {e.kind for e in of("gpu")} == {"sample"}  # no xid, unresponsive, responsive or lost


def test_the_heartbeats_see_a_healthy_sampler_and_nothing_blind():
    beats = of("heartbeat", "beat")
    assert len(beats) >= 15
    for beat in beats:
        nvml = beat.data["health"]["nvml"]
        assert nvml["state"] == "ok" and nvml["unresponsive"] == {} and nvml["abandoned_calls"] == 0
        assert nvml["lag_s"] < 1.0 and beat.data["health"]["blind"] == []
        assert beat.data["sources"]["nvml"] == "ok"
    assert beats[-1].data["pids"] == [656]  # the trainer, found by --proc-pattern


def test_the_xid_watcher_registered_and_no_call_missed_its_deadline():
    log = (FIXTURES / "collect.stderr.log").read_text()
    assert "NVML Xid events: watching 1 of 1 GPU(s)" in log
    assert "did not return within" not in log and "no Xid events" not in log


def test_a_healthy_run_diagnoses_nothing_but_the_induced_nccl_timeout():
    events = sorted((e for _, e in records() if e.source != "nccl"), key=lambda e: e.ts)
    assert [d for d in analyze(events) if is_scored(d) or d.action not in ("none",)] == []
    timeouts = of("nccl", "nccl_timeout")  # the real watchdog timeout, read from the followed log
    assert {(e.data["rank"], e.data["seq"], e.data["op"]) for e in timeouts} == {(0, 2, "ALLREDUCE")}


def test_the_capture_answered_with_real_stacks_from_the_agent_and_the_hook():
    dumps = {e.data.get("tool"): e for e in of("stack", "stack_dump")}
    assert set(dumps) == {"py-spy", "faulthandler"} and dumps["py-spy"].data["ok"]
    main = training_thread(parse_dump(dumps["py-spy"].data["dump"]))
    assert main.name == "MainThread" and main.thread_id == "656"
    handler_main = training_thread(parse_dump(dumps["faulthandler"].data["dump"]))  # the hook's own dump
    assert handler_main.is_main and handler_main.frames[0].key == ("main", "reference_trainer.py")
    # Sent by the hook before it read NCCL's recorder: the CPU recorder, no matchable collective.
    [rec] = of("stack", "recorder_dump")
    assert rec.data["entries"] == 4 and load_recorder(rec.data["dump"]).collectives == ()
