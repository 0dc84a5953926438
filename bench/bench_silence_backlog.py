"""Split stages read N seeds of several trace shapes as one backlog (issue 32): per case, the acting
diagnoses missing and extra against `faultlens analyze`, and the healthy machines evicted.

    .venv/bin/python -m bench.bench_silence_backlog [--seeds 6] [--node-members 2] [--job-members 2]
        [--client kafka-python|confluent] [--starve] [--shapes hang_16x8_phased,sim-hang,...]

Every case is its own job in one trace, replayed into a fresh embedded broker before any
node-stage member starts; the job stage's wall clock then moves each job's time after its stream
ends (grace 5 s, up 50 s past the end), as on a live deployment whose jobs end. ``--starve`` runs
a CPU burner on every core for the whole run (the members lag by as much as the machine makes
them). The shapes and the harness: bench/testbed/backlog_split.py.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from bench.testbed.backlog_split import FOREIGN_SHAPES, SIM_SHAPES, cases, run_backlog
from faultlens.streams.admin import ensure_topics
from faultlens.streams.broker import EmbeddedBroker
from faultlens.streams.config import KafkaSettings


def _burn(stop_at: float) -> None:
    x = 0
    while time.time() < stop_at:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--seed-from", type=int, default=0, help="the first seed")
    ap.add_argument("--node-members", type=int, default=2)
    ap.add_argument("--job-members", type=int, default=2)
    ap.add_argument("--client", default="kafka-python")
    ap.add_argument("--starve", action="store_true", help="burn every core while the stages run")
    ap.add_argument("--burners", type=int, default=os.cpu_count() or 2, help="with --starve: how many processes")
    ap.add_argument("--shapes", default=",".join((*FOREIGN_SHAPES, *SIM_SHAPES)))
    args = ap.parse_args()
    shapes = tuple(s for s in args.shapes.split(",") if s)
    t0 = time.monotonic()
    all_cases = cases(range(args.seed_from, args.seed_from + args.seeds), shapes)
    events = sum(len(c.events) for c in all_cases)
    print(f"{len(all_cases)} cases, {events} events, built and analysed offline in {time.monotonic() - t0:.0f}s",
          flush=True)
    burners: list[multiprocessing.Process] = []
    with TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        settings = KafkaSettings(bootstrap=broker.bootstrap, client=args.client)
        ensure_topics(settings)
        if args.starve:
            stop_at = time.time() + 3600
            burners = [multiprocessing.Process(target=_burn, args=(stop_at,), daemon=True)
                       for _ in range(args.burners)]
            for b in burners:
                b.start()
        t1 = time.monotonic()
        try:
            outcomes = run_backlog(settings, all_cases, Path(tmp), node_members=args.node_members,
                                   job_members=args.job_members)
        finally:
            for b in burners:
                b.terminate()
        wall = time.monotonic() - t1
    healthy = same = 0
    for o in outcomes:
        healthy += len(o.healthy_evicted)
        same += not o.missing and not o.extra
        print(f"{o.case.name:24s} live {len(o.live):3d} offline {len(o.case.offline):3d} missing {len(o.missing)} "
              f"extra {len(o.extra)} healthy-evicted {sorted(o.healthy_evicted)}", flush=True)
        for fault, nodes, action, group in sorted(o.missing | o.extra):
            side = "missing" if (fault, nodes, action, group) in o.missing else "extra"
            print(f"    {side}: {fault} {action} {nodes} {group or ''}")
        for d in o.live:
            if d.action in ("evict", "evict_reset_gpu", "inspect_hardware") and set(d.nodes) & o.healthy_evicted:
                print(f"    healthy evicted at {d.ts - o.case.events[0].ts:.0f}s of the job: {d.detail}")
    print(f"node members {args.node_members}, job members {args.job_members}, client {args.client}, "
          f"starved {args.starve}: {same}/{len(outcomes)} cases act as offline, healthy machines evicted "
          f"{healthy}, stages ran {wall:.0f}s")


if __name__ == "__main__":
    main()
