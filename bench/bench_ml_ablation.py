"""Ablation: rules only vs rules + the peer model, on the realistic test bed with slow gray failures.

    .venv/bin/python -m bench.bench_ml_ablation [--seeds 1 2 3 4 5] [--nodes 16] [--hours 2] [--faults 17]

Each seed is one closed-loop run (faultlens.closed_loop: stacks only where the engine asks, capture
failing on 10 % of the nodes, healthy variance) of ``--nodes`` × 8 GPUs for ``--hours``, holding
the usual fault mix (simulator.plan, every class) and the slow drifts of simulator.drifts on
machines the mix leaves alone: a GPU whose clocks and power sag together by 10 % over 30 minutes
(``gpu_sag``), the same sag 2.5 times deeper (``gpu_sag_deep``: clocks -25 %, power -20 %, its
rank +20 %, which the single-window threshold does cross, late), a node whose compute time
creeps up 3 % per hour (``compute_creep``), and a NIC port whose physical-layer errors climb over
an hour (to 72 symbol errors a minute, under the counter rules' burst threshold of 100 until
the noise crosses it) while its share of the node's traffic falls 20 % (``nic_decay``). The same
seed runs twice: ``--no-peer-model`` (the robust z-score threshold, the explicit rules, hang and
stack localisation) and the default engine (plus the isolation forest and the drift judge).

Per drift scenario and arm: *suspected* (a fail_slow suspicion or alert naming the drifting node:
what the peer model may give alone) and *convicted* (an evicting verdict naming it), each with
its latency from the drift's onset. Per arm: precision and recall of the scored verdicts over
every label (`faultlens score`'s rules; a drift label is matched over its whole span, not the
default 600 s), the usual mix's recall alone, healthy nodes blamed and evicted (the goal is 0),
and healthy nodes *suspected* (suspicions that name a machine no label names then: the price of
the model, paid in stack rounds, never in evictions).

Prints one JSON line per seed and arm, then the tables (markdown) over all seeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from typing import Any

import numpy as np

from faultlens.closed_loop import ClosedLoop
from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.replay.scoring import EARLY_S, EVICTING, is_scored, score
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.simulator.config import SimConfig
from faultlens.simulator.drifts import DRIFT_KINDS, Drift
from faultlens.simulator.plan import random_plan
from faultlens.simulator.run import SimRun

ARMS = (("rules only", False), ("rules + peer model", True))
SCENARIOS = ("gpu_sag", "gpu_sag_deep", "compute_creep", "nic_decay")
SUSPECT_FAULTS = ("fail_slow", "gpu_thermal", "nic")


def _plan(seed: int, nodes: int, duration: float, faults: int):
    """The usual mix on every slot but two, and the two drifts on those (their machines must not be
    swapped out by an unrelated fault, or the drift would end with it)."""
    rng = np.random.default_rng([seed, 0xAB1])
    slots = [int(x) for x in rng.choice(nodes, size=len(SCENARIOS), replace=False)]
    plan, _ = random_plan(faults, duration, nodes, np.random.default_rng([seed, 0xFA]))
    free = [s for s in range(nodes) if s not in slots]
    plan.faults = [replace(f, slot=free[f.slot % len(free)]) if f.slot in slots else f for f in plan.faults]
    sag, deep, creep, nic = (f"n{s:03d}" for s in slots)
    drifts = {
        sag: Drift("gpu_sag", t=float(rng.uniform(900, 1800)), node=sag, gpu=int(rng.integers(8))),
        deep: Drift("gpu_sag", t=float(rng.uniform(900, 1800)), node=deep, gpu=int(rng.integers(8)),
                    clock_depth=0.25, power_depth=0.20, slowdown=0.20),
        creep: Drift("compute_creep", t=float(rng.uniform(600, 1200)), node=creep),
        nic: Drift("nic_decay", t=float(rng.uniform(900, 1800)), node=nic, port=int(rng.integers(8)), ramp_s=3600.0),
    }
    return plan, tuple(drifts.values()), dict(zip((sag, deep, creep, nic), SCENARIOS, strict=True))


def _is_request(d: Diagnosis) -> bool:
    return d.action == "capture_stacks" and d.confidence < 0.5


def _is_suspicion(d: Diagnosis) -> bool:
    return d.fault in SUSPECT_FAULTS and d.action in ("capture_stacks", "alert") and not _is_request(d)


def _run_arm(seed: int, args, peer_model: bool) -> dict[str, Any]:
    cfg = SimConfig(nodes=args.nodes, gpus=8, seed=seed, sample_interval_s=10.0, job=f"job-abl-{seed}")
    duration = args.hours * 3600.0
    plan, drifts, scenario_of = _plan(seed, args.nodes, duration, args.faults)
    run = SimRun(cfg, plan, duration, drifts)
    loop = ClosedLoop(run, Engine(EngineConfig(peer_model=peer_model)))
    t0 = time.perf_counter()
    events = sum(1 for _ in loop.events())
    seconds = time.perf_counter() - t0
    diags = sorted(loop.diagnoses.values(), key=lambda d: d.ts)
    labels = run.labels
    ends = {ep.nodes[0]: ep.extra["drift_effect"].t1 for ep in run.cluster.episodes.values() if "drift_effect" in ep.extra}
    drift_labels = [lab for lab in labels if lab.get("drift") in DRIFT_KINDS]
    usual_labels = [lab for lab in labels if lab.get("drift") not in DRIFT_KINDS]

    def on_drift(d: Diagnosis, lab) -> bool:
        node = lab["nodes"][0]
        return (d.fault == lab["fault"] and node in d.nodes and not _is_request(d)
                and float(lab["onset"]) - EARLY_S <= d.ts <= ends.get(node, float(lab["end"])))

    scenarios = {}
    drift_diags: set[str] = set()
    for lab in drift_labels:
        mine = [d for d in diags if on_drift(d, lab)]
        drift_diags.update(d.id for d in mine)
        onset = float(lab["onset"])
        sus = [d for d in mine if _is_suspicion(d)]
        con = [d for d in mine if d.action in EVICTING]
        scenarios[scenario_of[lab["nodes"][0]]] = {
            "node": lab["nodes"][0], "onset_min": round((onset - cfg.start_ts) / 60, 1),
            "ended_early": ends.get(lab["nodes"][0], float(lab["end"])) < float(lab["end"]) - 1,
            "suspected": bool(sus), "suspect_latency_min": round((sus[0].ts - onset) / 60, 1) if sus else None,
            "convicted": bool(con), "convict_latency_min": round((con[0].ts - onset) / 60, 1) if con else None,
            "scored": [d.action for d in mine if is_scored(d)],
        }
    # The usual mix scored as `faultlens score` does; the drifts' own diagnoses judged above.
    usual = score([d for d in diags if d.id not in drift_diags], usual_labels)
    o = usual.overall()
    drift_scored = [d for d in diags if d.id in drift_diags and is_scored(d)]
    diagnoses = o["diagnoses"] + len(drift_scored)
    tp = o["true_positives"] + len(drift_scored)  # every one of them names the drifting node in its span
    detected = o["detected"] + sum(1 for s in scenarios.values() if s["scored"])
    healthy_suspects = _healthy_suspects(diags, labels, ends)
    return {
        "seed": seed, "peer_model": peer_model, "events": events, "seconds": round(seconds, 1),
        "scenarios": scenarios,
        "precision": round(tp / diagnoses, 4) if diagnoses else None,
        "recall": round(detected / len(labels), 4) if labels else None,
        "usual_recall": o["recall"], "usual_precision": o["precision"], "labels": len(labels),
        "healthy_nodes_blamed": o["healthy_nodes_blamed"], "healthy_nodes_evicted": o["healthy_nodes_evicted"],
        "healthy_nodes_suspected": len(healthy_suspects), "healthy_suspects": sorted(healthy_suspects),
        "latency_p50_s": o["detection_latency_p50_s"],
    }


def _healthy_suspects(diags: list[Diagnosis], labels, ends: dict[str, float]) -> set[str]:
    """Nodes named by a suspicion that no label names around its time (drift labels: their span)."""
    out = set()
    for d in diags:
        if not _is_suspicion(d):
            continue
        for node in d.nodes:
            covered = False
            for lab in labels:
                if node not in (lab.get("nodes") or ()):
                    continue
                onset = float(lab["onset"])
                end = ends.get(node, float(lab["end"])) if lab.get("drift") else onset + 600.0
                covered = covered or onset - EARLY_S <= d.ts <= max(end, onset + 600.0)
            if not covered:
                out.add(node)
    return out


def _med(xs):
    xs = [x for x in xs if x is not None]
    return f"{statistics.median(xs):.1f}" if xs else "–"


def _tables(results: list[dict[str, Any]], seeds: list[int]) -> str:
    n = len(seeds)
    lines = ["| scenario | arm | suspected | suspect latency, median (min) | convicted | convict latency (min) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for kind in SCENARIOS:
        for name, pm in ARMS:
            rs = [r["scenarios"][kind] for r in results if r["peer_model"] == pm and kind in r["scenarios"]]
            lines.append(f"| {kind} | {name} | {sum(s['suspected'] for s in rs)}/{n} | "
                         f"{_med([s['suspect_latency_min'] for s in rs])} | {sum(s['convicted'] for s in rs)}/{n} | "
                         f"{_med([s['convict_latency_min'] for s in rs])} |")
    lines += ["", "| arm | precision | recall (all labels) | recall (usual mix) | healthy nodes blamed | "
                  "healthy nodes evicted | healthy nodes suspected | seconds |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, pm in ARMS:
        rs = [r for r in results if r["peer_model"] == pm]
        mean = {k: statistics.mean(r[k] for r in rs if r[k] is not None) for k in ("precision", "recall", "usual_recall")}
        lines.append(f"| {name} | {mean['precision']:.3f} | {mean['recall']:.3f} | {mean['usual_recall']:.3f} | "
                     f"{sum(r['healthy_nodes_blamed'] for r in rs)} | {sum(r['healthy_nodes_evicted'] for r in rs)} | "
                     f"{sum(r['healthy_nodes_suspected'] for r in rs)} | {sum(r['seconds'] for r in rs):.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--faults", type=int, default=17, help="faults of the usual mix per seed (>= 17: every class)")
    args = ap.parse_args()
    results = []
    for seed in args.seeds:
        for _, pm in ARMS:
            r = _run_arm(seed, args, pm)
            results.append(r)
            print(json.dumps(r), flush=True)
    print(_tables(results, args.seeds), flush=True)


if __name__ == "__main__":
    main()
