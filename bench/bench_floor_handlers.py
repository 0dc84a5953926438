"""The two diagnosis handlers alone on bench_floor's backlog, in memory: CPU per event, no Kafka.

    .venv/bin/python -m bench.bench_floor_handlers [--nodes 32] [--duration 300] [--batch 2000]
        [--repeat 3] [--stages node all] [--profile node|all]

bench/bench_floor.py measures the stages whole, client and event-time merge included, on a
loaded machine; this measures what the handlers themselves cost per message, which is what
batching the detectors changes (issue 56). The backlog's messages (bench_floor.backlog) are
decoded as the stages decode them (the NVML samples by their typed reader), placed in event-time
order as the merge releases them, and handed over in batches of ``--batch`` (the runner's
``max_poll_records``): to NodeStageHandler (`diagnose --stage node`) and to DiagnoseHandler over
a fresh engine that knows the topology (`--stage all`), under the runner's collector settings.
Best of ``--repeat`` CPU times;
``--profile`` prints cProfile's top functions for one handler instead.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import time

from bench.bench_floor import backlog
from faultlens.diagnosis.edge.consumer import TELEMETRY_DECODERS, DiagnoseHandler
from faultlens.diagnosis.edge.node_consumer import NodeStageHandler
from faultlens.diagnosis.engine.core import Engine
from faultlens.events.envelope import decode
from faultlens.events.topics import JOBS, telemetry_partition
from faultlens.streams.gc_policy import tune_for_streaming
from faultlens.streams.runner.loop import Record


def records(nodes: int, duration: int) -> tuple[Record, list[Record]]:
    """The topology record, and the telemetry as records in event-time order."""
    topology = None
    out = []
    for i, (topic, key, raw) in enumerate(backlog(nodes, duration, t0=1_767_225_600.0)):
        value = TELEMETRY_DECODERS.get(topic, decode)(raw)
        record = Record(topic, 0 if topic == JOBS else telemetry_partition(key.decode()), i, key, value, 0,
                        value.ts, None, None, raw)
        if topic == JOBS:
            topology = record
        else:
            out.append(record)
    out.sort(key=lambda r: r.event_ts)
    assert topology is not None
    return topology, out


def handler(stage: str, topology: Record):
    if stage == "node":
        h = NodeStageHandler()
    else:
        h = DiagnoseHandler(Engine())
    h.handle([topology])
    return h


def run(stage: str, topology: Record, telemetry: list[Record], batch: int) -> tuple[float, int]:
    h = handler(stage, topology)
    t0 = time.process_time()
    outputs = 0
    for i in range(0, len(telemetry), batch):
        outputs += len(h.handle(telemetry[i:i + batch]))
    outputs += len(h.flush())
    return time.process_time() - t0, outputs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--duration", type=int, default=300)
    ap.add_argument("--batch", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", choices=["node", "all"])
    ap.add_argument("--stages", nargs="*", default=["node", "all"], choices=["node", "all"])
    args = ap.parse_args(argv)
    topology, telemetry = records(args.nodes, args.duration)
    tune_for_streaming()  # the runner's collector settings (streams/gc_policy.py)
    print(json.dumps({"load_average": os.getloadavg(), "records": len(telemetry), "batch": args.batch}), flush=True)
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        run(args.profile, topology, telemetry, args.batch)
        profiler.disable()
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(40)
        return 0
    for stage in args.stages:
        best, outputs = min(run(stage, topology, telemetry, args.batch) for _ in range(args.repeat))
        print(json.dumps({"stage": stage, "cpu_s": round(best, 3), "outputs": outputs,
                          "us_per_event": round(1e6 * best / len(telemetry), 2),
                          "events_per_cpu_s": round(len(telemetry) / best)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
