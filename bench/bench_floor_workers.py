"""`faultlens diagnose --workers N` against the bare client by wall, on bench_floor's backlog (issue 56).

    .venv/bin/python -m bench.bench_floor_workers [--nodes 32] [--duration 300] [--workers 1 2 3]
        [--stages node all] [--job-workers 1] [--rounds 1] [--bootstrap HOST:PORT]

bench/bench_floor.py times one member in this process; this runs the command as an operator does,
one launch per count (``--workers 1``: `--stage all` in one process; N > 1: N node-stage child
processes and the job stage in the launch), each in fresh groups, on the same held-out backlog
(bench_floor.backlog). A launch's rate is the backlog over the span from the first poll that
brought records in any member to the job stage's last batch handled (each member's final line
says both: ``first_read_at``, ``last_handled_at``); group joins and the idle stop are outside it,
as they are outside the bare client's (bench_floor.raw, from its first batch). The launch's CPU
seconds (its children's included, start and idle tail too) are given beside it. Each round runs
the bare client first (bare, then decoding and checking each message as the stages do), then each
stage of ``--stages`` at every count (``--stage node --workers N``: N node members alone, its rate the
backlog over the span to their last batch; ``all``: the whole launch as above, ``--job-workers``
job-stage members in it), so a ratio is taken within a round on one machine load.

Each launch's line also says what a fleet at 1 Hz would take (bench_floor.MESSAGES_PER_NODE_S a node
of 8 GPUs): ``launches_at_1hz``, launches reading as this one did by wall on this machine, and
``cores_at_1hz``, the launch's CPU seconds a message (start and idle tail included: an upper bound)
times the fleet's messages a second: what a host with a core per process would spend.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import uuid

from bench.bench_floor import GPUS, MESSAGES_PER_NODE_S, _rates, fleet, raw, write_backlog
from bench.common import bench_broker


def launch(bootstrap: str, workers: int, idle_s: float, backlog: int, stage: str = "all", job_workers: int = 1) -> dict:
    """One `faultlens diagnose --stage STAGE --workers N` over the backlog: its rate by wall and its
    CPU. Its members' records read may exceed the backlog: a partition that changed hands while the
    group formed is read again by its new owner (docs/deploying.md)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    extra = ["--job-workers", str(job_workers)] if stage == "all" and job_workers > 1 else []
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "faultlens",
            "diagnose",
            "--stage",
            stage,
            "--workers",
            str(workers),
            *extra,
            "--group",
            f"bench-{stage}-w{workers}-{uuid.uuid4().hex[:6]}",
            "--idle-stop",
            str(idle_s),
            "--bootstrap",
            bootstrap,
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise SystemExit(f"diagnose --workers {workers} exited {done.returncode}:\n{done.stderr[-3000:]}")
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    readers = [x for x in lines if x["stage"] in ("all", "node")]
    read = sum(x["records"] for x in readers)
    start = min(x["first_read_at"] for x in readers if x["first_read_at"])
    nodes_done = max((x["last_handled_at"] for x in lines if x["stage"] == "node"), default=None)
    end = nodes_done if stage == "node" else max(x["last_handled_at"] for x in lines if x["stage"] in ("all", "job"))
    span = end - start
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "records": backlog,
        "records_read": read,
        "seconds": round(span, 2),
        "events_per_s": round(backlog / span),
        "node_stage_s": round(nodes_done - start, 2) if nodes_done else None,
        "node_stage_per_s": round(backlog / (nodes_done - start)) if nodes_done else None,
        "launch_wall_s": round(wall, 1),
        "launch_cpu_s": round(cpu, 1),
        "diagnoses": sum(x["diagnoses"] for x in lines if x["stage"] in ("all", "job")),
        "launches_at_1hz": fleet(backlog / span),
        "cores_at_1hz": {
            f"{gpus}_gpus": round(gpus // GPUS * MESSAGES_PER_NODE_S * cpu / backlog, 1) for gpus in (10_000, 100_000)
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--duration", type=int, default=300)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--stages", nargs="+", default=["all"], choices=["node", "all"])
    ap.add_argument("--job-workers", type=int, default=1, help="job-stage members of each stage-all launch")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--idle-stop", type=float, default=8.0)
    ap.add_argument("--bootstrap", help="a Kafka cluster (default: an embedded broker)")
    args = ap.parse_args(argv)
    print(json.dumps({"load_average": os.getloadavg(), "cpus": os.cpu_count()}), flush=True)
    with bench_broker(args.bootstrap) as base:
        total = write_backlog(base.bootstrap, args.nodes, args.duration)
        print(json.dumps({"backlog": total, "nodes": args.nodes}), flush=True)
        for round_ in range(1, args.rounds + 1):
            bare = _rates(*raw(base, total, decode=False))
            print(json.dumps({"round": round_, "measure": "raw kafka-python", **bare}), flush=True)
            decoded = _rates(*raw(base, total, decode=True))
            decoded["ratio_to_raw"] = round(decoded["events_per_s"] / bare["events_per_s"], 3)
            print(json.dumps({"round": round_, "measure": "raw + decode + check", **decoded}), flush=True)
            # Stage-all launches first: a launch's job stage reads `summaries` from their start, so
            # it also reads (and drops as copies, by id) what every earlier launch's node members wrote.
            for stage in sorted(set(args.stages)):
                for n in args.workers:
                    row = launch(base.bootstrap, n, args.idle_stop, total, stage, args.job_workers)
                    row["ratio_to_raw"] = round(row["events_per_s"] / bare["events_per_s"], 3)
                    row["ratio_to_decode"] = round(row["events_per_s"] / decoded["events_per_s"], 3)
                    jobs = f" --job-workers {args.job_workers}" if stage == "all" and args.job_workers > 1 else ""
                    measure = f"diagnose --stage {stage} --workers {n}{jobs}"
                    print(
                        json.dumps({"round": round_, "measure": measure, **row, "load_average": os.getloadavg()[0]}),
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
