"""Small simulated traces for the replay tests: one planned fault on a 4-node job, recorded
closed-loop (the simulated agents answer the engine's capture requests, as on a live cluster),
then run through the engine exactly as `faultlens analyze` would (via a Parquet trace file)."""

from __future__ import annotations

from pathlib import Path

# What a live consumer must agree with the offline engine on (re-exported for the stage tests).
from bench.testbed.backlog_split import acting  # noqa: F401
from faultlens.closed_loop import ClosedLoop
from faultlens.diagnosis.engine.offline import analyze_trace
from faultlens.diagnosis.replay.scoring import is_scored
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.trace import labels_path, write_labels, write_trace
from faultlens.simulator.config import SimConfig
from faultlens.simulator.plan import FaultPlan
from faultlens.simulator.run import simulate


def replay(tmp: Path, plan: FaultPlan, *, nodes: int = 4, gpus: int = 4, seed: int = 3, noise: bool = True,
           duration: float | None = None) -> tuple[list[Diagnosis], list[dict], float]:
    """(diagnoses, labels, trace start) for one simulated run written to and read from disk.

    The diagnoses are the scored ones plus requests for stacks (a suspicion is part of what a
    hang or fail-slow replay must show); record-only and ``unknown`` ones are left out."""
    run = simulate(SimConfig(nodes=nodes, gpus=gpus, seed=seed, noise=noise), plan, duration=duration)
    path = tmp / "trace.parquet"
    write_trace(path, ClosedLoop(run).events())
    write_labels(labels_path(path), run.labels)
    found, _ = analyze_trace(path)
    return [d for d in found if is_scored(d) or d.action == "capture_stacks"], run.labels, run.config.start_ts


# Three faults a streaming consumer must get right whatever order it reads partitions in: an
# explicit one, a repeated one, and a hang that spans a restart.
THREE_FAULTS = (FaultPlan().fail_at("gpu_lost", node="n001", t=60).fail_at("nic", node="n002", t=200)
                .fail_at("job_hang", node="n003", t=420))


def offline_trace(tmp: Path, job: str, plan: FaultPlan = THREE_FAULTS, *, seed: int = 9, nodes: int = 6,
                  gpus: int = 4, name: str = "trace.parquet") -> tuple[Path, list[Diagnosis], float]:
    """(trace path, what `faultlens analyze` finds in it, trace start) for an open-loop simulated
    run of ``job``: the reference the live consumers are compared with."""
    run = simulate(SimConfig(nodes=nodes, gpus=gpus, seed=seed, job=job), plan)
    path = tmp / name
    write_trace(path, run.events())
    found, _ = analyze_trace(path)
    return path, found, run.config.start_ts

