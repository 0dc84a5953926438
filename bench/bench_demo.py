"""How fast the whole pipeline keeps up with a simulated cluster: `faultlens demo --speed 0` (lockstep:
the cluster advances only as fast as diagnosis, remediation and the command round trip allow), one
run per cluster size, each on its own embedded broker. Prints one JSON line per size: wall seconds,
events published, events per wall second, simulated seconds per wall second (the highest --speed
this machine sustains), recall and precision.

    .venv/bin/python -m bench.bench_demo --nodes 8 32 64
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def run_one(nodes: int, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if k not in ("FAULTLENS_BOOTSTRAP", "FAULTLENS_CONFIG")}
        env["FAULTLENS_HOME"] = home
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "faultlens", "demo", "--nodes", str(nodes), "--speed", "0",
                               "--seed", str(seed), "--no-live", "--json", "--no-trainer", "--out", f"{home}/out"],
                              env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"nodes": nodes, "error": proc.stderr[-500:]}
    report = {s["section"]: s["data"] for s in map(json.loads, proc.stdout.splitlines())}
    run = report["run"]
    return {
        "nodes": nodes, "wall_s": round(wall, 1), "events": run["events_published"],
        "events_per_s": round(run["events_published"] / wall), "sim_s_per_wall_s": round(run["simulated_s"] / wall, 1),
        "lockstep_timeouts": run["lockstep_timeouts"], "recall": report["score"]["recall"],
        "precision": report["score"]["precision"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, nargs="+", default=[8, 32])
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    for n in args.nodes:
        print(json.dumps(run_one(n, args.seed)), flush=True)


if __name__ == "__main__":
    main()
