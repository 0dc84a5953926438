"""faultlens simulate: a seeded simulated cluster with labelled faults, to a trace or live to Kafka."""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import sys
import time

from faultlens.events.env_number import env_number, env_whole
from faultlens.events.trace import TraceWriter, labels_path, write_labels, write_trace
from faultlens.simulator import SimConfig, simulate
from faultlens.simulator.drifts import parse_drift
from faultlens.simulator.run import DEFAULT_DURATION_S, FAULT_EVERY_S

log = logging.getLogger(__name__)

HELP = "write a labelled trace of a simulated cluster (or, with --publish, send it live)"
DESCRIPTION = f"""\
Simulates N nodes × G GPUs running one training job (TP/PP/DP layout; TP = G by default) with
NVML samples, per-rank step telemetry, heartbeats, raw kernel / NCCL log lines and stack dumps,
and injects faults of every docs/design.md §9 class with ground truth. Same --seed, same trace, byte
for byte.

Writes TRACE (Parquet) and TRACE.labels.jsonl, and prints one JSON summary line on stdout.
Without --faults a run gets one fault per {FAULT_EVERY_S:.0f} s of --duration (default
{DEFAULT_DURATION_S:.0f} s); without --duration it lasts as long as its faults need. Every fault
class appears at least once when --faults >= 17 (--no-every-class to draw purely from the mix).
Event rate ≈ N/sample-interval + N·G/step-time + N/5 per simulated second: for a 128-node trace
with 500 faults (~12 simulated hours, ~6 M events) use --sample-interval 10.

With --publish the events go to the Kafka topics at real speed (--speed 1), k× (--speed K) or as
fast as possible (--speed 0). Flags default from FAULTLENS_SIM_<FLAG> (e.g. FAULTLENS_SIM_SEED)."""


def _env(name: str, default, cast=str):
    """FAULTLENS_SIM_<NAME>, a flag's default: a number read by events/env_number.py (a bad one stops the command
    with one line naming it), text as it is."""
    variable = "FAULTLENS_SIM_" + name.upper()
    if cast is int:
        return env_whole(variable, default, on_bad="raise")
    if cast is float:
        return env_number(variable, default, on_bad="raise")
    return os.environ.get(variable) or default


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from faultlens.streams.config import add_kafka_arguments

    parser.add_argument("--nodes", type=int, default=_env("nodes", 8, int), help="nodes in the job (default 8)")
    parser.add_argument("--gpus", type=int, default=_env("gpus", 8, int), help="GPUs per node (default 8)")
    parser.add_argument("--duration", type=float, default=_env("duration", None, float),
                        help="simulated seconds (default: what --faults need, else %.0f)" % DEFAULT_DURATION_S)
    parser.add_argument("--seed", type=int, default=_env("seed", 0, int), help="random seed (default 0)")
    parser.add_argument("--out", default=_env("out", None), help="trace path (.parquet); labels go to OUT.labels.jsonl")
    parser.add_argument("--job", default=_env("job", "job-sim"), help="job id (default job-sim)")
    parser.add_argument("--faults", type=int, default=_env("faults", None, int), help="number of faults to inject")
    parser.add_argument("--every-class", action=argparse.BooleanOptionalAction, default=True,
                        help="every fault class at least once when --faults allows (default on)")
    for axis in ("tp", "pp", "dp"):
        parser.add_argument(f"--{axis}", type=int, default=None, help=f"{axis.upper()} size (default: chosen to fit)")
    parser.add_argument("--sample-interval", type=float, default=_env("sample_interval", 1.0, float),
                        help="NVML sample interval in seconds (default 1)")
    parser.add_argument("--net-interval", type=float, default=_env("net_interval", 5.0, float),
                        help="RDMA port counter (net/sample) interval in seconds, 0 for none (default 5)")
    parser.add_argument("--step-time", type=float, default=_env("step_time", 10.0, float),
                        help="nominal training step time in seconds (default 10)")
    parser.add_argument("--no-noise", action="store_true", help="no benign unlabelled noise lines")
    parser.add_argument("--no-recorder", action="store_true",
                        help="ranks answer a capture with py-spy stacks alone (no trainer hook, no Flight Recorder dump)")
    parser.add_argument("--drift", action="append", default=[], metavar="KIND:NODE@SECONDS",
                        help="add a slow gray failure from then to the end of the run (repeatable): gpu_sag (a GPU's "
                             "clocks and power sag 10 %% over 30 min), compute_creep (+3 %% compute per hour), "
                             "nic_decay (a port's errors climb while its traffic falls); labelled with a drift field "
                             "(simulator/drifts.py); the random plan may still place faults on that node")
    parser.add_argument("--publish", action="store_true", help="send the events to Kafka as they are simulated")
    parser.add_argument("--speed", type=float, default=1.0,
                        help="with --publish: 1 real time, K k× faster, 0 as fast as possible (default 1)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_kafka_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    if not args.out and not args.publish:
        print("faultlens simulate: give --out TRACE and/or --publish", file=sys.stderr)
        return 2
    try:
        config = SimConfig(nodes=args.nodes, gpus=args.gpus, job=args.job, seed=args.seed,
                           sample_interval_s=args.sample_interval, step_time_s=args.step_time,
                           tp=args.tp, pp=args.pp, dp=args.dp, noise=not args.no_noise,
                           net_interval_s=args.net_interval, flight_recorder=not args.no_recorder)
        if args.sample_interval <= 0 or args.step_time <= 0:
            raise ValueError("--sample-interval and --step-time must be > 0")
        if args.net_interval < 0:
            raise ValueError("--net-interval must be >= 0 (0: no network counters)")
        config.layout()
        drifts = tuple(parse_drift(spec) for spec in args.drift)
        sim = simulate(config, duration=args.duration, faults=args.faults, every_class=args.every_class, drifts=drifts)
    except ValueError as exc:
        print(f"faultlens simulate: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    bar = tqdm(total=round(sim.duration), unit="sim s", desc="simulate", disable=True if args.no_progress else None,
               leave=False)
    events = sim.events(progress=lambda s: bar.update(round(s)))
    try:
        if args.publish:
            from faultlens.streams.connect import connected
            from faultlens.streams.replay import publish

            with connected(args) as settings:
                if args.out:
                    events = _tee_to_trace(events, args.out)
                stats = publish(settings, events, args.speed)
            summary_extra = {"published": stats.events, "bootstrap": settings.bootstrap}
        else:
            write_trace(args.out, events)
            summary_extra = {}
    except KeyboardInterrupt:
        bar.close()
        print("faultlens simulate: interrupted; no trace written", file=sys.stderr)
        return 130
    finally:
        bar.close()
    summary = {
        "events": sim.count,
        "faults": dict(sorted(collections.Counter(label["fault"] for label in sim.labels).items())),
        "labels": len(sim.labels),
        "duration_s": sim.duration,
        "nodes": config.nodes, "gpus": config.gpus, "job": config.job, "seed": config.seed,
        "tp": sim.cluster.tp, "pp": sim.cluster.pp, "dp": sim.cluster.dp,
        "elapsed_s": round(time.perf_counter() - started, 2),
        **summary_extra,
    }
    if args.out:
        summary["path"] = str(args.out)
        summary["labels_path"] = str(write_labels(labels_path(args.out), sim.labels))
    print(json.dumps(summary), flush=True)
    return 0


def _tee_to_trace(events, out):
    """Write each event to the trace as it goes by on its way to the broker (one pass, streaming)."""
    with TraceWriter(out) as writer:
        for event in events:
            writer.write(event)
            yield event
