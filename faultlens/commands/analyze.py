"""faultlens analyze TRACE: the diagnosis engine over a trace file, no broker."""

from __future__ import annotations

import argparse
import json
import logging
import sys

import orjson

from faultlens.diagnosis.engine.offline import analyze_trace
from faultlens.engine_flags import add_engine_arguments, engine_config
from faultlens.events.trace import TraceError

log = logging.getLogger(__name__)

HELP = "run the detectors over a trace file (no broker) and print the diagnoses as JSON lines"
DESCRIPTION = """\
Reads a Parquet trace (from `faultlens simulate` or `faultlens record`), parses raw log lines on
the way in, runs the same engine as `faultlens diagnose` on event time, and prints one JSON
line per diagnosis on stdout (the final version of each: folded duplicates raise `count`).
Record-only diagnoses (action `none`) are printed too; --findings-only leaves them and requests
for stack captures out. A summary (events, dead letters, diagnoses) goes to stderr."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help="Parquet trace file")
    parser.add_argument("--findings-only", action="store_true",
                        help="leave out record-only diagnoses and stack-capture requests")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--unrecognised", metavar="FILE",
                        help="write the Drain3 templates of the trace's alarming raw log lines that no rule took "
                             "(JSON lines: count, template, example, source; '-' for stderr)")
    add_engine_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from faultlens.diagnosis.replay.scoring import is_scored

    try:
        found, engine = analyze_trace(args.trace, config=engine_config(args),
                                      progress=not args.no_progress and sys.stderr.isatty())
    except (TraceError, FileNotFoundError, OSError) as exc:
        print(f"faultlens analyze: {exc}", file=sys.stderr)
        return 2
    out = sys.stdout.buffer
    for d in found:
        if args.findings_only and not is_scored(d):
            continue
        out.write(orjson.dumps(d.to_dict()) + b"\n")
    out.flush()
    print(json.dumps({"summary": dict(engine.stats), "dedup": dict(engine.dedup_stats)}), file=sys.stderr)
    if args.unrecognised:
        from faultlens.commands.parse import write_templates

        return write_templates(args.unrecognised, engine.node_stage.unrecognised.top(20))
    return 0
