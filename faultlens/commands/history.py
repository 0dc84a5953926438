"""faultlens history: store diagnoses, commands and events in a DuckDB fault history."""

from __future__ import annotations

import argparse
import logging
import os
import sys

import orjson

from faultlens.engine_flags import add_engine_arguments, engine_config
from faultlens.streams import metrics
from faultlens.streams.config import add_kafka_arguments

log = logging.getLogger(__name__)

HELP = "store diagnoses, commands and events in a DuckDB fault history (consumer, or --from-trace)"
DESCRIPTION = """\
Without --from-trace: runs the consumer group `faultlens-history`, which writes every diagnosis
(topic `diagnoses`), command (`commands`), job record (`jobs`) and telemetry event into the DuckDB
file --db, in batches, idempotently (a re-delivered message never doubles a row). High-rate
samples (gpu/sample, host/sample) may be stored as a deterministic sample (--sample-rate).
Runs until Ctrl-C / SIGTERM, or --idle-stop / --max-records.

With --from-trace TRACE: loads a trace file without a broker: its events (sampled the same way),
its labels (TRACE.labels.jsonl) and the diagnoses the engine finds in it; with --no-diagnose, the
diagnoses recorded beside it instead (TRACE.diagnoses.jsonl, `faultlens record --topics ... diagnoses`).

Commands are checked against --verify-key (the public key remediation signs with): a copy of a
command whose signature fails is kept in table `refused_commands` with the reason, and never
shadows the genuine copy of the same id. Without a key nothing is checked: the first copy of an
id is the command, and a later different copy is kept in `refused_commands` as a conflict.

Prints one JSON line with the rows stored per table. Schema: docs/history.md.
Environment: FAULTLENS_DB (default --db), FAULTLENS_HISTORY_SAMPLE_RATE, FAULTLENS_VERIFY_KEY
(default --verify-key, comma-separated), FAULTLENS_HOME."""


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be within 0..1, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="DuckDB history file (default $FAULTLENS_DB or $FAULTLENS_HOME/history.duckdb)")
    parser.add_argument("--from-trace", metavar="TRACE", help="load this trace file instead of consuming Kafka")
    parser.add_argument("--no-diagnose", action="store_true", help="with --from-trace: do not run the diagnosis engine")
    parser.add_argument("--sample-rate", type=_rate, default=None,
                        help="fraction of gpu/sample and host/sample events to keep, chosen by event id hash "
                             "(default 1.0 = all; env FAULTLENS_HISTORY_SAMPLE_RATE)")
    parser.add_argument("--batch-size", type=int, default=5000, help="records per DuckDB insert with --from-trace")
    parser.add_argument("--group", default=None, help="consumer group (default faultlens-history)")
    parser.add_argument("--idle-stop", type=float, default=None, metavar="S",
                        help="stop after S seconds without messages (bounded runs)")
    parser.add_argument("--max-records", type=int, default=None, help="stop after this many records")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--verify-key", action="append", default=None, metavar="PEM",
                        help="public key commands are signed with (repeatable during a key rollover; else "
                             "FAULTLENS_VERIFY_KEY, comma-separated): a copy of a command that fails it never "
                             "replaces the genuine one; without one, signatures are not checked")
    add_engine_arguments(parser)
    metrics.add_metrics_argument(parser)
    add_kafka_arguments(parser)


def _sample_rate(args: argparse.Namespace) -> float:
    if args.sample_rate is not None:
        return args.sample_rate
    env = os.environ.get("FAULTLENS_HISTORY_SAMPLE_RATE")
    return _rate(env) if env else 1.0


def run(args: argparse.Namespace) -> int:
    from faultlens.history.schema import HistoryError, default_db_path, open_history
    from faultlens.history.sink import Sampling

    db = args.db or default_db_path()
    try:
        sampling = Sampling(_sample_rate(args))
        conn = open_history(db, create=True)
    except (HistoryError, ValueError, argparse.ArgumentTypeError) as exc:
        print(f"faultlens history: {exc}", file=sys.stderr)
        return 1
    try:
        if args.from_trace:
            return _from_trace(args, conn, sampling, db)
        return _consume(args, conn, sampling, db)
    except HistoryError as exc:
        print(f"faultlens history: {exc}", file=sys.stderr)
        return 1
    finally:
        conn.close()


def _from_trace(args, conn, sampling, db) -> int:
    from faultlens.history.loader import load_trace
    from faultlens.history.sink import HistorySink

    stats = load_trace(args.from_trace, HistorySink(conn), sampling=sampling, diagnose=not args.no_diagnose,
                       engine_config=engine_config(args), batch_size=args.batch_size,
                       progress=not args.no_progress and sys.stderr.isatty())  # as analyze: no bar in a log file
    for note in stats.notes:
        print(f"faultlens history: {note}", file=sys.stderr)
    print(orjson.dumps({"db": str(db), "trace": args.from_trace, **stats.to_dict()}).decode(), flush=True)
    return 1 if stats.truncated else 0


def _consume(args, conn, sampling, db) -> int:
    from faultlens.events.signing import load_verify_keys, verify_key_paths
    from faultlens.history.consumer import GROUP, StoreUnavailable, history_runner
    from faultlens.streams.broker import BrokerError
    from faultlens.streams.connect import connected

    try:
        keys = load_verify_keys(args.verify_key) if verify_key_paths(args.verify_key) else None
        with connected(args) as settings:
            runner, handler = history_runner(settings, conn, sampling=sampling, group=args.group or GROUP, keys=keys)
            log.info("history consumer writing to %s (sample rate %.3f)", db, sampling.rate)
            metrics.register_runner("history", lambda: runner.stats)
            metrics.serve(args.metrics_port)
            stats = runner.run(max_records_total=args.max_records, idle_stop_s=args.idle_stop)
    except (ValueError, BrokerError) as exc:
        print(f"faultlens history: {exc}", file=sys.stderr)
        return 1
    except StoreUnavailable as exc:
        print(f"faultlens history: {exc}; stopped without committing the last batch", file=sys.stderr)
        return 1
    print(orjson.dumps({
        "db": str(db), "records": stats.records_in, "dead_letters": stats.dead_letters,
        "sampled_out": handler.sampled_out, "inserted": handler.sink.inserted,
    }).decode(), flush=True)
    return 0
