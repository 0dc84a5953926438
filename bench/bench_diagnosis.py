"""Diagnosis quality and speed on a big simulated trace, and the engine's rate next to raw Kafka.

    .venv/bin/python -m bench.bench_diagnosis [--nodes 128] [--faults 500] [--seed 7]
        [--trace FILE] [--kafka-events 100000] [--bootstrap HOST:PORT]
    .venv/bin/python -m bench.bench_diagnosis --seeds 1 2 3 [--faults 40] --kafka-events 0

With --seeds: the realistic test bed, closed loop (faultlens.closed_loop: stacks only where the
engine asks for them, capture failing on some nodes, healthy variance), one run per seed; prints
each seed's per-class scores and overall line, then the classes and the overall over all seeds
together ({"all_seeds": ...}): precision and recall per class, hangs / fail-slow localised to a
group holding the culprit, healthy machines evicted (the goal is 0), detection latency.

1. Simulates a labelled trace (or reads --trace FILE with FILE.labels.jsonl beside it).
2. Runs the engine over it (as `faultlens analyze`), printing precision / recall per fault class,
   detection latency p50 / p99 and the healthy nodes blamed (as `faultlens score`), and the
   engine's throughput: events/s over the whole trace, and the trace-read rate alone beside it.
3. Publishes the first --kafka-events events to a bench topic and, in the same run, reads them
   with plain kafka-python (bench.common.raw_consume_rate) and with `faultlens diagnose`'s
   consumer (GroupRunner + DiagnoseHandler); prints both rates and their ratio.

Every number is printed as one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
import uuid
from pathlib import Path

from faultlens.diagnosis.edge.consumer import DiagnoseHandler
from faultlens.diagnosis.engine.core import Engine
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.replay.scoring import score
from faultlens.events.trace import iter_trace, labels_path, read_labels, write_labels, write_trace


def _simulate(args, path: Path) -> None:
    from faultlens.simulator.config import SimConfig
    from faultlens.simulator.run import simulate

    run = simulate(SimConfig(nodes=args.nodes, gpus=args.gpus, seed=args.seed, sample_interval_s=args.sample_interval),
                   faults=args.faults)
    t0 = time.perf_counter()
    n = write_trace(path, run.events())
    write_labels(labels_path(path), run.labels)
    print(json.dumps({"simulated": str(path), "events": n,
                      "labels": len(run.labels), "seconds": round(time.perf_counter() - t0, 1)}), flush=True)


def _quality(path: Path) -> None:
    t0 = time.perf_counter()
    read = sum(1 for _ in iter_trace(path))
    t_read = time.perf_counter() - t0
    engine = Engine()
    t0 = time.perf_counter()
    found = analyze(iter_trace(path), engine)
    t_all = time.perf_counter() - t0
    result = score(found, read_labels(path))
    for name in sorted(result.classes):
        print(json.dumps(result.classes[name].to_dict()), flush=True)
    print(json.dumps({"overall": result.overall()}), flush=True)
    print(json.dumps({
        "events": read, "trace_read_events_per_s": round(read / t_read),
        "analyze_events_per_s": round(read / t_all),
        "engine_only_events_per_s": round(read / max(1e-9, t_all - t_read)),
        "analyze_seconds": round(t_all, 1), "dead_letters": engine.stats["dead_letters"],
    }), flush=True)


class _Timed(DiagnoseHandler):
    """The diagnose handler, timing from its first batch to its last."""

    first: float | None = None
    last: float = 0.0
    seen: int = 0

    def handle(self, records):
        if self.first is None:
            self.first = time.perf_counter()
        out = super().handle(records)
        self.seen += len(records)
        self.last = time.perf_counter()
        return out


def _kafka(path: Path, n: int, bootstrap: str | None) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    from bench.common import bench_broker, raw_consume_rate
    from faultlens.events.envelope import encode
    from faultlens.streams.producer import Producer
    from faultlens.streams.runner.loop import GroupRunner

    with bench_broker(bootstrap) as settings:
        topic = f"bench-diagnosis-{uuid.uuid4().hex[:8]}"
        admin = KafkaAdminClient(**settings.common_kwargs())
        admin.create_topics([NewTopic(topic, 3, 1)])
        admin.close()
        producer = Producer(settings)
        sent = 0
        for e in itertools.islice(iter_trace(path), n):
            producer.send(topic, e.key, encode(e))
            sent += 1
        producer.flush()
        producer.close()
        raw_n, raw_s = raw_consume_rate(settings, topic, sent, f"bench-raw-{uuid.uuid4().hex[:6]}")
        engine = Engine()
        first = next(iter_trace(path))
        engine.book.update(first)  # as `faultlens diagnose` primes topologies from the jobs topic
        handler = _Timed(engine)
        runner = GroupRunner(settings, f"bench-diag-{uuid.uuid4().hex[:6]}", [topic], handler)
        runner.run(max_records_total=sent, idle_stop_s=10.0, handle_signals=False)
        eng_s = max(1e-9, handler.last - (handler.first or handler.last))
        raw_rate = raw_n / raw_s if raw_s else 0.0
        eng_rate = handler.seen / eng_s
        print(json.dumps({"kafka_events": sent, "raw_consume_events_per_s": round(raw_rate),
                          "diagnose_consume_events_per_s": round(eng_rate),
                          "ratio_to_raw": round(eng_rate / raw_rate, 3) if raw_rate else None,
                          "diagnoses": handler.emitted}), flush=True)


def _closed_loop_seeds(args) -> None:
    from faultlens.closed_loop import ClosedLoop
    from faultlens.simulator.config import SimConfig
    from faultlens.simulator.run import simulate

    found, labels = [], []
    for seed in args.seeds:
        cfg = SimConfig(nodes=args.nodes, gpus=args.gpus, seed=seed, sample_interval_s=args.sample_interval,
                        job=f"job-sim-{seed}")
        run = simulate(cfg, faults=args.faults)
        loop = ClosedLoop(run)
        t0 = time.perf_counter()
        events = sum(1 for _ in loop.events())
        seconds = time.perf_counter() - t0
        diags = list(loop.diagnoses.values())
        result = score(diags, run.labels)
        for name in sorted(result.classes):
            print(json.dumps({"seed": seed, **result.classes[name].to_dict()}), flush=True)
        print(json.dumps({"seed": seed, "overall": result.overall(), "events": events, "capture_requests": loop.requests,
                          "simulated_s": run.duration, "seconds": round(seconds, 1)}), flush=True)
        found += diags
        labels += run.labels
    result = score(found, labels)
    for name in sorted(result.classes):
        print(json.dumps({"all_seeds": True, **result.classes[name].to_dict()}), flush=True)
    print(json.dumps({"all_seeds": True, "seeds": args.seeds, "overall": result.overall()}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--faults", type=int, default=500)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--sample-interval", type=float, default=10.0, help="NVML sample interval of the simulation")
    ap.add_argument("--trace", help="an existing labelled trace instead of simulating one")
    ap.add_argument("--out", default="/tmp/faultlens-bench-diagnosis.parquet", help="where the simulated trace goes")
    ap.add_argument("--kafka-events", type=int, default=100_000, help="events to push through Kafka (0: skip)")
    ap.add_argument("--bootstrap")
    ap.add_argument("--seeds", type=int, nargs="+", help="closed-loop realistic runs, one per seed (see above)")
    args = ap.parse_args()
    if args.seeds:
        _closed_loop_seeds(args)
        return
    path = Path(args.trace or args.out)
    if not args.trace:
        _simulate(args, path)
    _quality(path)
    if args.kafka_events:
        _kafka(path, args.kafka_events, args.bootstrap)


if __name__ == "__main__":
    main()
