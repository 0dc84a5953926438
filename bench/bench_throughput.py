"""Throughput of every Kafka hop with both clients, in one run on the same topics (issue 13).

    .venv/bin/python -m bench.bench_throughput [--nodes 64] [--gpus 8] [--duration 600] [--seed 1]
        [--trace FILE] [--bootstrap HOST:PORT] [--rss-nodes 10000] [--rss-duration 20] [--no-rss]

1. Simulates a trace (or reads --trace FILE): NVML samples, per-rank step telemetry, heartbeats,
   log lines, as `faultlens simulate` writes them.
2. `replay` with each client (`faultlens replay --as-fast-as-possible`): confluent-kafka into the
   broker the rest reads from, kafka-python into a second, throw-away broker (the topics must hold
   the trace once).
3. On the same telemetry topics: a raw kafka-python consumer group and a raw confluent-kafka one
   (poll, count, commit: nothing else), each again decoding every message as the stages do and
   nothing more (the floor of a Python consumer of these messages), then `faultlens diagnose --stage node`, `--stage job` (it
   reads what the node stage wrote to `summaries`) and `--stage all`, each with each client, each
   in a fresh group. A stage's rate runs from the first batch of its topics read to the last batch
   handled (a consumer's from its first batch to its last): a stage reads and decodes most of a
   short backlog before event time lets the first record go.
4. Peak RSS of the engine (`faultlens analyze`'s) over a trace of --rss-nodes nodes, in a
   subprocess of its own.

One JSON line per measurement: records, seconds, events/s, GPU-samples/s (one GPU's NVML
sample: an 8-GPU node sample counts 8), and for the consumers the ratio to raw kafka-python.
The machine's load average is printed first and last: on shared cores it moves the numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

from bench.common import bench_broker
from faultlens.events.topics import TELEMETRY_TOPICS
from faultlens.events.trace import iter_trace
from faultlens.streams.admin import ensure_topics
from faultlens.streams.broker import EmbeddedBroker
from faultlens.streams.config import KafkaSettings
from faultlens.streams.kafka_client import confluent_available, open_consumer
from faultlens.streams.replay import replay_trace


def _emit(row: dict) -> None:
    print(json.dumps(row), flush=True)


def _simulate(path: Path, nodes: int, gpus: int, duration: float, seed: int) -> None:
    subprocess.run([sys.executable, "-m", "faultlens.cli", "simulate", "--nodes", str(nodes), "--gpus", str(gpus),
                    "--duration", str(duration), "--seed", str(seed), "--out", str(path), "--no-progress"],
                   check=True, stdout=subprocess.DEVNULL)


def _census(path: Path) -> tuple[int, int, int]:
    """(telemetry messages, GPU samples in them, job records) of a trace."""
    telemetry = gpu_samples = jobs = 0
    for e in iter_trace(path):
        if e.source == "job":
            jobs += 1
            continue
        telemetry += 1
        if e.source == "gpu" and e.kind == "sample":
            gpu_samples += len(e.data.get("gpus") or ())
    return telemetry, gpu_samples, jobs


def _replay(settings: KafkaSettings, path: Path) -> dict:
    cpu = time.process_time()
    stats = replay_trace(settings, path, 0.0, show_progress=False)
    cpu = time.process_time() - cpu
    return {"events": stats.events, "seconds": round(stats.seconds, 2), "cpu_seconds": round(cpu, 2),
            "events_per_s": round(stats.events / stats.seconds) if stats.seconds else None,
            "events_per_cpu_s": round(stats.events / cpu) if cpu else None}


class _Clock:
    """Wall and CPU seconds (this process, every thread: the client's own included) from the
    first :meth:`tick` to the last. On shared cores CPU seconds show the cost, wall seconds the rate."""

    def __init__(self) -> None:
        self.first: tuple[float, float] | None = None
        self.last: tuple[float, float] | None = None

    def tick(self) -> None:
        now = (time.perf_counter(), time.process_time())
        self.first = self.first or now
        self.last = now

    def seconds(self) -> tuple[float, float]:
        if self.first is None or self.last is None:
            return 0.0, 0.0
        return self.last[0] - self.first[0], self.last[1] - self.first[1]


def _rates(n: int, clock: _Clock, per_msg: float) -> dict:
    wall, cpu = clock.seconds()
    return {"records": n, "seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
            "events_per_s": round(n / wall) if wall > 0 else None,
            "events_per_cpu_s": round(n / cpu) if cpu > 0 else None,
            "gpu_samples_per_s": round(n * per_msg / wall) if wall > 0 else None}


def _raw(settings: KafkaSettings, expected: int, timeout_s: float = 300.0,
         decode: bool = False, consumer=None, check: bool = False) -> tuple[int, _Clock]:
    """Poll, count, commit: the client alone, through a consumer group of its own (``consumer``, not
    subscribed yet: faultlens's of ``settings.client`` unless given). With ``decode`` each message is
    also decoded as the diagnosis stages decode it (the typed readers of NVML and NIC samples, the
    general decoder for the rest) and, with ``check``, the payload of a generally decoded one checked
    (events.payloads.check_payload; the typed readers check as they read), and nothing more: the
    floor of any consumer that reads these JSON messages in Python."""
    from faultlens.diagnosis.edge.consumer import TELEMETRY_DECODERS
    from faultlens.events.envelope import decode as general
    from faultlens.events.payloads import check_payload

    if consumer is None:
        consumer = open_consumer(settings, f"bench-raw-{settings.client}-{uuid.uuid4().hex[:6]}", max_records=2000)
    consumer.subscribe(list(TELEMETRY_TOPICS))
    n, clock = 0, _Clock()
    deadline = time.monotonic() + timeout_s
    try:
        while n < expected and time.monotonic() < deadline:
            polled = consumer.poll(timeout_ms=200)
            if polled:
                if clock.first is None:
                    clock.tick()  # as for the stages: the clock starts when the first batch is in hand
                n += sum(len(v) for v in polled.values())
                if decode:
                    for tp, messages in polled.items():
                        reader = TELEMETRY_DECODERS.get(tp.topic, general)
                        for m in messages:
                            event = reader(m.value)
                            if check and reader is general:
                                check_payload(event)
                consumer.commit()
                clock.tick()
    finally:
        consumer.close()
    return n, clock


def _stage(settings: KafkaSettings, stage: str, idle_s: float) -> tuple[int, _Clock, int, _Clock]:
    """(records read, the clock from the first batch of its topics read to the last batch handled,
    outputs, the clock from the first batch handled to the last) for one member. The first clock
    is the rate, as the raw consumers' runs from their first batch: a member reading a backlog
    reads and decodes most of it before event time lets the first record go (the wait for the
    partitions that have nothing to say to count as idle, ``max_idle_s``, included), so the
    second one leaves out much of the work and is kept only to compare with earlier tables."""
    from faultlens.diagnosis.edge.consumer import diagnose_consumer

    group = f"bench-{stage}-{settings.client}-{uuid.uuid4().hex[:6]}"
    runner, handler = diagnose_consumer(settings, None, stage=stage, group=group)
    from_read, from_handled = _Clock(), _Clock()
    handle = runner._run_handler

    def timed(records):
        if from_handled.first is None:
            from_handled.tick()
        out = handle(records)
        from_handled.tick()
        from_read.tick()
        return out

    runner._run_handler = timed  # the clocks run while there is work, not while the group forms
    split = runner.intake.split
    own = set(runner.topics)  # not the broadcast `jobs`, read before the group is joined

    def read(polled):
        if from_read.first is None and any(tp.topic in own for tp in polled):
            from_read.tick()
        return split(polled)

    runner.intake.split = read
    stats = runner.run(idle_stop_s=idle_s, handle_signals=False)
    from faultlens.streams.producer import Producer

    with Producer(settings) as producer:
        final = producer.send_all(handler.flush())
        producer.flush()
    return stats.records_in, from_read, stats.outputs + final, from_handled


def _rss(nodes: int, gpus: int, duration: float, seed: int, tmp: str) -> dict:
    """Peak RSS of the engine over a trace of ``nodes`` nodes, measured in a process of its own."""
    path = Path(tmp) / "rss.parquet"
    t0 = time.perf_counter()
    _simulate(path, nodes, gpus, duration, seed)
    sim_s = time.perf_counter() - t0
    code = ("import json, resource, time, sys\n"
            "from faultlens.diagnosis.engine.offline import analyze_trace\n"
            "t = time.perf_counter()\n"
            "found, engine = analyze_trace(sys.argv[1])\n"
            "print(json.dumps({'events': engine.stats['events'], 'seconds': round(time.perf_counter() - t, 1),\n"
            "                  'diagnoses': len(found),\n"
            "                  'peak_rss_mb': round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], check=True, capture_output=True, text=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    return {"measure": "engine peak RSS", "nodes": nodes, "gpus": gpus, "duration_s": duration,
            "simulate_s": round(sim_s, 1), **row, "under_2_gb": row["peak_rss_mb"] < 2048}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trace", help="a trace to use instead of simulating one")
    ap.add_argument("--bootstrap", help="a Kafka cluster (default: embedded brokers)")
    ap.add_argument("--rss-nodes", type=int, default=10_000)
    ap.add_argument("--rss-duration", type=float, default=20.0)
    ap.add_argument("--no-rss", action="store_true", help="skip the peak-RSS sub-run")
    ap.add_argument("--stages", nargs="*", default=["node", "job", "all"])
    args = ap.parse_args(argv)
    clients = ["kafka-python", "confluent"] if confluent_available() else ["kafka-python"]
    _emit({"load_average": os.getloadavg(), "cpus": os.cpu_count(), "clients": clients})

    with TemporaryDirectory() as tmp, bench_broker(args.bootstrap) as base:
        path = Path(args.trace) if args.trace else Path(tmp) / "throughput.parquet"
        if not args.trace:
            _simulate(path, args.nodes, args.gpus, args.duration, args.seed)
        telemetry, gpu_samples, jobs = _census(path)
        per_msg = gpu_samples / telemetry
        _emit({"trace": str(path), "telemetry_messages": telemetry, "gpu_samples": gpu_samples, "job_records": jobs})

        # replay: the main broker gets the trace once (confluent if there, else kafka-python)
        main_client = clients[-1]
        for client in clients:
            if client == main_client:
                settings = dataclasses.replace(base, client=client)
                _emit({"measure": "replay", "client": client, **_replay(settings, path)})
            elif args.bootstrap is None:
                with EmbeddedBroker() as spare:
                    settings = KafkaSettings(bootstrap=spare.bootstrap, client=client)
                    ensure_topics(settings)
                    _emit({"measure": "replay", "client": client, **_replay(settings, path)})

        raw_rate: float | None = None
        raw_cpu: float | None = None
        for client in clients:
            settings = dataclasses.replace(base, client=client)
            n, clock = _raw(settings, telemetry)
            row = _rates(n, clock, per_msg)
            raw_rate = raw_rate or row["events_per_s"]  # kafka-python comes first: the baseline
            raw_cpu = raw_cpu or row["events_per_cpu_s"]
            _emit({"measure": "raw consume", "client": client, **row,
                   "ratio_to_raw_kafka_python": round(row["events_per_s"] / raw_rate, 2) if raw_rate else None,
                   "cpu_ratio_to_raw_kafka_python": round(row["events_per_cpu_s"] / raw_cpu, 2) if raw_cpu else None})
        for client in clients:
            row = _rates(*_raw(dataclasses.replace(base, client=client), telemetry, decode=True), per_msg)
            _emit({"measure": "raw consume + decode", "client": client, **row,
                   "ratio_to_raw_kafka_python": round(row["events_per_s"] / raw_rate, 2) if raw_rate else None,
                   "cpu_ratio_to_raw_kafka_python": round(row["events_per_cpu_s"] / raw_cpu, 2) if raw_cpu else None})

        node_runs = 0  # each node-stage run writes the summaries once more; the job stage reads them all
        for stage in args.stages:
            for client in clients:
                settings = dataclasses.replace(base, client=client)
                # The rate runs from the first batch read to the last handled: the idle stop's wait is not counted.
                records, clock, outputs, from_handled = _stage(settings, stage, idle_s=8.0)
                secs = clock.seconds()[0]
                handled_s, handled_cpu = from_handled.seconds()
                row = {"measure": f"diagnose --stage {stage}", "client": client, **_rates(records, clock, per_msg),
                       "outputs": outputs, "seconds_from_first_handled": round(handled_s, 2),
                       "events_per_s_from_first_handled": round(records / handled_s) if handled_s > 0 else None,
                       "events_per_cpu_s_from_first_handled": round(records / handled_cpu) if handled_cpu > 0 else None}
                if stage == "node":
                    node_runs += 1
                if stage == "job":
                    # its records are summaries; the telemetry they stand for is the trace's, once
                    # per node-stage run that wrote them
                    copies = max(node_runs, 1)
                    row["summary_copies"] = copies
                    row["telemetry_equivalent_per_s"] = round(copies * telemetry / secs) if secs > 0 else None
                    row["gpu_samples_per_s"] = round(copies * gpu_samples / secs) if secs > 0 else None
                else:
                    row["ratio_to_raw_kafka_python"] = round(row["events_per_s"] / raw_rate, 2) if raw_rate else None
                    row["cpu_ratio_to_raw_kafka_python"] = (round(row["events_per_cpu_s"] / raw_cpu, 2)
                                                            if raw_cpu else None)
                _emit(row)

        if not args.no_rss:
            _emit(_rss(args.rss_nodes, args.gpus, args.rss_duration, args.seed, tmp))
    _emit({"load_average": os.getloadavg()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
