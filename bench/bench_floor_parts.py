"""Where a diagnosis stage's CPU goes on bench_floor's backlog, step by step of the runner's loop.

    .venv/bin/python -m bench.bench_floor_parts [--stage node|all] [--nodes 32] [--duration 600]
        [--rounds 1] [--bootstrap HOST:PORT]

bench/bench_floor.py gives a stage's rate; this gives its loop's thread CPU per message, split as
the runner spends it (streams/runner/loop.py): the client's ``poll``, ``split`` (decoding, the NVML
samples only peeked, and placing in event time), ``ordered`` (the event-time merge releasing
records), ``complete`` (the deferred samples read whole), ``handler`` (the stage's detectors),
``deliver`` (sending and committing) and ``announce`` (watermarks), besides the main thread's and
the process's whole CPU (the client's I/O thread included). The run includes the group join and
the idle tail (``idle_s``), so ``main`` exceeds the parts' sum by a little. Issue 56: which part a
faster detector path can and cannot move.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections import Counter
from typing import Any

from bench.bench_floor import write_backlog
from bench.common import bench_broker
from faultlens.diagnosis.edge.consumer import diagnose_consumer

# (object attribute on the runner, method, part name); "consumer" is wrapped once it is opened.
PARTS = (("", "_run_handler", "handler"), ("intake", "split", "split"), ("", "_released", "complete"),
         ("", "_deliver_and_commit", "deliver"), ("", "_announce", "announce"), ("order", "ordered", "ordered"))


def _timed(obj: Any, name: str, part: str, spent: Counter) -> None:
    """``obj.name`` replaced by itself, timed in this thread's CPU seconds under ``part``."""
    inner = getattr(obj, name)

    def timed(*args, **kwargs):
        t = time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[part] += time.thread_time() - t

    setattr(obj, name, timed)


def measure(settings, stage: str, idle_s: float = 8.0) -> dict:
    runner, _ = diagnose_consumer(settings, None, stage=stage, group=f"parts-{stage}-{uuid.uuid4().hex[:6]}")
    spent: Counter = Counter()
    for attr, name, part in PARTS:
        obj = getattr(runner, attr) if attr else runner
        if obj is not None:
            _timed(obj, name, part, spent)
    open_consumer = runner._consumer

    def opened():
        consumer = open_consumer()
        _timed(consumer, "poll", "poll", spent)
        return consumer

    runner._consumer = opened
    main, process = time.thread_time(), time.process_time()
    stats = runner.run(idle_stop_s=idle_s, handle_signals=False)
    spent["main"] = time.thread_time() - main
    spent["process"] = time.process_time() - process
    n = max(stats.records_in, 1)
    return {"stage": stage, "records": stats.records_in,
            "cpu_s": {k: round(v, 2) for k, v in spent.items()},
            "us_per_message": {k: round(1e6 * v / n, 2) for k, v in spent.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage", choices=["node", "all"], default="node")
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--duration", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--bootstrap", help="a Kafka cluster (default: an embedded broker)")
    args = ap.parse_args(argv)
    with bench_broker(args.bootstrap) as settings:
        total = write_backlog(settings.bootstrap, args.nodes, args.duration)
        print(json.dumps({"backlog": total}), flush=True)
        for _ in range(args.rounds):
            print(json.dumps(measure(settings, args.stage)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
