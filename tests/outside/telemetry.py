"""A job's ordinary telemetry over a stretch of time, with the knobs the outside check's faults turn.

What a node agent and a trainer hook would send, as docs/events.md lists it: a `gpu`/`sample` per
machine every 10 s (`interval_s` 10), a `heartbeat`/`beat` every 5 s, a `net`/`sample` every 10 s,
a `host`/`sample` every 30 s, and a `train`/`step` from every rank at the end of each step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.outside.job_shape import COMPUTE_S, GPUS, STEP_S, Job, Trace, gpu_entry, host_sample, loss_at, net_port

FIRST_STEP = 12_000
TOKENS_PER_RANK = 131_072    # global batch 2,048 x 4,096 tokens over 64 ranks


@dataclass
class Knobs:
    """How the job departs from health; every time is seconds after the trace's start."""

    quiet_from: float | None = None              # nothing of the job is sent from then on
    steps_stop: float | None = None              # no step ends after this (a hang, a crash)
    pauses: list[tuple[float, float]] = field(default_factory=list)  # no step ends inside these
    slow_node: str | None = None                 # its ranks compute `slow_factor` times longer
    slow_from: float = 0.0
    slow_factor: float = 1.3
    nan_from: float | None = None                # loss and grad norm non-finite from then on
    trainers_exit: float | None = None           # heartbeats list no training process after this
    lost_gpu: tuple[str, int, float] | None = None   # (node, index, t): the GPU leaves the samples
    port_down: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


def _inside(t: float, spans: list[tuple[float, float]]) -> bool:
    return any(a <= t < b for a, b in spans)


def _alive(knobs: Knobs, t: float) -> bool:
    return knobs.quiet_from is None or t < knobs.quiet_from


def write_job(trace: Trace, job: Job, base: float, length: float, knobs: Knobs) -> None:
    trace.emit(base, job.name, "-", "job", "topology", job.topology())
    _machines(trace, job, base, length, knobs)
    _steps(trace, job, base, length, knobs)


def _machines(trace: Trace, job: Job, base: float, length: float, knobs: Knobs) -> None:
    rng = trace.rng
    for n, node in enumerate(job.nodes):
        pids = [41_000 + 10 * n + g for g in range(GPUS)]
        offset = 0.37 * n % 5.0         # each agent beats from its own start
        seq = 0
        t = offset
        while t < length and _alive(knobs, t):
            ts = base + t
            seq += 1
            exited = knobs.trainers_exit is not None and t >= knobs.trainers_exit
            trace.emit(ts, job.name, node, "heartbeat", "beat",
                       {"seq": seq, "pids": [] if exited else pids,
                        "sources": {"nvml": "ok", "kernel": "ok", "nccl": "ok", "net": "ok"}})
            if seq % 2 == 1:
                lost = knobs.lost_gpu
                gpus = [gpu_entry(rng, node, g) for g in range(GPUS)
                        if not (lost and lost[0] == node and lost[1] == g and t >= lost[2])]
                trace.emit(ts + 0.2, job.name, node, "gpu", "sample", {"gpus": gpus, "interval_s": 10.0})
                down = _inside(t, knobs.port_down.get(node, []))
                downed = sum(1 for a, _ in knobs.port_down.get(node, []) if t - 10.0 <= a < t)
                trace.emit(ts + 0.4, job.name, node, "net", "sample",
                           {"interval_s": 10.0 if seq > 1 else 0.0,
                            "ports": [net_port("DOWN" if down else "ACTIVE", downed)]})
            if seq % 6 == 1:
                trace.emit(ts + 0.6, job.name, node, "host", "sample", host_sample(rng))
            t += 5.0


def _steps(trace: Trace, job: Job, base: float, length: float, knobs: Knobs) -> None:
    rng = trace.rng
    step = FIRST_STEP
    t = 1.0
    while t < length:
        slow = knobs.slow_node is not None and t >= knobs.slow_from
        computes = {r["rank"]: COMPUTE_S * (knobs.slow_factor if slow and r["node"] == knobs.slow_node else 1.0)
                    * rng.uniform(0.98, 1.02) for r in job.ranks}
        step_time = max(computes.values()) + (STEP_S - COMPUTE_S) * rng.uniform(0.95, 1.05)
        t += step_time
        while _inside(t, knobs.pauses):
            t += STEP_S
        if t >= length or not _alive(knobs, t) or (knobs.steps_stop is not None and t > knobs.steps_stop):
            return
        step += 1
        nan = knobs.nan_from is not None and t >= knobs.nan_from
        loss: float | str = "nan" if nan else loss_at(step, rng)
        grad: float | str = "nan" if nan else round(rng.gauss(0.31, 0.015), 4)
        for r in job.ranks:
            trace.emit(base + t + 0.002 * r["rank"], job.name, r["node"], "train", "step",
                       {"rank": r["rank"], "step": step, "loss": loss, "grad_norm": grad,
                        "step_time_s": round(step_time, 4), "tokens": TOKENS_PER_RANK,
                        "tokens_per_s": round(TOKENS_PER_RANK / step_time, 1),
                        "mfu": round(0.41 * STEP_S / step_time, 4), "compute_s": round(computes[r["rank"]], 4)})
