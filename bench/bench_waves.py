"""Waves (issue 55): diagnoses and evictions of one event under many machines, with waves and
debounce off (the engine before them) and on (the shipped thresholds).

    .venv/bin/python -m bench.bench_waves [--nodes 256] [--shapes fabric_reset ...]

Each shape of bench/testbed/waves.py (a fabric reset, a switch reboot, a teardown, a driver reload,
each with one machine's Xid 79 inside) is analysed as `faultlens analyze` would, and its
diagnoses are fed, in the order they came out, to remediation's policy acting on the job with its
default caps (8 machines per 10 minutes, 10 % of a job): as `diagnose` + `remediate --act-on-all`
would. One JSON line per shape and setting: diagnoses, acting ones, evict diagnoses and the
machines they name, wave diagnoses, evictions sent and refused, and healthy machines evicted
(every machine but the labelled culprit).

``--fleet``: the same shapes under several small jobs side by side in the fleet (bench/testbed/
waves.build_fleet: ``--jobs`` jobs of ``--per-job`` machines, 16 machines to an NVLink domain and
a leaf switch), none big enough for a wave of its own: "off" as above, "job" with the job waves
alone (``[wave.fleet] min_jobs = 0``), "on" with the shipped thresholds (fleet waves too); each
job's diagnoses go to remediation acting on that job.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

from bench.testbed.waves import SHAPES, build, build_fleet
from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.engine.thresholds import load
from faultlens.events.trace import trace_order

EVICTING = ("evict", "evict_reset_gpu", "inspect_hardware")
# The engine before waves and debounce: no class comes in waves, nothing waits for a second occurrence.
OFF = '[wave]\nwindow_s = 0.0\n\n[[debounce]]\nmatch = "rule:*"\ncount = 1\n'
# Waves of one job only (before fleet waves).
JOB_ONLY = '[wave.fleet]\nmin_jobs = 0\n'


def evictions(found, topology, job: str) -> dict:
    """What remediation acting on the job would do with these diagnoses (default caps)."""
    from faultlens.events.signing import SigningKey
    from faultlens.remediation.decision import PolicyConfig
    from faultlens.remediation.policy import Policy

    policy = Policy(SigningKey.generate(), PolicyConfig(act_on_all=True))
    policy.observe_topology(job, topology)
    sent: list[str] = []
    refused = 0
    for d in found:
        decision, command = policy.decide(d, d.ts)
        if command is not None and command.action == "evict":
            sent.extend(command.nodes)
        elif decision.blocked.startswith(("cap", "circuit")):
            refused += 1
    return {"evicted": sorted(set(sent)), "refused_by_cap": refused}


def run(shape: str, nodes: int, thresholds_on: bool, off_file: Path) -> dict:
    trace = build(shape, nodes=nodes)
    culprits = {n for label in trace.labels for n in label["nodes"]}
    config = EngineConfig(thresholds=load([] if thresholds_on else [off_file]))
    start = time.perf_counter()
    found = analyze(trace.events, Engine(config))
    seconds = time.perf_counter() - start
    evict = [d for d in found if d.action in EVICTING]
    acts = evictions(found, trace.topology, trace.job)
    return {
        "shape": shape, "nodes": nodes, "waves_and_debounce": "on" if thresholds_on else "off",
        "events": len(trace.events), "diagnoses": len(found),
        "acting": sum(1 for d in found if d.action not in ("none", "capture_stacks")),
        "evict_diagnoses": len(evict), "machines_named_by_evict": len({n for d in evict for n in d.nodes}),
        "wave_diagnoses": [f"{d.fault} {d.action} {d.group} ({d.count})" for d in found if (d.group or "").startswith("wave:")],
        "evictions_sent": len(acts["evicted"]), "evictions_refused_by_cap": acts["refused_by_cap"],
        "healthy_evicted": len(set(acts["evicted"]) - culprits),
        "culprit_evicted": bool(culprits & set(acts["evicted"])), "analyze_s": round(seconds, 2),
    }


def run_fleet(shape: str, jobs: int, per_job: int, setting: str, files: dict[str, Path]) -> dict:
    traces = build_fleet(shape, jobs=jobs, per_job=per_job)
    culprits = {n for t in traces for label in t.labels for n in label["nodes"]}
    events = sorted((e for t in traces for e in t.events), key=trace_order)
    config = EngineConfig(thresholds=load([files[setting]] if setting in files else []))
    start = time.perf_counter()
    found = analyze(events, Engine(config))
    seconds = time.perf_counter() - start
    evict = [d for d in found if d.action in EVICTING]
    sent: set[str] = set()
    refused = 0
    for t in traces:
        acts = evictions([d for d in found if d.job == t.job], t.topology, t.job)
        sent |= set(acts["evicted"])
        refused += acts["refused_by_cap"]
    return {
        "shape": shape, "fleet": f"{jobs} jobs x {per_job}", "waves": setting, "events": len(events),
        "diagnoses": len(found), "evict_diagnoses": len(evict),
        "machines_named_by_evict": len({n for d in evict for n in d.nodes}),
        "wave_diagnoses": [f"{d.fault} {d.action} {d.group} ({d.count})" for d in {d.id: d for d in found}.values()
                           if (d.group or "").startswith("wave:")],
        "evictions_sent": len(sent), "evictions_refused_by_cap": refused, "healthy_evicted": len(sent - culprits),
        "culprit_evicted": bool(culprits & sent), "analyze_s": round(seconds, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=SHAPES)
    ap.add_argument("--fleet", action="store_true", help="the shapes under several small jobs (see above)")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--per-job", type=int, default=4)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the caps' refusals are counted, not logged one by one
    with tempfile.TemporaryDirectory() as tmp:
        off = Path(tmp) / "off.toml"
        off.write_text(OFF)
        if args.fleet:
            job_only = Path(tmp) / "job_only.toml"
            job_only.write_text(JOB_ONLY)
            for shape in args.shapes:
                for setting in ("off", "job", "on"):
                    row = run_fleet(shape, args.jobs, args.per_job, setting, {"off": off, "job": job_only})
                    print(json.dumps(row), flush=True)
            return
        for shape in args.shapes:
            for on in (False, True):
                print(json.dumps(run(shape, args.nodes, on, off)), flush=True)


if __name__ == "__main__":
    main()
