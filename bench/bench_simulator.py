"""Simulator and trace throughput: events/s simulated, trace write and read rates (one run).

    .venv/bin/python bench/bench_simulator.py [--nodes 128] [--gpus 8] [--duration 1800] [--sample-interval 1]
    .venv/bin/python bench/bench_simulator.py --nodes 128 --faults 500 --sample-interval 10   # the big one

Prints one JSON line (rates per wall second and per CPU second of this process, since the
machine may be shared): simulated events/s (no I/O), write events/s and MB/s (simulate + Parquet),
read events/s (iter_trace back into Envelopes), the trace size and the fault count.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faultlens.events.trace import iter_trace, write_trace  # noqa: E402
from faultlens.simulator import SimConfig, simulate  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=128)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--duration", type=float, default=None, help="simulated seconds (default 1800, or what --faults need)")
    p.add_argument("--faults", type=int, default=None)
    p.add_argument("--sample-interval", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-pure", action="store_true", help="skip the simulation-only pass (big runs)")
    args = p.parse_args()
    duration = args.duration if args.duration or args.faults else 1800.0
    cfg = SimConfig(nodes=args.nodes, gpus=args.gpus, seed=args.seed, sample_interval_s=args.sample_interval)
    out: dict = {"nodes": args.nodes, "gpus": args.gpus, "sample_interval_s": args.sample_interval}

    if not args.skip_pure:
        run = simulate(cfg, duration=duration, faults=args.faults)
        t0, c0 = time.perf_counter(), time.process_time()
        n = sum(1 for _ in run.events())
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        out.update(simulated_events=n, simulate_s=round(dt, 2), simulate_events_per_s=round(n / dt),
                   simulate_events_per_cpu_s=round(n / dc))

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.parquet"
        run = simulate(cfg, duration=duration, faults=args.faults)
        t0, c0 = time.perf_counter(), time.process_time()
        n = write_trace(path, run.events())
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        size = os.path.getsize(path)
        out.update(duration_s=run.duration, faults=len(run.labels), events=n, simulate_and_write_s=round(dt, 2),
                   write_events_per_s=round(n / dt),
                   write_events_per_cpu_s=round(n / dc), trace_mb=round(size / 1e6, 1))
        t0, c0 = time.perf_counter(), time.process_time()
        m = sum(1 for _ in iter_trace(path))
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        out.update(read_s=round(dt, 2), read_events_per_s=round(m / dt), read_events_per_cpu_s=round(m / dc),
                   read_mb_per_s=round(size / 1e6 / dt, 1))
        assert m == n, (m, n)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
