"""Network faults on the simulated test bed: precision, recall and latency per variant, and healthy runs.

    .venv/bin/python bench/bench_net.py [--seeds 5] [--nodes 16] [--gpus 8] [--healthy-s 3600]

For each seed: one trace with every `nic` variant of simulator/faults.py (kernel_flap,
counter_flap, error_burst, degrading, rail_drop) on different nodes, one after another, and a job
hang after them; then a healthy trace (benign noise only, no fault) of ``--healthy-s`` seconds.
Prints one JSON line per seed and a summary line: per-variant detection latency (first evicting
`nic` diagnosis on the labelled node after the onset), the scorer's precision / recall for
`nic`, healthy nodes evicted, network alerts, and any `nic` diagnosis in the healthy run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faultlens.diagnosis.engine.core import Engine
from faultlens.diagnosis.engine.offline import analyze  # noqa: E402
from faultlens.diagnosis.replay.scoring import EVICTING, score  # noqa: E402
from faultlens.simulator import SimConfig, simulate  # noqa: E402
from faultlens.simulator.faults import DEGRADING_S, NIC_VARIANTS  # noqa: E402
from faultlens.simulator.plan import FaultPlan  # noqa: E402

SPACING_S = 200.0


def plan_for(seed: int, nodes: int) -> FaultPlan:
    plan = FaultPlan()
    for i, v in enumerate(NIC_VARIANTS):
        plan.fail_at("nic", node=f"n{(3 * i + seed) % nodes:03d}", t=150 + SPACING_S * i, detail=v)
    last = 150 + SPACING_S * (len(NIC_VARIANTS) - 1)
    return plan.fail_at("job_hang", node=f"n{(seed + 1) % nodes:03d}", t=last + DEGRADING_S + 100)


def one_seed(seed: int, args) -> dict:
    cfg = SimConfig(nodes=args.nodes, gpus=args.gpus, seed=seed, job=f"bench-net-{seed}")
    plan = plan_for(seed, args.nodes)
    run = simulate(cfg, plan, duration=plan.end() + 120)
    diags = analyze(run.events(), Engine())
    s = score(diags, run.labels)
    latency = {}
    for label in run.labels:
        if label["fault"] != "nic":
            continue
        variant = label["detail"].split(":")[0] if ":" in label["detail"] else "kernel_flap"
        hits = [d.ts - label["onset"] for d in diags if d.fault == "nic" and d.action in EVICTING
                and set(d.nodes) & set(label["nodes"]) and d.ts >= label["onset"] - 30]
        latency[variant] = round(min(hits), 1) if hits else None
    hang = [d for d in diags if d.fault == "job_hang" and d.action != "capture_stacks"]
    healthy = analyze(simulate(SimConfig(nodes=args.nodes, gpus=args.gpus, seed=seed, job=f"bench-ok-{seed}"),
                               FaultPlan(), duration=args.healthy_s).events(), Engine())
    nic = s.classes["nic"].to_dict()
    return {"seed": seed, "nic_precision": nic["precision"], "nic_recall": nic["recall"],
            "latency_s": latency, "healthy_nodes_evicted": s.overall()["healthy_nodes_evicted"],
            "nic_alerts": sum(d.fault == "nic" and d.action == "alert" for d in diags),
            "hang_quotes_network": all("network: RDMA traffic" in d.detail for d in hang) and bool(hang),
            "healthy_run_nic": sum(d.fault == "nic" for d in healthy),
            "healthy_run_actions": sum(d.action not in ("none",) for d in healthy)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--nodes", type=int, default=16)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--healthy-s", type=float, default=3600.0)
    args = p.parse_args()
    rows = []
    for seed in range(args.seeds):
        row = one_seed(seed, args)
        rows.append(row)
        print(json.dumps(row), flush=True)
    per_variant = {v: [r["latency_s"].get(v) for r in rows] for v in NIC_VARIANTS}
    print(json.dumps({
        "seeds": args.seeds, "nodes": args.nodes, "gpus": args.gpus,
        "nic_precision_min": min(r["nic_precision"] for r in rows), "nic_recall_min": min(r["nic_recall"] for r in rows),
        "latency_p50_s": {v: (statistics.median([x for x in xs if x is not None]) if any(x is not None for x in xs) else None)
                          for v, xs in per_variant.items()},
        "missed": {v: sum(x is None for x in xs) for v, xs in per_variant.items()},
        "healthy_nodes_evicted": sum(r["healthy_nodes_evicted"] for r in rows),
        "healthy_run_nic_diagnoses": sum(r["healthy_run_nic"] for r in rows),
        "healthy_run_hours": round(args.seeds * args.healthy_s / 3600, 2),
    }))


if __name__ == "__main__":
    main()
