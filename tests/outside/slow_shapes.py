"""Slow ranks as an SRE meets them in MoE jobs, with the verdicts a person expects (docs/events.md shapes).

    python -m tests.outside.slow_shapes OUT_DIR [NAMES...]

Helper F, after round 3 of the outside check (tests/outside/sre_shapes.py, whose machines, steps and
py-spy stacks these reuse): one rank computing 35 % longer than its peers looks the same in stacks
whether its GPU is slow or it holds the hot expert. What tells them apart is outside the stacks: the
GPU's own counters beside its peers', and whether the slowness stays at one machine across captures
minutes apart or moves with the routing, and, where the trainer sends it, each step's `work` (the
tokens routed to the rank's experts). Each trace holds the agents' answers to the captures the
job stage asks for (five rounds 10 s apart; a second look about 10 minutes after one that found no
hardware sign).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

from tests.outside.job_shape import COMPUTE_S, Job, Trace, machine_names
from tests.outside.sre_machines import Steps, steps
from tests.outside.sre_shapes import (
    _ALL_TO_ALL,
    _EXPERT_GEMM,
    _HEAD,
    _IDLE_HEAD,
    START,
    Expect,
    _dumps,
    _plain,
    _verdict,
)
from tests.outside.write_traces import write_scenarios, writer_main

SLOWER = 1.35
ONSET = 180.0
LOOKS = (225.0, 880.0, 1540.0)  # the first rounds 45 s after the onset, then a look every ~11 minutes


def _captures(trace: Trace, job: Job, base: float, at: float, name: str, slow_rank: Callable[[float], int | None]) -> None:
    """Five rounds from ``at``: the rank slow then in its expert GEMM, every other one in the all_to_all."""
    for k in range(5):
        t = at + 10.0 * k
        hot = slow_rank(t)
        _dumps(
            trace,
            job,
            base + t,
            f"{name}-{int(at)}-round-{k + 1}",
            lambda r, hot=hot: (_HEAD + _EXPERT_GEMM) if r["rank"] == hot else (_IDLE_HEAD + _ALL_TO_ALL),
        )


def _moe(
    trace: Trace, base: float, name: str, length: float, slow_rank: Callable[[float], int | None], looks: tuple[float, ...]
) -> Job:
    job = Job(f"outside-{name}", machine_names(name, 16))
    _plain(trace, job, base, length)
    steps(trace, job, base, Steps(0.0, length, compute=lambda r, t: COMPUTE_S * (SLOWER if r["rank"] == slow_rank(t) else 1.0)))
    for at in looks:
        _captures(trace, job, base, at, job.name, slow_rank)
    return job


def hot_expert_moves(trace: Trace, base: float) -> list[Expect]:
    """An MoE job whose router sends most tokens to one expert for a while: rank 37 (which holds it)
    computes 35 % longer from minute 3 to 10, then the routing shifts and rank 26 (another machine) holds the hot
    expert until minute 20. Every GPU's clocks, power, temperature and utilisation stay like its
    peers'. The workload's, not a machine's: nobody is evicted, a person hears of each."""

    def hot(t: float) -> int | None:
        return 37 if ONSET <= t < 600.0 else 26 if 600.0 <= t < 1200.0 else None

    job = _moe(trace, base, "mvs", 1500.0, hot, LOOKS[:2])
    first, second = job.node_of(37), job.node_of(26)
    return [
        _verdict(job.name, "fail_slow", [first], "alert", base, ONSET, ONSET + 90.0),
        # The peer model's suspicion of the second machine, its stack rounds not answered in time.
        _verdict(job.name, "fail_slow", [second], "alert", base, 600.0, 640.0),
        # The second look finds the slowness on another machine: it moved with the routing.
        _verdict(job.name, "fail_slow", [second], "alert", base, LOOKS[1], LOOKS[1] + 40.0),
    ]


def clocks_low(trace: Trace, base: float) -> list[Expect]:
    """A GPU that is really slow: from minute 3 every GPU of rank 37's machine runs at 1410 MHz of
    1980 and draws 430 W where its peers draw 590 W (no throttle reason set: a clock held low), and
    its ranks compute 35 % longer. Its own counters convict it at the first look."""
    job = _moe(trace, base, "clk", 900.0, lambda t: 37 if t >= ONSET else None, LOOKS[:1])
    bad = job.node_of(37)
    for e in trace.events:
        if e["node"] == bad and e["source"] == "gpu" and e["ts"] >= base + ONSET:
            data = json.loads(e["data"])
            for g in data["gpus"]:
                g.update(sm_clock_mhz=1410, power_w=round(430.0 + (g["power_w"] - 590.0) / 3, 1))
            e["data"] = json.dumps(data, separators=(",", ":"))
    return [_verdict(job.name, "fail_slow", [bad], "evict", base, ONSET, ONSET + 90.0)]


def slow_for_half_an_hour(trace: Trace, base: float) -> list[Expect]:
    """Rank 37 computes 35 % longer from minute 3 to the trace's end (33 min), its GPU's counters
    like its peers' all along, and three captures 11 minutes apart find it alone in its GEMM. Stacks
    alone at one look are no eviction; the same machine at every look for over 20 minutes is."""
    job = _moe(trace, base, "sty", 2000.0, lambda t: 37 if t >= ONSET else None, LOOKS)
    bad = job.node_of(37)
    return [
        _verdict(job.name, "fail_slow", [bad], "alert", base, ONSET, ONSET + 90.0),
        _verdict(job.name, "fail_slow", [bad], "evict", base, ONSET, ONSET + 90.0),
    ]


ROUTED = 8192.0  # tokens routed to a rank's experts in a step, as its trainer counts them


def hot_expert_stays(trace: Trace, base: float) -> list[Expect]:
    """A hot expert that stays: rank 37 holds it from minute 3 to the trace's end (43 min), so it is
    routed 35 % more tokens and computes 35 % longer, its GPU's counters like its peers'. Its
    trainer sends each step's tokens routed to the rank's experts (``work``): the slowness is the
    workload's at every one of four looks, an alert that says so, and nobody is evicted."""
    hot = lambda t: 37 if t >= ONSET else None  # noqa: E731
    job = _moe(trace, base, "hot", 2600.0, hot, (*LOOKS, 2200.0))
    for e in trace.events:
        if e["job"] == job.name and e["source"] == "train" and e["kind"] == "step":
            data = json.loads(e["data"])
            data["work"] = ROUTED * (SLOWER if data["rank"] == hot(e["ts"] - base) else 1.0)
            e["data"] = json.dumps(data, separators=(",", ":"))
    return [_verdict(job.name, "fail_slow", [job.node_of(37)], "alert", base, ONSET, ONSET + 90.0)] * 4


SCENARIOS: dict[str, Callable[[Trace, float], list[Expect]]] = {
    "hot_expert_moves": hot_expert_moves,
    "clocks_low": clocks_low,
    "slow_for_half_an_hour": slow_for_half_an_hour,
    "hot_expert_stays": hot_expert_stays,
}


def write_all(out: Path, names: list[str] | None = None) -> list[Path]:
    """Each of ``names`` (default all) as a trace with its expect file, an hour apart in event time."""
    written = write_scenarios(out, SCENARIOS, names, seed=700, start=lambda i, k: START + math.floor(i * 3600.0))
    return [out / f"{name}.parquet" for name in written]


def main(argv: list[str] | None = None) -> int:
    return writer_main(argv, __doc__, SCENARIOS, write_all)


if __name__ == "__main__":
    sys.exit(main())
