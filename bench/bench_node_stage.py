"""The node stage's rate against an older commit's, interleaved on one broker (issue 13).

    .venv/bin/python -m bench.bench_node_stage --trace FILE [--base REV] [--clients kafka-python confluent]
        [--rounds 3]

Replays the trace once into an embedded broker, then runs `diagnose --stage node` over it, each
run in a fresh process and group, ``--rounds`` times per client; with ``--base REV`` each run is followed by
the same run on that commit's code (a throw-away `git worktree`, this script run there in a
subprocess), so both see the same machine load. A rate runs from the first batch of telemetry read
to the last batch handled (bench/bench_throughput.py's clock, this tree's for either code); CPU
seconds are the process's (every thread, the client's included).
Prints one JSON line per run (with the run's peak RSS: each is a process of its own), then per
client the medians and the ratio now / base.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _timing():
    """This tree's bench/bench_throughput.py, whichever tree's packages are on the path: the base
    commit's stage code is timed the same way as this one's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bench_timing", Path(__file__).resolve().parent / "bench_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_once(bootstrap: str, client: str, per_msg: float) -> dict:
    """One node-stage run over what the broker holds, timed as bench_throughput times a stage."""
    from faultlens.streams.config import KafkaSettings

    timing = _timing()
    records, clock, outputs, handled = timing._stage(KafkaSettings(bootstrap=bootstrap, client=client), "node",
                                                     idle_s=3.0)
    handled_s = handled.seconds()[0]
    return {"client": client, **timing._rates(records, clock, per_msg), "outputs": outputs,
            "events_per_s_from_first_handled": round(records / handled_s) if handled_s > 0 else None,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def _run_in(tree: Path, bootstrap: str, client: str, per_msg: float) -> dict:
    # A fresh process for every run, either code: this file, with that tree's packages first on
    # the path (a run in this process would follow the replay's garbage and frozen objects).
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--one", bootstrap, client, str(per_msg)],
                         cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=False, help="a trace of `faultlens simulate` / `faultlens record`")
    ap.add_argument("--base", help="a git revision to compare with (interleaved runs)")
    ap.add_argument("--clients", nargs="+", default=["kafka-python", "confluent"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one", nargs=3, metavar=("BOOTSTRAP", "CLIENT", "GPUS_PER_MESSAGE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        bootstrap, client, per_msg = args.one
        print(json.dumps(run_once(bootstrap, client, float(per_msg))), flush=True)
        return
    if not args.trace:
        ap.error("--trace is required")

    from bench.bench_throughput import _census
    from faultlens.streams.admin import ensure_topics
    from faultlens.streams.broker import EmbeddedBroker
    from faultlens.streams.config import KafkaSettings
    from faultlens.streams.replay import replay_trace

    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        tree = Path(tmp) / "base"
        if args.base:
            subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), args.base], cwd=ROOT, check=True)
        try:
            settings = KafkaSettings(bootstrap=broker.bootstrap)
            ensure_topics(settings)
            replay_trace(settings, args.trace, 0, show_progress=False)
            telemetry, gpu_samples, _ = _census(Path(args.trace))
            per_msg = gpu_samples / telemetry
            rows: dict[tuple[str, str], list[dict]] = {}
            for _ in range(args.rounds):
                for client in args.clients:
                    for code in ("now", "base") if args.base else ("now",):
                        row = _run_in(ROOT if code == "now" else tree, broker.bootstrap, client, per_msg)
                        row["code"] = code if code == "now" else args.base
                        rows.setdefault((client, code), []).append(row)
                        print(json.dumps(row), flush=True)
            for client in args.clients:
                summary = {"client": client}
                for code in ("now", "base") if args.base else ("now",):
                    for key in ("events_per_s", "events_per_cpu_s", "peak_rss_mb"):
                        summary[f"{code}_{key}_median"] = statistics.median(r[key] for r in rows[(client, code)])
                if args.base:
                    for key in ("events_per_s", "events_per_cpu_s", "peak_rss_mb"):
                        summary[f"ratio_{key}"] = round(summary[f"now_{key}_median"] / summary[f"base_{key}_median"], 2)
                print(json.dumps(summary), flush=True)
        finally:
            if args.base:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)


if __name__ == "__main__":
    main()
