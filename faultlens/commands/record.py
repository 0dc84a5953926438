"""faultlens record: record live topics into a Parquet trace."""

from __future__ import annotations

import argparse
import json
import sys

from faultlens.events.topics import TOPICS
from faultlens.streams.config import add_kafka_arguments
from faultlens.streams.connect import connected
from faultlens.streams.record import DEFAULT_TOPICS, record, write_recording

HELP = "record live topics into a Parquet trace"
DESCRIPTION = f"""\
Reads the given topics (default: every telemetry topic and the compacted `jobs` topic) from the
beginning (or from now with --from-now; the topology in `jobs` is always read in full), keeps
one job's events with --job, drops duplicate event ids, orders them by time (job records first,
then by id) with each job's topology first, and writes TRACE. Stops after --duration seconds or
when nothing arrived for --idle seconds (default 5). Events are held in memory until written.
With `--topics ... diagnoses` the pipeline's diagnoses are kept beside the trace in
TRACE.diagnoses.jsonl (one diagnosis record per line, a re-emitted one at its highest count); a
record that does not decode is skipped and counted (`invalid`). Prints one JSON summary line. Topics: {", ".join(DEFAULT_TOPICS)}."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topics", nargs="+", default=list(DEFAULT_TOPICS), metavar="TOPIC",
                        help="topics to record (default: telemetry.* and jobs)")
    parser.add_argument("--out", required=True, help="trace path (.parquet)")
    parser.add_argument("--job", help="record only this job's events")
    parser.add_argument("--duration", type=float, help="stop after this many seconds")
    parser.add_argument("--idle", type=float, default=5.0, help="stop when nothing arrived for this long (default 5 s)")
    parser.add_argument("--from-now", action="store_true", help="skip what the topics already hold")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_kafka_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    unknown = [t for t in args.topics if t not in TOPICS]
    if unknown:
        print(f"faultlens record: unknown topic(s) {', '.join(unknown)} (known: {', '.join(TOPICS)})", file=sys.stderr)
        return 2
    with connected(args, args.topics) as settings:
        with tqdm(unit="ev", desc="record", disable=True if args.no_progress else None, leave=False) as bar:
            rec = record(settings, args.topics, job=args.job, duration_s=args.duration,
                         idle_s=args.idle, from_beginning=not args.from_now, progress=bar.update)
        write_recording(args.out, rec, args.topics)
    print(json.dumps({"path": str(args.out), **rec.stats.to_dict()}), flush=True)
    return 0
