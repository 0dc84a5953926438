"""faultlens replay: publish a trace back to its topics."""

from __future__ import annotations

import argparse
import json
import sys

from faultlens.events.trace import TraceError
from faultlens.streams.config import add_kafka_arguments
from faultlens.streams.connect import connected
from faultlens.streams.replay import replay_trace

HELP = "publish a trace back to its topics (real speed, k× or as fast as possible)"
DESCRIPTION = """\
Sends every event of TRACE to its topic (telemetry.* by source, `jobs` for job records), keyed
by node (job records by job), in trace order, paced by event time: --speed 1 is real time,
--speed K is K times faster, --as-fast-as-possible (or --speed 0) does not wait.
Record batches go out lz4-compressed unless --compression (or the config) names another
codec or none; consumers read the same messages either way.
Prints one JSON summary line."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help="trace path (.parquet)")
    parser.add_argument("--speed", type=float, default=1.0, help="K× real time (default 1; 0: no pacing)")
    parser.add_argument("--as-fast-as-possible", action="store_true", help="same as --speed 0")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_kafka_arguments(parser)


def run(args: argparse.Namespace) -> int:
    speed = 0.0 if args.as_fast_as_possible else args.speed
    if speed < 0:
        print("faultlens replay: --speed must be >= 0", file=sys.stderr)
        return 2
    try:
        with connected(args) as settings:
            stats = replay_trace(settings, args.trace, speed, show_progress=not args.no_progress)
    except TraceError as exc:
        print(f"faultlens replay: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"path": args.trace, "speed": speed, **stats.to_dict()}), flush=True)
    return 0
