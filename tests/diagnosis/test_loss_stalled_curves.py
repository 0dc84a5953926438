"""The stalled-loss detector on real loss curves (tests/fixtures/loss_curves/README.md): healthy
runs (warm-up, plateaus, schedules, convergence) stay quiet; runs stuck at chance or that never
learned are flagged while most of their steps are still ahead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from faultlens.diagnosis.loss_stalled import LossStalledDetector
from faultlens.diagnosis.rules.base import Finding
from faultlens.events.envelope import Envelope

CURVES = Path(__file__).resolve().parents[1] / "fixtures" / "loss_curves"
T0 = 1.7e9
# One pattern per log format: (step, loss, step time ms or None, grad norm or None).
FORMATS = (
    re.compile(r"^iter (?P<step>\d+): loss (?P<loss>[\d.]+), time (?P<ms>[\d.]+)ms"),
    re.compile(r"^step (?P<step>\d+), loss: (?P<loss>[\d.]+), norm: (?P<grad>[\d.]+), lr: \S+, time: (?P<ms>[\d.]+)ms"),
    re.compile(r"^step (?P<step>\d+) \| loss: (?P<loss>[\d.]+) \| dt: (?P<ms>[\d.]+)ms \| tok/sec: \S+ \| norm: (?P<grad>[\d.]+)"),
    re.compile(r"^step: (?P<step>\d+) loss: (?P<loss>[\d.]+)"),
)


def read_curve(name: str, step_s: float = 10.0) -> tuple[list[Envelope], int]:
    """A fixture as the `train` events a hook would have sent: (events, last step). Times are the
    log's own (its step time × the steps between lines), else ``step_s`` per step (the bench's)."""
    path = CURVES / name
    meta: dict[str, str] = {}
    events: list[Envelope] = []
    ts, last = T0, None
    lines = path.read_text().splitlines()
    rows: list[tuple[int, float, float | None, float | None]] = []
    checkpoints: list[int] = []
    for line in lines:
        if line.startswith("#"):
            key, _, value = line[1:].partition(":")
            meta[key.strip()] = value.strip()
        elif line.startswith("saving checkpoint"):
            checkpoints.append(rows[-1][0] if rows else 0)
        elif path.suffix == ".csv":
            if line[0].isdigit():
                step, loss, grad = line.split(",")
                rows.append((int(step), float(loss), None, float(grad)))
        else:
            for pattern in FORMATS:
                m = pattern.match(line)
                if m:
                    found = m.groupdict()
                    rows.append((int(found["step"]), float(found["loss"]),
                                 float(found["ms"]) / 1e3 if found.get("ms") else None,
                                 float(found["grad"]) if found.get("grad") else None))
                    break
    assert rows, f"{name}: no loss line parsed"
    classes = int(meta["classes"]) if "classes" in meta else None
    for step, loss, secs, grad in rows:
        gap = step - last if last is not None else 1
        # a log's first step carries the compile / startup time: not the run's pace
        ts += gap * (secs if secs is not None and last is not None and secs < 60 else step_s if secs is None else 1.0)
        data = {"rank": 0, "step": step, "loss": loss, "grad_norm": grad}
        if classes:
            data["classes"] = classes
        events.append(Envelope(ts=ts, job="j", node="n0", source="train", kind="step", data=data))
        if step in checkpoints:
            events.append(Envelope(ts=ts, job="j", node="n0", source="train", kind="checkpoint",
                                   data={"rank": 0, "step": step, "path": f"ckpt-{step}"}))
        last = step
    return events, rows[-1][0]


def replay(events: list[Envelope], detector: LossStalledDetector | None = None) -> list[Finding]:
    detector = detector or LossStalledDetector()
    return [f for e in events for f in detector.observe(e)]


@pytest.mark.parametrize("name", [
    "nanogpt_shakespeare_char.log",
    "gpt2_124m_s21_5000_steps.log",
    "gpt2_124m_shakespeare_forge.log",
    "poet_bench_adamw_lr0.01.csv",
])
def test_healthy_curves_stay_quiet(name):
    events, _ = read_curve(name)
    assert replay(events) == []


def test_healthy_curves_stay_quiet_under_a_short_window_too():
    # A window of 2 minutes judges the char-level run over ~16 logged points, its warm-up plateau
    # (2.41-2.52 over iters 50-150) among them: still learning, so still quiet.
    events, _ = read_curve("nanogpt_shakespeare_char.log")
    assert replay(events, LossStalledDetector(window_s=120.0)) == []


def test_adamw_at_lr_0_3_is_flagged_at_chance_with_most_of_its_steps_left():
    events, last = read_curve("poet_bench_adamw_lr0.3.csv")
    found = replay(events)
    assert len(found) == 1
    stalled = found[0]
    assert stalled.fault == "loss_stalled" and stalled.action == "alert" and stalled.nodes == ()
    assert "at chance, ln(16)" in stalled.detail
    step = next(e.data["step"] for e in events if e.id == stalled.evidence[0])
    assert step <= 0.4 * last, f"flagged at step {step} of {last}"


def test_without_the_class_count_it_is_still_flagged_as_never_learned():
    events, last = read_curve("poet_bench_adamw_lr0.3.csv")
    for e in events:
        e.data.pop("classes", None)
    found = replay(events)
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "has not fallen below its start" in found[0].detail


def test_poet_at_lr_0_3_is_flagged_above_chance_then_again_at_chance():
    events, last = read_curve("poet_bench_poet_lr0.3.csv")
    found = replay(events)
    assert found and all(f.fault == "loss_stalled" for f in found)
    assert "above chance" in found[0].detail
    assert "at chance" in found[-1].detail


def test_a_two_class_loss_stuck_at_ln_2_is_flagged():
    # The log covers 28 steps: judged over a window that short (20 steps at 1 s/step).
    events, _ = read_curve("tf_binary_stuck_ln2.log", step_s=1.0)
    found = replay(events, LossStalledDetector(window_s=20.0))
    assert len(found) == 1 and "ln(2)" in found[0].detail


def test_a_finding_names_the_rank_and_no_machine():
    events, _ = read_curve("poet_bench_adamw_lr0.3.csv")
    for e in events:
        e.data["rank"] = 3
    found = replay(events)
    assert found[0].ranks == (3,) and found[0].nodes == ()


def test_the_engine_raises_it_once_and_the_ladder_only_records_an_alert():
    from faultlens.diagnosis.engine import analyze
    from faultlens.remediation.ladder import JobLadder
    from faultlens.events.topology import Topology

    events, _ = read_curve("poet_bench_adamw_lr0.3.csv")
    events.insert(0, Topology.grid(["n0"], 1, 1, 1, 1).to_event("j", events[0].ts - 1))
    diagnoses = [d for d in analyze(events) if d.fault == "loss_stalled"]
    assert len(diagnoses) == 1 and diagnoses[0].action == "alert" and diagnoses[0].nodes == ()
    assert JobLadder("j").decide(diagnoses[0], ("n0",)).action is None
