"""The fleet memory's costs: judging diagnoses, the size of a machine's record, and how long a
restarted remediation member takes to read the `fleet` topic back.

    .venv/bin/python -m bench.bench_fleet --machines 10000 [--faults 4] [--bootstrap HOST:PORT]

Prints JSON lines: ``observe`` (diagnoses judged per second, in memory), ``record_bytes`` (p50 /
max of one machine's message), ``load`` (seconds for a fresh FleetLog to read every record),
``refresh_idle`` (one tick's read when nothing is new: the cost every member pays each second).
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

import numpy as np

from bench.common import bench_broker
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.remediation.fleet import Fleet
from faultlens.remediation.fleet_log import FleetLog

CLASSES = ("gpu_lost", "nvlink", "cuda_error", "user_code", "nccl_error", "app_fault")


def diagnoses(machines: int, faults: int, t0: float) -> list[Diagnosis]:
    rng = np.random.default_rng(7)
    out = []
    for i in range(machines * faults):
        node = f"node-{rng.integers(machines):05d}"
        ts = t0 + i * 30.0
        out.append(Diagnosis(job=f"job-{rng.integers(200)}", ts=ts, onset=ts, fault=CLASSES[rng.integers(len(CLASSES))],
                             action="evict", nodes=(node,), confidence=0.9, detail="bench"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--machines", type=int, default=10_000)
    ap.add_argument("--faults", type=int, default=4, help="diagnoses per machine on average")
    ap.add_argument("--bootstrap")
    args = ap.parse_args()

    ds = diagnoses(args.machines, args.faults, time.time() - 86400)
    fleet = Fleet()
    start = time.perf_counter()
    lemons = sum(len(fleet.observe_diagnosis(d, d.ts)) for d in ds)
    took = time.perf_counter() - start
    print(json.dumps({"stage": "observe", "diagnoses": len(ds), "per_s": round(len(ds) / took), "lemons": lemons}))
    sizes = np.array([len(r.encode()) for r in fleet.records.values()])
    print(json.dumps({"stage": "record_bytes", "machines": len(sizes), "p50": int(np.median(sizes)),
                      "max": int(sizes.max()), "total_mb": round(sizes.sum() / 1e6, 2)}))

    with bench_broker(args.bootstrap) as settings:
        topic = f"fleet-bench-{uuid.uuid4().hex[:6]}"
        writer = FleetLog(settings, topic)
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic
        admin = KafkaAdminClient(**settings.common_kwargs())
        admin.create_topics([NewTopic(topic, 3, 1, topic_configs={"cleanup.policy": "compact"})])
        admin.close()
        start = time.perf_counter()
        writer.save(fleet.records)
        print(json.dumps({"stage": "publish", "records": len(fleet.records),
                          "seconds": round(time.perf_counter() - start, 2)}))
        writer.close()
        reader = FleetLog(settings, topic)
        start = time.perf_counter()
        loaded = reader.load()
        print(json.dumps({"stage": "load", "records": len(loaded), "seconds": round(time.perf_counter() - start, 2)}))
        idle = []
        for _ in range(20):
            t = time.perf_counter()
            reader.refresh()
            idle.append(time.perf_counter() - t)
        print(json.dumps({"stage": "refresh_idle", "p50_ms": round(1000 * float(np.median(idle)), 2),
                          "max_ms": round(1000 * max(idle), 2)}))
        reader.close()


if __name__ == "__main__":
    main()
