"""The Kafka client's fetch settings and the client itself, measured on bench_floor's backlog (issue 56).

    .venv/bin/python -m bench.bench_floor_fetch [--nodes 32] [--duration 600] [--rounds 2]
        [--stages node all] [--configs default partition_4m ...] [--bootstrap HOST:PORT]

bench/bench_floor.py writes the held-out backlog once; each round then runs every configuration
(below) one after the other, each stage in a fresh consumer group, timed as bench_floor times a
stage (from its first batch read to its last handled; CPU of this process, the client's I/O thread
included). The order of the configurations turns each round, so none always runs first or last
on a machine whose load drifts. Printed: one JSON line a run, then per configuration the medians
and their ratio to ``default`` (faultlens's own settings, streams/config.py) within each round.

What each setting can change on a backlog: ``fetch_min_bytes`` and ``fetch_max_wait_ms`` only
how long the broker holds a fetch that has less data than asked (a backlog always has more);
``max_partition_fetch_bytes`` and ``fetch_max_bytes`` how many records one fetch brings, so how
many fetch requests, decompressions and Python-side record batches a message costs; the client
(``confluent``: librdkafka, faultlens[fast]) everything below the handler.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
from dataclasses import dataclass, field
from typing import Any

from bench.bench_floor import GPUS, write_backlog
from bench.bench_throughput import _stage
from bench.common import bench_broker
from faultlens.streams.config import KafkaSettings

KIB = 1024
# name → (client, kafka-python consumer settings over faultlens's own)
CONFIGS: dict[str, tuple[str, dict[str, int]]] = {
    "default": ("kafka-python", {}),
    "min_bytes_64k": ("kafka-python", {"fetch_min_bytes": 64 * KIB}),
    "wait_500ms": ("kafka-python", {"fetch_max_wait_ms": 500}),
    "partition_256k": ("kafka-python", {"max_partition_fetch_bytes": 256 * KIB}),
    "partition_4m": ("kafka-python", {"max_partition_fetch_bytes": 4096 * KIB}),
    "fetch_max_8m": ("kafka-python", {"fetch_max_bytes": 8192 * KIB}),
    "confluent": ("confluent", {}),
}


@dataclass
class TunedSettings(KafkaSettings):
    """KafkaSettings whose kafka-python consumers get ``consumer_overrides`` over the usual kwargs."""

    consumer_overrides: dict[str, Any] = field(default_factory=dict)

    def consumer_kwargs(self, group: str | None) -> dict[str, Any]:
        return {**super().consumer_kwargs(group), **self.consumer_overrides}


def tuned(base: KafkaSettings, name: str) -> TunedSettings:
    client, overrides = CONFIGS[name]
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    return TunedSettings(**{**fields, "client": client}, consumer_overrides=dict(overrides))


def run(settings: KafkaSettings, stage: str) -> dict:
    records, clock, outputs, _ = _stage(settings, stage, idle_s=8.0)
    wall, cpu = clock.seconds()
    return {"records": records, "outputs": outputs, "seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
            "events_per_s": round(records / wall) if wall > 0 else None,
            "events_per_cpu_s": round(records / cpu) if cpu > 0 else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--duration", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--stages", nargs="*", default=["node", "all"], choices=["node", "all"])
    ap.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--bootstrap", help="a Kafka cluster (default: an embedded broker)")
    args = ap.parse_args(argv)
    names = list(dict.fromkeys(["default", *args.configs]))  # every ratio is to default, in its round
    print(json.dumps({"load_average": os.getloadavg(), "cpus": os.cpu_count()}), flush=True)
    rows: dict[tuple[str, str], list[dict]] = {}
    with bench_broker(args.bootstrap) as base:
        assert base.bootstrap is not None
        total = write_backlog(base.bootstrap, args.nodes, args.duration)
        print(json.dumps({"backlog": total, "gpus": args.nodes * GPUS}), flush=True)
        for round_ in range(args.rounds):
            order = names[round_ % len(names):] + names[:round_ % len(names)]
            measured: dict[tuple[str, str], dict] = {}
            for name in order:
                for stage in args.stages:
                    row = run(tuned(base, name), stage)
                    measured[(name, stage)] = row
                    print(json.dumps({"round": round_ + 1, "config": name, "stage": stage, **row,
                                      "load_average": round(os.getloadavg()[0], 1)}), flush=True)
            for (name, stage), row in measured.items():
                ref = measured[("default", stage)]
                row["cpu_ratio"] = round(row["events_per_cpu_s"] / ref["events_per_cpu_s"], 3)
                row["wall_ratio"] = round(row["events_per_s"] / ref["events_per_s"], 3)
                rows.setdefault((name, stage), []).append(row)
    for (name, stage), runs in rows.items():
        print(json.dumps({"config": name, "stage": stage, "median_of": len(runs),
                          **{k: statistics.median(r[k] for r in runs)
                             for k in ("events_per_s", "events_per_cpu_s", "wall_ratio", "cpu_ratio")}}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
