"""The node stage's rate against an older commit's, interleaved on one broker (issue 13).

    .venv/bin/python -m bench.bench_node_stage --trace FILE [--base REV] [--clients kafka-python confluent]
        [--rounds 3]

Replays the trace once into an embedded broker, then runs `diagnose --stage node` over it, each
run in a fresh process and group, ``--rounds`` times per client; with ``--base REV`` each run is followed by
the same run on that commit's code (a throw-away `git worktree`, this script run there in a
subprocess), so both see the same machine load. A rate runs from the first batch handed to the
handler to the last one; CPU seconds are the process's (every thread, the client's included).
Prints one JSON line per run, then per client the medians and the ratio now / base.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(bootstrap: str, client: str) -> dict:
    """One node-stage run over what the broker holds, timed from its first batch to its last."""
    from diagnosis.consumer import diagnose_consumer
    from streams.config import KafkaSettings

    settings = KafkaSettings(bootstrap=bootstrap, client=client)
    runner, _ = diagnose_consumer(settings, None, stage="node", group=f"bench-node-{uuid.uuid4().hex[:6]}")
    first: list[tuple[float, float]] = []
    last: list[tuple[float, float]] = []
    handle = runner._run_handler

    def timed(records):
        if not first:
            first.append((time.perf_counter(), time.process_time()))
        out = handle(records)
        last[:] = [(time.perf_counter(), time.process_time())]
        return out

    runner._run_handler = timed
    stats = runner.run(idle_stop_s=3, handle_signals=False)
    wall, cpu = last[0][0] - first[0][0], last[0][1] - first[0][1]
    return {"client": client, "records": stats.records_in, "outputs": stats.outputs, "seconds": round(wall, 2),
            "cpu_seconds": round(cpu, 2), "events_per_s": round(stats.records_in / wall),
            "events_per_cpu_s": round(stats.records_in / cpu)}


def _run_in(tree: Path, bootstrap: str, client: str) -> dict:
    # A fresh process for every run, either code: this file, with that tree's packages first on
    # the path (a run in this process would follow the replay's garbage and frozen objects).
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--one", bootstrap, client],
                         cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=False, help="a trace of `faultlens simulate` / `faultlens record`")
    ap.add_argument("--base", help="a git revision to compare with (interleaved runs)")
    ap.add_argument("--clients", nargs="+", default=["kafka-python", "confluent"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one", nargs=2, metavar=("BOOTSTRAP", "CLIENT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_once(*args.one)), flush=True)
        return
    if not args.trace:
        ap.error("--trace is required")

    from streams.admin import ensure_topics
    from streams.broker import EmbeddedBroker
    from streams.config import KafkaSettings
    from streams.replay import replay_trace

    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        tree = Path(tmp) / "base"
        if args.base:
            subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), args.base], cwd=ROOT, check=True)
        try:
            settings = KafkaSettings(bootstrap=broker.bootstrap)
            ensure_topics(settings)
            replay_trace(settings, args.trace, 0, show_progress=False)
            rows: dict[tuple[str, str], list[dict]] = {}
            for _ in range(args.rounds):
                for client in args.clients:
                    for code in ("now", "base") if args.base else ("now",):
                        row = _run_in(ROOT if code == "now" else tree, broker.bootstrap, client)
                        row["code"] = code if code == "now" else args.base
                        rows.setdefault((client, code), []).append(row)
                        print(json.dumps(row), flush=True)
            for client in args.clients:
                summary = {"client": client}
                for code in ("now", "base") if args.base else ("now",):
                    for key in ("events_per_s", "events_per_cpu_s"):
                        summary[f"{code}_{key}_median"] = statistics.median(r[key] for r in rows[(client, code)])
                if args.base:
                    for key in ("events_per_s", "events_per_cpu_s"):
                        summary[f"ratio_{key}"] = round(summary[f"now_{key}_median"] / summary[f"base_{key}_median"], 2)
                print(json.dumps(summary), flush=True)
        finally:
            if args.base:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)


if __name__ == "__main__":
    main()
