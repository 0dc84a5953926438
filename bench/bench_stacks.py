"""Stack reading at scale: read_hang_stacks / cluster_stacks on 16,384 ranks, `faultlens stacks` on a folder.

Prints one JSON line per measurement. The job is 2048 nodes × 8 GPUs, TP=8, PP=16, DP=128. Three
dump populations: "pid-only" (Fig. 7: one rank stuck in all_gather, its pipeline in isend/irecv,
all others in the gradient sync; healthy dumps identical but for pids, thread ids, locals and an
optional loader thread: the usual case, where the signature cache pays), "all-distinct" (Fig. 7
with every dump's line numbers different, so every text is parsed) and "spread-hang" (a hang
minutes old, shaped like the real gloo captures: one rank computing, everyone else in recv, send,
all_gather or the overlapped grad sync, no majority stack). For each, both the hang reading
(wait chains, else clustering: what `faultlens stacks` and the hang detector run) and the bare
outlier clustering (the fail-slow rounds) are timed, and whether each blamed the expected group.

    .venv/bin/python -m bench.bench_stacks [--nodes 2048] [--gpus 8] [--tp 8] [--pp 16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.testbed.stack_samples import GRAD_SYNC, fig7_dumps, grid, pyspy_dump, spread_hang_dumps
from faultlens.diagnosis.hang.stack_reading import read_hang_stacks
from faultlens.diagnosis.stacks.outliers import cluster_stacks


def _distinct(topology, stuck: int) -> dict[int, str]:
    """Fig. 7 again, but healthy ranks' megatron line numbers shifted per rank: no two texts alike."""
    dumps = fig7_dumps(topology, stuck)
    place = topology.by_rank[stuck]
    for p in topology.ranks:
        if p.rank != stuck and not (p.tp == place.tp and p.dp == place.dp):
            dumps[p.rank] = pyspy_dump(GRAD_SYNC, pid=1000 + p.rank, line_shift=p.rank)
    return dumps


def _time(read, dumps, topology, repeat: int) -> tuple[float, object]:
    best = float("inf")
    verdict = None
    for _ in range(repeat):
        start = time.perf_counter()
        verdict = read(dumps, topology)
        best = min(best, time.perf_counter() - start)
    return best, verdict


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--pp", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    dp = args.nodes * args.gpus // (args.tp * args.pp)
    topology = grid(args.nodes, args.gpus, args.tp, args.pp, dp)
    ranks = len(topology.ranks)
    stuck = next(p.rank for p in topology.ranks if p.pp == args.pp - 1 and p.dp == dp // 2)
    fig7_group = f"pp:{topology.group_id(stuck, 'pp')}"
    culprit = next(p.rank for p in topology.ranks if p.pp == args.pp // 2 and p.dp == dp // 3 and p.tp == 3)
    spread_group = f"tp:{topology.group_id(culprit, 'tp')}"

    populations = (("pid-only", fig7_dumps(topology, stuck), fig7_group),
                   ("all-distinct", _distinct(topology, stuck), fig7_group),
                   ("spread-hang", spread_hang_dumps(topology, culprit), spread_group))
    for name, dumps, expected in populations:
        for bench, read in (("read_hang_stacks", read_hang_stacks), ("cluster_stacks", cluster_stacks)):
            seconds, verdict = _time(read, dumps, topology, args.repeat)
            print(json.dumps({
                "bench": bench, "dumps": name, "ranks": ranks, "seconds": round(seconds, 3),
                "ranks_per_s": round(ranks / seconds), "rule": verdict.rule, "group": verdict.group,
                "expected": expected, "correct": verdict.group == expected, "suspects": len(verdict.outlier_ranks),
                "dump_mb": round(sum(map(len, dumps.values())) / 1e6, 1),
            }), flush=True)

    for name, dumps, expected in (populations[0], populations[2]):
        with tempfile.TemporaryDirectory(prefix="bench_stacks_") as tmp:
            folder = Path(tmp) / "dumps"
            folder.mkdir()
            for rank, text in dumps.items():
                (folder / f"{rank}.txt").write_text(text)
            topo_file = Path(tmp) / "topology.json"
            topo_file.write_text(json.dumps(topology.to_data()))
            cmd = [sys.executable, "-m", "faultlens", "stacks", str(folder), "--topology", str(topo_file)]
            start = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "FAULTLENS_LOG_LEVEL": "ERROR"})
            wall = time.perf_counter() - start
            group = json.loads(proc.stdout)["group"] if proc.returncode == 0 and proc.stdout.strip() else None
            print(json.dumps({
                "bench": "faultlens stacks", "dumps": name, "ranks": ranks, "wall_s": round(wall, 3),
                "rc": proc.returncode, "group": group, "correct": group == expected,
            }), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
