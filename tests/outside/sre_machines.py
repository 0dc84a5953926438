"""Round 3's machines and steps (tests/outside/sre_shapes.py): what one node agent sends over its
life (beats, GPU, net and host samples; its lifetime, clock error, idle GPUs and downed port), and
every rank's `train/step`. Written from docs/events.md alone; the samples are round 1's
(tests/outside/job_shape.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tests.outside.job_shape import COMPUTE_S, GPUS, STEP_S, Job, Trace, gpu_entry, host_sample, loss_at, net_port

LENGTH = 900.0  # round 3's traces: 15 minutes
FIRST_STEP = 30_000
TOKENS = 131_072


@dataclass
class Life:
    """One machine's agent over the trace: when it beats, what it lists, how its clock is off."""

    start: float = 0.0
    end: float | None = None  # its last beat (None: the trace's end)
    pids_until: float | None = None  # its trainers exit then: beats list no process after
    pids_from: float = 0.0  # its trainers start then (a spare joins the job): no process listed before
    stopping: bool = False  # its last beat says the agent was stopped on purpose
    skew: float = 0.0  # added to every stamp it writes (its clock's error)
    idle: list[tuple[float, float]] = field(default_factory=list)  # its GPUs wait (util ~0) inside these
    port_down: list[tuple[float, float]] = field(default_factory=list)  # its fabric port is down inside these


def _inside(t: float, spans: list[tuple[float, float]]) -> bool:
    return any(a <= t < b for a, b in spans)


def machine(trace: Trace, job: str, node: str, index: int, base: float, life: Life, length: float = LENGTH) -> None:
    """What one node agent sends: a beat every 5 s, GPU and net samples every 10 s, host every 30 s."""
    rng = trace.rng
    pids = [41_000 + 10 * index + g for g in range(GPUS)]
    end = min(length, life.end if life.end is not None else length)
    t = life.start + 0.37 * index % 5.0
    seq = 0
    while t < end:
        ts = base + t + life.skew
        seq += 1
        last = t + 5.0 >= end and life.end is not None
        running = t >= life.pids_from and (life.pids_until is None or t < life.pids_until)
        beat: dict = {
            "seq": seq,
            "pids": pids if running else [],
            "sources": {"nvml": "ok", "kernel": "ok", "nccl": "ok", "net": "ok"},
        }
        if last and life.stopping:
            beat["stopping"] = True
        trace.emit(ts, job, node, "heartbeat", "beat", beat)
        if seq % 2 == 1:
            gpus = [gpu_entry(rng, node, g) for g in range(GPUS)]
            if _inside(t, life.idle):
                for g in gpus:
                    g.update(util=0.0, power_w=round(rng.gauss(95.0, 4.0), 1), sm_clock_mhz=1980)
            trace.emit(ts + 0.2, job, node, "gpu", "sample", {"gpus": gpus, "interval_s": 10.0})
            down = _inside(t, life.port_down)
            downed = sum(1 for a, _ in life.port_down if t - 10.0 <= a < t)
            trace.emit(
                ts + 0.4,
                job,
                node,
                "net",
                "sample",
                {"interval_s": 10.0 if seq > 1 else 0.0, "ports": [net_port("DOWN" if down else "ACTIVE", downed)]},
            )
        if seq % 6 == 1:
            trace.emit(ts + 0.6, job, node, "host", "sample", host_sample(rng))
        t += 5.0


ComputeOf = Callable[[dict, float], float]  # (rank placement, t) → that rank's compute seconds in the step


@dataclass
class Steps:
    """A stretch of training: steps from ``first`` at ``start`` until ``end``, resumed at ``step``."""

    start: float
    end: float
    step: int = FIRST_STEP
    compute: ComputeOf = lambda r, t: COMPUTE_S  # noqa: E731
    pauses: list[tuple[float, float]] = field(default_factory=list)  # no step ends inside these
    skew: dict[str, float] = field(default_factory=dict)  # node → its clock's error


def steps(trace: Trace, job: Job, base: float, run: Steps) -> int:
    """Every rank's `train/step` at the end of each step; returns the last step number."""
    rng = trace.rng
    step, t = run.step, run.start + 1.0
    while True:
        computes = {r["rank"]: run.compute(r, t) * rng.uniform(0.98, 1.02) for r in job.ranks}
        step_time = max(computes.values()) + (STEP_S - COMPUTE_S) * rng.uniform(0.95, 1.05)
        t += step_time
        while _inside(t, run.pauses):
            t += STEP_S
        if t >= run.end:
            return step
        step += 1
        loss, grad = loss_at(step, rng), round(rng.gauss(0.31, 0.015), 4)
        for r in job.ranks:
            trace.emit(
                base + t + 0.002 * r["rank"] + run.skew.get(r["node"], 0.0),
                job.name,
                r["node"],
                "train",
                "step",
                {
                    "rank": r["rank"],
                    "step": step,
                    "loss": loss,
                    "grad_norm": grad,
                    "step_time_s": round(step_time, 4),
                    "tokens": TOKENS,
                    "tokens_per_s": round(TOKENS / step_time, 1),
                    "mfu": round(0.41 * STEP_S / step_time, 4),
                    "compute_s": round(computes[r["rank"]], 4),
                },
            )
