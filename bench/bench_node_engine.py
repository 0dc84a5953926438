"""CPU cost of the node stage and of the whole engine per event, no Kafka (issue 13).

    .venv/bin/python -m bench.bench_node_engine TRACE [TRACE ...] [--repeat 3]

Reads each trace into memory first (decoding is not measured), then, best of ``--repeat`` runs:
- ``node``: what the node-stage consumer does per record besides Kafka: payload check, log-line
  parsing, the node-local rules and feature windows (NodeStageHandler.handle on in-memory records);
- ``analyze``: the whole engine (both stages) as `faultlens analyze` runs it.
Prints one JSON line per trace and measurement: events, CPU seconds, events per CPU-second and
microseconds per event.
"""

from __future__ import annotations

import argparse
import json
import time

from faultlens.diagnosis.edge.node_consumer import NodeStageHandler
from faultlens.diagnosis.engine.core import Engine
from faultlens.diagnosis.engine.offline import analyze
from faultlens.events.trace import iter_trace
from faultlens.streams.runner.loop import Record


def _node(events: list) -> float:
    handler = NodeStageHandler()
    records = [Record("telemetry", 0, i, None, e, 0) for i, e in enumerate(events)]
    t0 = time.process_time()
    for i in range(0, len(records), 500):
        handler.handle(records[i:i + 500])
    handler.flush()
    return time.process_time() - t0


def _analyze(events: list) -> float:
    t0 = time.process_time()
    analyze(events, Engine())
    return time.process_time() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", choices=("node", "analyze"))
    args = p.parse_args()
    for path in args.traces:
        events = list(iter_trace(path))
        for name, run in (("node", _node), ("analyze", _analyze)):
            if args.only and name != args.only:
                continue
            cpu = min(run(events) for _ in range(args.repeat))
            print(json.dumps({"trace": path, "stage": name, "events": len(events), "cpu_s": round(cpu, 3),
                              "events_per_cpu_s": round(len(events) / cpu), "us_per_event": round(1e6 * cpu / len(events), 1)}),
                  flush=True)


if __name__ == "__main__":
    main()
