"""Hang localisation on the simulated cluster's captures: exact / group / wrong / none, with and without
the trainer hook's Flight Recorder dumps (issue 51), graded as bench.bench_hang_localisation grades
the real captures.

For each seed a job_hang is injected on a random rank of a 64-node job (TP 8, PP 4, DP 16; each
variant of simulator.faults.HANG_VARIANTS), the stacks are captured 100 s later, and the verdict of
``diagnosis.hang.recorder.read_hang`` (hook: faulthandler + py-spy stacks and recorder dumps) or
``read_hang_stacks`` (no hook: py-spy alone; a node with py-spy broken sends nothing usable) is
graded against the culprit's machine. Prints one JSON line per variant and reader.

    .venv/bin/python -m bench.bench_sim_localisation [--seeds 10] [--nodes 64]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import numpy as np

from bench.bench_hang_localisation import grade
from faultlens.diagnosis.hang.recorder import read_hang
from faultlens.diagnosis.hang.stack_reading import read_hang_stacks
from faultlens.events.command import Command
from faultlens.simulator import FaultPlan, SimConfig, SimulatedCluster
from faultlens.simulator.faults import HANG_VARIANTS


def capture(nodes: int, seed: int, variant: str, hook: bool) -> tuple[str, str]:
    cfg = SimConfig(nodes=nodes, gpus=8, seed=seed, noise=False, flight_recorder=hook)
    culprit = int(np.random.default_rng([seed, 51]).integers(nodes * 8))
    sim = SimulatedCluster(cfg, FaultPlan().fail_at("job_hang", rank=culprit, t=60, detail=variant), auto_recover=False)
    sim.advance(cfg.start_ts + 160)
    now = sim.now
    sim.apply(Command(job=cfg.job, action="capture_stacks", issued_at=now, expires_at=now + 60))
    out = sim.advance(now + 10)
    stacks: dict[int, str] = {}
    for e in out:  # py-spy preferred, as diagnosis.stacks.dump_set keeps them
        if e.kind == "stack_dump" and e.data.get("ok") is not False:
            if e.data["tool"] == "py-spy" or e.data["rank"] not in stacks:
                stacks[e.data["rank"]] = e.data["dump"]
    recorders = {e.data["rank"]: e.data["dump"] for e in out if e.kind == "recorder_dump"}
    verdict = read_hang(stacks, recorders, sim.topology) if hook else read_hang_stacks(stacks, sim.topology)
    return grade(tuple(verdict.nodes), sim.node_of(culprit)), verdict.rule or "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=64)
    args = ap.parse_args()
    for variant in HANG_VARIANTS:
        for hook in (True, False):
            grades: Counter = Counter()
            rules: Counter = Counter()
            for seed in range(args.seeds):
                g, rule = capture(args.nodes, seed, variant, hook)
                grades[g] += 1
                rules[rule] += 1
            print(json.dumps({"variant": variant, "reader": "recorder+stacks" if hook else "stacks (py-spy)",
                              "cases": args.seeds, **{k: grades[k] for k in ("exact", "group", "wrong", "none")},
                              "rules": dict(rules)}))


if __name__ == "__main__":
    main()
