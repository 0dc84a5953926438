"""faultlens diagnose: the diagnosis consumer group (telemetry + jobs → diagnoses)."""

from __future__ import annotations

import argparse
import json
import logging
import os

from diagnosis.consumer import DIAGNOSES_TOPIC, GROUP, INPUT_TOPICS, diagnose_consumer
from faultlens.engine_flags import add_engine_arguments, engine_config
from streams.connect import connected
from streams.config import KafkaSettings, add_kafka_arguments
from streams import metrics, topics

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


def run(args: argparse.Namespace) -> int:
    config = engine_config(args)
    with connected(args, [*INPUT_TOPICS, DIAGNOSES_TOPIC, topics.DEAD_LETTER]) as settings:
        runner, handler = diagnose_consumer(settings, config, group=args.group)
        engine = handler.engine
        metrics.register_runner("diagnose", lambda: runner.stats)
        metrics.serve(args.metrics_port)
        stats = runner.run(max_records_total=args.max_records, idle_stop_s=args.idle_stop)
        # Pending decisions (an open NCCL incident, final counts) go out before we leave.
        final = handler.flush()
        if final:
            _send(settings, final)
        # late: samples too far behind their job's time (counted, not judged); late_faults: fault
        # reports diagnosed although late; clock_skew: events whose sender's clock was off.
        counts = {"late": 0, "late_faults": 0, "clock_skew": 0, **engine.stats}
        print(json.dumps({"records": stats.records_in, "diagnoses": handler.emitted,
                          "dead_letters": stats.dead_letters, "oversized": stats.oversized,
                          "forced_early": runner.merge.forced if runner.merge else 0, **counts}), flush=True)
    return 0


def _send(settings: KafkaSettings, records) -> None:
    from streams.producer import Producer

    producer = Producer(settings)
    try:
        producer.send_all(records)
        producer.flush()
    finally:
        producer.close()
