"""The floor under diagnosis, on a held-out backlog, in one run (issue 56).

    .venv/bin/python -m bench.bench_floor [--nodes 32] [--duration 600] [--rounds 2] [--bootstrap HOST:PORT]
        [--skip all]

1. A backlog written outside the project: a bare kafka-python producer (lz4, its default
   partitioner, orjson) writes, per node of 8 GPUs and per second, one NVML sample of 8 GPUs,
   one `train`/`step` per rank (8) and one heartbeat, by docs/events.md's payloads, into a fresh
   embedded broker; the job's topology first. Nothing of faultlens's simulator or encoder writes
   it, so it is data the stages were not shaped on.
2. Each round, one after the other on the same topics, each in a fresh consumer group:
   - **raw**: a bare kafka-python consumer group (kafka-python's own defaults: poll, count,
     commit), the baseline every ratio is to;
   - **raw + decode**: the same, with each message decoded as the stages decode it and its payload
     checked (streams/intake.py's decoders, events/payloads.check_payload): the floor of a Python
     consumer that reads these messages;
   - `diagnose --stage node`, `--stage job` (it reads the summaries every node run so far wrote:
     its rate is in telemetry-equivalent events/s) and `--stage all`, each timed as
     bench/bench_throughput.py times a stage (from the first batch read to the last handled).
   The rounds repeat the whole sequence, so each ratio is taken within a round on one machine load.
3. How many processes a fleet needs: at 1 Hz, per 8-GPU node, 8 rank steps + 1 NVML sample + 1
   heartbeat = 10 messages/s (no NIC samples, log lines or stacks: those are rarer or smaller in
   count); for 10,000 and 100,000 GPUs, messages/s over the measured rate of `--stage all` (one
   process does both stages) and of the node stage (the split deployment's node members): by wall
   here (``processes_at_1hz``) and per CPU-second (``processes_at_1hz_own_core``: a core each).

One JSON line per measurement, then the medians over the rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import time
import uuid

import orjson

from bench.bench_throughput import _Clock, _raw, _stage
from bench.common import bench_broker
from faultlens.events.topics import GPU, HEARTBEAT, JOBS, TRAIN
from faultlens.streams.config import KafkaSettings

GPUS = 8
MESSAGES_PER_NODE_S = GPUS + 2  # steps of every rank, one NVML sample, one heartbeat


def _gpu(i: int, t: int) -> dict:
    return {"index": i, "uuid": f"GPU-{i:08x}-held-out", "util": 97.0 + (t + i) % 3, "mem_util": 41.0,
            "mem_used_mb": 70123, "mem_total_mb": 81559, "temp_c": 61.0 + (t + i) % 4, "power_w": 612.5,
            "power_limit_w": 700.0, "sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "sm_clock_max_mhz": 1980,
            "throttle": [], "ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0, "ecc_sbe_aggregate": 0,
            "ecc_dbe_aggregate": 0, "remap_correctable": 0, "remap_uncorrectable": 0, "remap_pending": False,
            "remap_failure": False, "retired_pages_sbe": 0, "retired_pages_dbe": 0, "retired_pending": False,
            "pcie_replay": 0, "nvlink_errors": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0},
            "recovery_action": 0}


def _envelope(source: str, kind: str, ts: float, job: str, node: str, data: dict) -> bytes:
    return orjson.dumps({"v": 1, "id": uuid.uuid4().hex, "ts": ts, "job": job, "node": node, "source": source,
                         "kind": kind, "data": data})


def backlog(nodes: int, duration: int, job: str = "held-out", t0: float | None = None):
    """The backlog's messages in the order the producer sends them: (topic, key, value bytes),
    the job's topology first (the module's doc)."""
    names = [f"h{n:04d}" for n in range(nodes)]
    ranks = [{"rank": r, "node": names[r // GPUS], "tp": r % GPUS, "pp": (r // GPUS) % 4, "dp": r // (GPUS * 4)}
             for r in range(nodes * GPUS)]
    if t0 is None:
        t0 = float(int(time.time()) - duration - 120)  # a backlog: all of it in the past
    topology = {"tp": GPUS, "pp": 4, "dp": max(1, nodes // 4), "ranks": ranks, "gpus_per_node": GPUS}
    yield JOBS, job.encode(), _envelope("job", "topology", t0 - 1.0, job, "-", topology)
    for t in range(duration):
        for n, node in enumerate(names):
            key = node.encode()
            ts = t0 + t + 0.001 * n
            yield GPU, key, _envelope(
                "gpu", "sample", ts, job, node, {"gpus": [_gpu(i, t) for i in range(GPUS)], "interval_s": 1.0})
            for g in range(GPUS):
                rank = n * GPUS + g
                step_time = 0.95 + 0.01 * ((t * 7 + rank) % 5)
                yield TRAIN, key, _envelope("train", "step", ts + 0.2, job, node, {
                    "rank": rank, "step": t, "loss": 2.5 / (1.0 + 0.01 * t) + 0.001 * (rank % 7),
                    "grad_norm": 1.0 + 0.01 * (t % 11), "step_time_s": step_time, "compute_s": 0.7 * step_time,
                    "tokens": 65536, "tokens_per_s": 65536 / step_time, "mfu": 0.41})
            yield HEARTBEAT, key, _envelope(
                "heartbeat", "beat", ts + 0.5, job, node,
                {"seq": t, "pids": [1000 + g for g in range(GPUS)], "sources": {"nvml": "ok", "kernel": "ok"}})


def write_backlog(bootstrap: str, nodes: int, duration: int, job: str = "held-out") -> int:
    """The backlog (the module's doc), written by a bare kafka-python producer; its message count
    (the topology record not counted)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="lz4", linger_ms=20,
                             batch_size=256 * 1024)
    sent = 0
    for topic, key, value in backlog(nodes, duration, job):
        producer.send(topic, key=key, value=value)
        sent += topic != JOBS
    producer.flush()
    producer.close()
    return sent


def _rates(n: int, clock: _Clock) -> dict:
    wall, cpu = clock.seconds()
    return {"records": n, "seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
            "events_per_s": round(n / wall) if wall > 0 else None,
            "events_per_cpu_s": round(n / cpu) if cpu > 0 else None}


def raw(settings: KafkaSettings, expected: int, decode: bool) -> tuple[int, _Clock]:
    """A bare kafka-python group member (its defaults, not faultlens's settings): poll, count,
    commit; with ``decode``, each message also decoded and its payload checked as the stages do."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=settings.bootstrap, group_id=f"bench-bare-{uuid.uuid4().hex[:6]}",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    return _raw(settings, expected, decode=decode, consumer=consumer, check=decode)


def fleet(rate: float | None) -> dict:
    """Processes at ``rate`` events/s for 10,000 and 100,000 GPUs at 1 Hz (the module's doc)."""
    if not rate:
        return {}
    return {f"{gpus}_gpus": math.ceil(gpus // GPUS * MESSAGES_PER_NODE_S / rate) for gpus in (10_000, 100_000)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--duration", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--client", default="kafka-python", help="the stages' client (the raw runs are kafka-python)")
    ap.add_argument("--bootstrap", help="a Kafka cluster (default: an embedded broker)")
    ap.add_argument("--skip", nargs="*", default=[], choices=["decode", "node", "job", "all"])
    args = ap.parse_args(argv)
    print(json.dumps({"load_average": os.getloadavg(), "cpus": os.cpu_count()}), flush=True)
    table: dict[str, list[dict]] = {}
    with bench_broker(args.bootstrap) as base:
        settings = dataclasses.replace(base, client=args.client)
        t = time.perf_counter()
        total = write_backlog(base.bootstrap, args.nodes, args.duration)
        print(json.dumps({"backlog": total, "nodes": args.nodes, "gpus": args.nodes * GPUS,
                          "written_s": round(time.perf_counter() - t, 1)}), flush=True)
        node_runs = 0
        for round_ in range(1, args.rounds + 1):
            rows = {"raw": _rates(*raw(base, total, decode=False))}
            if "decode" not in args.skip:
                rows["raw + decode + check"] = _rates(*raw(base, total, decode=True))
            for stage in ("node", "job", "all"):
                if stage in args.skip:
                    continue
                records, clock, outputs, _ = _stage(settings, stage, idle_s=8.0)
                row = {**_rates(records, clock), "outputs": outputs}
                if stage == "node":
                    node_runs += 1
                if stage == "job":  # its records are summaries: the telemetry they stand for
                    wall, cpu = clock.seconds()
                    copies = max(node_runs, 1)
                    row["telemetry_equivalent_per_s"] = round(copies * total / wall) if wall > 0 else None
                    row["telemetry_equivalent_per_cpu_s"] = round(copies * total / cpu) if cpu > 0 else None
                rows[f"diagnose --stage {stage}"] = row
            raw_rate, raw_cpu = rows["raw"]["events_per_s"], rows["raw"]["events_per_cpu_s"]
            for name, row in rows.items():
                rate = row.get("telemetry_equivalent_per_s") or row["events_per_s"]
                cpu = row.get("telemetry_equivalent_per_cpu_s") or row["events_per_cpu_s"]
                # by wall, and per CPU-second: on shared cores the second moves less between runs
                row["ratio_to_raw"] = round(rate / raw_rate, 3) if rate and raw_rate else None
                row["cpu_ratio_to_raw"] = round(cpu / raw_cpu, 3) if cpu and raw_cpu else None
                if "raw + decode + check" in rows and name.startswith("diagnose --stage node"):
                    floor = rows["raw + decode + check"]
                    row["ratio_to_decode"] = round(rate / floor["events_per_s"], 3) if rate else None
                    row["cpu_ratio_to_decode"] = round(cpu / floor["events_per_cpu_s"], 3) if cpu else None
                print(json.dumps({"round": round_, "measure": name, "client": args.client if "stage" in name
                                  else "kafka-python", **row}), flush=True)
                table.setdefault(name, []).append(row)
    for name, rows in table.items():
        rate = statistics.median(r.get("telemetry_equivalent_per_s") or r["events_per_s"] or 0 for r in rows)
        summary = {"median_of": len(rows), "measure": name, "events_per_s": round(rate)}
        for ratio in ("ratio_to_raw", "cpu_ratio_to_raw", "ratio_to_decode", "cpu_ratio_to_decode"):
            if any(ratio in r for r in rows):
                summary[ratio] = round(statistics.median(r.get(ratio) or 0 for r in rows), 3)
        if name in ("diagnose --stage all", "diagnose --stage node"):
            # By wall on this machine (its load and the broker beside it included), and with a core
            # of its own each (per CPU-second: the rate a process reads when it never waits for CPU).
            summary["processes_at_1hz"] = fleet(rate)
            per_cpu = statistics.median(r.get("events_per_cpu_s") or 0 for r in rows)
            summary["processes_at_1hz_own_core"] = fleet(per_cpu)
        print(json.dumps(summary), flush=True)
    print(json.dumps({"load_average": os.getloadavg()}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
