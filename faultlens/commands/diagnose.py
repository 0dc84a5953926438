"""faultlens diagnose: the diagnosis consumer group (telemetry + jobs → diagnoses)."""

from __future__ import annotations

import argparse
import json
import logging
import os

from diagnosis.consumer import DIAGNOSES_TOPIC, GROUP, INPUT_TOPICS, DiagnoseHandler, prime_topologies
from diagnosis.engine import Engine, EngineConfig
from diagnosis.hang import HangConfig
from diagnosis.implicit import ImplicitConfig
from streams.connect import connected
from streams.config import KafkaSettings, add_kafka_arguments
from streams import metrics
from streams.runner import GroupRunner

log = logging.getLogger(__name__)

HELP = "run the diagnosis consumer: telemetry topics + jobs → diagnoses"
DESCRIPTION = """\
Consumes the telemetry topics and `jobs` as consumer group faultlens-diagnose, runs the
diagnosis engine (explicit-fault rules, first failing rank, silent nodes, peer anomaly
detection, hang and fail-slow localisation, dedup / suppression / escalation) and produces
one Diagnosis record per finding to `diagnoses` (key = job). Unreadable events go to
`dead-letter` with the reason. Add members (same --group) to scale out.

On exit prints one JSON line with the run's counts."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--group", default=os.environ.get("FAULTLENS_DIAGNOSE_GROUP", GROUP),
                        help=f"consumer group (default {GROUP}; env FAULTLENS_DIAGNOSE_GROUP)")
    parser.add_argument("--idle-stop", type=float, default=None,
                        help="exit after this many seconds without input (replays, tests)")
    parser.add_argument("--max-records", type=int, default=None, help="exit after this many records")
    add_engine_arguments(parser)
    metrics.add_metrics_argument(parser)
    add_kafka_arguments(parser)


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """The engine's flags, for every command that runs the diagnosis consumer (`diagnose`, `up`)."""
    g = parser.add_argument_group("diagnosis engine")
    g.add_argument("--grace", type=float, default=float(os.environ.get("FAULTLENS_DIAGNOSE_GRACE_S", 30.0)),
                   help="seconds without any event before the wall clock moves event time (default 30)")
    g.add_argument("--no-implicit", action="store_true", help="turn off hang / fail-slow localisation")
    g.add_argument("--hang-floor", type=float, default=float(os.environ.get("FAULTLENS_HANG_FLOOR_S", 60.0)),
                   help="never call a stall shorter than this many seconds a hang (default 60; env FAULTLENS_HANG_FLOOR_S)")
    g.add_argument("--hang-k", type=float, default=float(os.environ.get("FAULTLENS_HANG_K", 5.0)),
                   help="a stall is a hang after this many median step times (default 5; env FAULTLENS_HANG_K)")


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The engine settings these flags name (shared with `faultlens up`)."""
    hang = HangConfig(k=args.hang_k, floor_s=args.hang_floor)
    return EngineConfig(grace_s=args.grace, implicit=not args.no_implicit, implicit_config=ImplicitConfig(hang=hang))


def run(args: argparse.Namespace) -> int:
    engine = Engine(engine_config(args))
    handler = DiagnoseHandler(engine, args.group)
    with connected(args, [*INPUT_TOPICS, DIAGNOSES_TOPIC, "dead-letter"]) as settings:
        log.info("primed %d topology event(s) from the jobs topic", prime_topologies(engine, settings))
        runner = GroupRunner(settings, args.group, INPUT_TOPICS, handler)
        metrics.register_runner("diagnose", lambda: runner.stats)
        metrics.serve(args.metrics_port)
        stats = runner.run(max_records_total=args.max_records, idle_stop_s=args.idle_stop)
        # Pending decisions (an open NCCL incident, final counts) go out before we leave.
        final = handler.flush()
        if final:
            _send(settings, final)
        print(json.dumps({"records": stats.records_in, "diagnoses": handler.emitted,
                          "dead_letters": stats.dead_letters, **{k: v for k, v in engine.stats.items()}}), flush=True)
    return 0


def _send(settings: KafkaSettings, records) -> None:
    from streams.producer import Producer

    producer = Producer(settings)
    try:
        producer.send_all(records)
        producer.flush()
    finally:
        producer.close()
