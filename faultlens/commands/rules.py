"""faultlens rules diff: what a changed rule set or thresholds would have done over your own events."""

from __future__ import annotations

import argparse
import json
import os
import sys

HELP = "what a rule change would have done: today's rules and a changed set side by side over a trace or a history"
DESCRIPTION = """\
faultlens rules diff TRACE... | --db HISTORY --rules NEW.toml [--thresholds NEW.toml] [--labels | --expect]

Runs the detectors twice over the same events, as `faultlens analyze` does: with today's rules
and thresholds (the shipped ones, with --current-rules / --current-thresholds or FAULTLENS_RULES /
FAULTLENS_THRESHOLDS over them) and with the changed set (today's plus --rules NEW.toml, a line
catalogue as parsing/rules.toml, and --thresholds NEW.toml, as diagnosis/engine/thresholds.toml). Prints,
per rule (a catalogue rule id, an Xid table entry such as xid.74, a detector's name; a wave under
its first member's rule), the findings gained (+) and lost (-) and those whose action changed (~),
then the machines each would evict, and, with ground truth, which of them were healthy and which
rule would have evicted them:
  --labels   the trace's TRACE.labels.jsonl (or the history's labels table): machines not labelled
             at fault are healthy
  --expect   the trace's expect file (`faultlens check`): machines no expected verdict evicts are healthy
Exit status: 0 when the changed set evicts no healthy machine (or there is no ground truth), 1 when
it would evict one, 2 when a file cannot be read. --json prints one JSON object per input."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="rules_command", metavar="SUBCOMMAND", required=True)
    p = sub.add_parser("diff", help="today's rules vs a changed set over a trace or a DuckDB history",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="*", metavar="TRACE", help="Parquet traces")
    p.add_argument("--db", metavar="HISTORY", help="a DuckDB history (faultlens history) instead of traces")
    p.add_argument("--rules", action="append", default=[], metavar="NEW.toml",
                   help="the changed line catalogue (added to today's); repeatable")
    p.add_argument("--thresholds", action="append", default=[], metavar="NEW.toml",
                   help="the changed thresholds (laid over today's); repeatable")
    p.add_argument("--current-rules", action="append", metavar="FILE",
                   default=[x for x in os.environ.get("FAULTLENS_RULES", "").split(os.pathsep) if x],
                   help="today's own line catalogue besides the shipped one (env FAULTLENS_RULES)")
    p.add_argument("--current-thresholds", action="append", metavar="FILE",
                   default=[x for x in os.environ.get("FAULTLENS_THRESHOLDS", "").split(os.pathsep) if x],
                   help="today's own thresholds (env FAULTLENS_THRESHOLDS)")
    truth = p.add_mutually_exclusive_group()
    truth.add_argument("--labels", action="store_true", help="healthy = not in the trace's labels (or the history's)")
    truth.add_argument("--expect", action="store_true", help="healthy = evicted by no verdict of the trace's expect file")
    p.add_argument("--json", action="store_true", help="one JSON object per input instead of the readable diff")


def _configs(args):
    from faultlens.diagnosis.engine.core import EngineConfig
    from faultlens.diagnosis.engine.thresholds import ThresholdsError
    from faultlens.diagnosis.engine.thresholds import load as load_thresholds
    from faultlens.parsing.rules import RuleError
    from faultlens.parsing.rules import load as load_rules

    try:
        current = EngineConfig(line_rules=load_rules(args.current_rules) if args.current_rules else None,
                               thresholds=load_thresholds(args.current_thresholds))
        changed = EngineConfig(line_rules=load_rules([*args.current_rules, *args.rules]),
                               thresholds=load_thresholds([*args.current_thresholds, *args.thresholds]))
    except (RuleError, ThresholdsError) as exc:
        raise SystemExit(f"faultlens rules diff: {exc}") from None
    return current, changed


def run(args: argparse.Namespace) -> int:
    import duckdb

    from faultlens import rules_diff as rd

    if bool(args.traces) == bool(args.db):
        print("faultlens rules diff: give traces or --db HISTORY (one of them)", file=sys.stderr)
        return 2
    if not args.rules and not args.thresholds:
        print("faultlens rules diff: nothing changed: give --rules NEW.toml and/or --thresholds NEW.toml", file=sys.stderr)
        return 2
    current, changed = _configs(args)
    inputs = [args.db] if args.db else args.traces
    worst = 0
    for where in inputs:
        try:
            if not rd.exists(where):
                raise FileNotFoundError(f"no such file: {where}")
            if args.db:
                events = rd.history_events(where)
                culprits = rd.history_culprits(where) if args.labels else None
                if args.expect:
                    raise ValueError("--expect reads a trace's expect file; a history has --labels")
            else:
                events = rd.trace_events(where)
                culprits = rd.trace_culprits(where, "labels" if args.labels else "expect") \
                    if args.labels or args.expect else None
            diff = rd.run_both(events, current, changed, culprits)
        except (OSError, ValueError) as exc:
            print(f"faultlens rules diff: {where}: {exc}", file=sys.stderr)
            worst = 2
            continue
        except duckdb.Error as exc:  # --db of a file that is no history (or not DuckDB at all): was a traceback
            print(f"faultlens rules diff: {where}: not a faultlens history ({exc})", file=sys.stderr)
            worst = 2
            continue
        if args.json:
            print(json.dumps({"input": str(where), **diff.to_dict()}), flush=True)
        else:
            print(f"{where}:\n{rd.render(diff)}", flush=True)
        if diff.healthy_evicted and worst < 2:
            worst = 1
    return worst
