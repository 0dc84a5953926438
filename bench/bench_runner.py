"""Consume rate of the GroupRunner (decode + validate + handler + commit) next to raw kafka-python.

    .venv/bin/python -m bench.bench_runner [--messages 200000] [--bootstrap HOST:PORT]

Both read the same topic through their own consumer group in the same run; the ratio is what
faultlens's envelope decoding and at-least-once bookkeeping cost.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

from kafka.admin import KafkaAdminClient, NewTopic

from bench.common import bench_broker, raw_consume_rate
from faultlens.events.envelope import Envelope, encode
from faultlens.streams.producer import Producer
from faultlens.streams.runner.loop import GroupRunner


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--bootstrap")
    args = ap.parse_args()
    with bench_broker(args.bootstrap) as settings:
        topic = f"bench-runner-{uuid.uuid4().hex[:8]}"
        admin = KafkaAdminClient(**settings.common_kwargs())
        admin.create_topics([NewTopic(topic, args.partitions, 1)])
        admin.close()
        # A realistic telemetry payload: one node's GPU sample (8 GPUs, ~25 fields each).
        gpu = {k: 1.0 for k in ("util", "mem_used_mb", "temp_c", "power_w", "sm_clock_mhz", "mem_clock_mhz",
                                "ecc_sbe_volatile", "ecc_dbe_volatile", "pcie_replay", "nvlink_errors")}
        t0 = time.perf_counter()
        with Producer(settings) as p:
            for i in range(args.messages):
                ev = Envelope(ts=1_790_000_000.0 + i, job="bench", node=f"n{i % 128:03d}", source="gpu",
                              kind="sample", data={"gpus": [dict(gpu, index=g) for g in range(8)]})
                p.send(topic, ev.key, encode(ev))
            p.flush()
        produce_s = time.perf_counter() - t0
        raw_n, raw_s = raw_consume_rate(settings, topic, args.messages, f"raw-{topic}")

        count = 0

        def handle(records):
            nonlocal count
            count += len(records)
            return []

        runner = GroupRunner(settings, f"runner-{topic}", [topic], handle)
        start = None
        orig = runner._run_handler

        def timed(records):
            nonlocal start
            if start is None:
                start = time.perf_counter()
            return orig(records)

        runner._run_handler = timed  # start the clock at the first batch, as the raw baseline does
        runner.run(max_records_total=args.messages, handle_signals=False)
        run_s = time.perf_counter() - start
        out = {
            "messages": args.messages,
            "message_bytes": len(encode(ev)),
            "produce_per_s": round(args.messages / produce_s),
            "raw_kafka_python_consume_per_s": round(raw_n / raw_s),
            "runner_consume_per_s": round(count / run_s),
            "runner_vs_raw": round((count / run_s) / (raw_n / raw_s), 3),
        }
        print(json.dumps(out))


if __name__ == "__main__":
    main()
