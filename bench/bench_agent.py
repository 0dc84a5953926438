"""Node agent costs: spool throughput, and the publisher against plain kafka-python on one broker.

    .venv/bin/python -m bench.bench_agent [--events 20000] [--bootstrap HOST:PORT]

Prints one JSON line per measurement:
- ``spool``: 1 KB GPU-sample records appended, then read and acknowledged (records/s each way),
  and the same with the bound hit (the cost of dropping the oldest samples and compacting).
- ``publisher``: the agent's Publisher (queue + batch + acknowledged flush) sending N events, and
  plain kafka-python sending the same encoded events and flushing once; ``ratio`` is publisher
  time over raw time, measured in this run.
- ``outage_drain``: N events spooled while no broker answers, then sent when it does.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid

from kafka import KafkaProducer

from bench.common import bench_broker
from faultlens.collectors.publisher import Publisher
from faultlens.collectors.spool import Spool
from faultlens.collectors.spool_format import SpooledRecord
from faultlens.events.envelope import Envelope, encode
from faultlens.events.topics import topic_for
from faultlens.streams.config import KafkaSettings


def _events(n: int, job: str) -> list[Envelope]:
    now = time.time()
    gpus = [{"index": i, "util": 97, "temp_c": 70, "power_w": 650.0, "throttle": []} for i in range(8)]
    return [Envelope(ts=now + i * 1e-3, job=job, node=f"n{i % 16:03d}", source="gpu", kind="sample",
                     data={"gpus": gpus, "interval_s": 1.0, "i": i}) for i in range(n)]


def bench_spool(n: int) -> dict:
    records = [SpooledRecord("telemetry.gpu", b"n001", b"x" * 1024) for _ in range(n)]
    with tempfile.TemporaryDirectory() as d:
        spool = Spool(d, 1 << 30)
        t0 = time.perf_counter()
        for r in records:
            spool.append(r, droppable=True)
        t_append = time.perf_counter() - t0
        t0 = time.perf_counter()
        while len(spool):
            chunk = spool.peek(500)
            spool.ack(len(chunk))
        t_drain = time.perf_counter() - t0
        spool.close()
    with tempfile.TemporaryDirectory() as d:
        bounded = Spool(d, 1024 * 1024)  # ~1000 records fit
        t0 = time.perf_counter()
        for r in records:
            bounded.append(r, droppable=True)
        t_bounded = time.perf_counter() - t0
        dropped, compactions = bounded.stats.dropped, bounded.stats.compactions
        bounded.close()
    return {"bench": "spool", "records": n, "append_per_s": round(n / t_append), "drain_per_s": round(n / t_drain),
            "bounded_append_per_s": round(n / t_bounded), "bounded_dropped": dropped, "compactions": compactions}


def bench_publisher(settings: KafkaSettings, n: int) -> dict:
    job = f"bench-{uuid.uuid4().hex[:8]}"
    events = _events(n, job)
    encoded = [(topic_for(e), e.key, encode(e)) for e in events]
    raw = KafkaProducer(**settings.producer_kwargs())
    t0 = time.perf_counter()
    for topic, key, value in encoded:
        raw.send(topic, key=key, value=value)
    raw.flush()
    t_raw = time.perf_counter() - t0
    raw.close()
    with tempfile.TemporaryDirectory() as d:
        pub = Publisher(settings, Spool(d, 1 << 30), create_topics=False).start()
        while not pub.connected:
            time.sleep(0.01)
        t0 = time.perf_counter()
        for e in events:
            pub.publish(e)
        while pub.stats.delivered < n:
            time.sleep(0.001)
        t_pub = time.perf_counter() - t0
        spooled = pub.stats.spooled
        pub.stop()
    return {"bench": "publisher", "events": n, "raw_s": round(t_raw, 3), "publisher_s": round(t_pub, 3),
            "raw_per_s": round(n / t_raw), "publisher_per_s": round(n / t_pub), "ratio": round(t_pub / t_raw, 2),
            "spooled": spooled}


def bench_outage_drain(settings: KafkaSettings, n: int) -> dict:
    job = f"bench-{uuid.uuid4().hex[:8]}"
    events = _events(n, job)
    with tempfile.TemporaryDirectory() as d:
        down = Publisher(KafkaSettings(bootstrap="127.0.0.1:1"), Spool(d, 1 << 30), create_topics=False).start()
        t0 = time.perf_counter()
        for e in events:
            down.publish(e)
        while down.stats.spooled < n:
            time.sleep(0.001)
        t_spool = time.perf_counter() - t0
        down.stop(timeout=10)
        # The broker "comes back": a new publisher finds the spool and sends it.
        up = Publisher(settings, Spool(d, 1 << 30), create_topics=False)
        waiting = len(up.spool)
        t0 = time.perf_counter()
        up.start()
        while len(up.spool):
            time.sleep(0.005)
        t_drain = time.perf_counter() - t0
        up.stop()
    return {"bench": "outage_drain", "events": n, "spool_per_s": round(n / t_spool), "waiting": waiting,
            "drain_s": round(t_drain, 3), "drain_per_s": round(waiting / t_drain)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--bootstrap", help="a Kafka cluster (default: an embedded broker for the run)")
    args = parser.parse_args()
    print(json.dumps(bench_spool(args.events)), flush=True)
    with bench_broker(args.bootstrap) as settings:
        print(json.dumps(bench_publisher(settings, args.events)), flush=True)
        print(json.dumps(bench_outage_drain(settings, args.events)), flush=True)


if __name__ == "__main__":
    main()
