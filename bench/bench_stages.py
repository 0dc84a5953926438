"""Per-stage diagnosis throughput through Kafka, with 1 and 2 members per stage (issue 11).

    .venv/bin/python -m bench.bench_stages [--nodes 16] [--gpus 8] [--duration 900] [--bootstrap HOST:PORT]

1. Simulates a trace and publishes it to the telemetry topics (a backlog, as after an outage).
2. In the same run: plain kafka-python reads the telemetry topics (the raw rate); then the node
   stage reads the backlog with 1 member and, in a fresh group, with 2 members; then the job stage
   reads what the node stage wrote to `summaries`, with 1 and with 2 members.
3. Prints one JSON line per measurement: records, seconds, records/s, and the ratio to the raw
   client. Members of a stage run as threads of this process (2 cores: 2 members share them).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

from kafka import KafkaConsumer

from bench.common import bench_broker
from faultlens.diagnosis.edge.consumer import diagnose_consumer
from faultlens.events.topics import SUMMARIES, TELEMETRY_TOPICS
from faultlens.events.trace import trace_rows, write_trace
from faultlens.simulator.config import SimConfig
from faultlens.simulator.run import simulate
from faultlens.streams.producer import Producer
from faultlens.streams.replay import replay_trace


def _raw(settings, topics: list[str], expected: int) -> tuple[int, float]:
    consumer = KafkaConsumer(**{**settings.consumer_kwargs(f"bench-raw-{uuid.uuid4().hex[:6]}"),
                                "max_poll_records": 2000})
    consumer.subscribe(topics)
    n, start, idle = 0, None, time.monotonic()
    try:
        while n < expected and time.monotonic() - idle < 5:
            polled = consumer.poll(timeout_ms=200)
            if polled:
                start = start or time.perf_counter()
                idle = time.monotonic()
                n += sum(len(v) for v in polled.values())
                consumer.commit()
        return n, time.perf_counter() - (start or time.perf_counter())
    finally:
        consumer.close()


def _stage(settings, stage: str, members: int, idle_s: float) -> tuple[int, float, int]:
    """(records read, seconds from first to last record, outputs) for ``members`` of a fresh group."""
    group = f"bench-{stage}-{members}-{uuid.uuid4().hex[:6]}"
    built = [diagnose_consumer(settings, None, stage=stage, group=group) for _ in range(members)]
    threads = [threading.Thread(target=r.run, kwargs={"idle_stop_s": idle_s, "handle_signals": False}, daemon=True)
               for r, _ in built]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0 - idle_s  # the idle wait at the end is not work
    with Producer(settings) as producer:
        outputs = sum(producer.send_all(h.flush()) for _, h in built)
        producer.flush()
    records = sum(r.stats.records_in for r, _ in built)
    return records, max(elapsed, 1e-9), outputs + sum(r.stats.outputs for r, _ in built)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--duration", type=float, default=900.0)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--bootstrap", default=None)
    args = ap.parse_args(argv)

    with TemporaryDirectory() as tmp, bench_broker(args.bootstrap) as settings:
        path = Path(tmp) / "stages.parquet"
        run = simulate(SimConfig(nodes=args.nodes, gpus=args.gpus, seed=args.seed, job=f"bench-{uuid.uuid4().hex[:6]}"),
                       faults=4, duration=args.duration)
        write_trace(path, run.events())
        total = trace_rows(path)
        replay_trace(settings, path, speed=0, show_progress=False)
        n, s = _raw(settings, list(TELEMETRY_TOPICS), total)
        raw_rate = n / s if s else 0.0
        print(json.dumps({"stage": "raw kafka-python", "topics": "telemetry.*", "records": n,
                          "seconds": round(s, 2), "per_s": round(raw_rate)}), flush=True)
        for members in (1, 2):
            records, secs, outputs = _stage(settings, "node", members, idle_s=4.0)
            print(json.dumps({"stage": "node", "members": members, "records": records, "seconds": round(secs, 2),
                              "per_s": round(records / secs), "ratio_to_raw": round(records / secs / raw_rate, 2),
                              "summaries_written": outputs}), flush=True)
        for members in (1, 2):
            records, secs, outputs = _stage(settings, "job", members, idle_s=20.0)
            print(json.dumps({"stage": "job", "members": members, "topics": SUMMARIES, "records": records,
                              "seconds": round(secs, 2), "per_s": round(records / secs), "diagnoses": outputs}),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
