"""faultlens check: replay tests for users. Keep a recorded incident's verdicts beside its trace and
find out when an upgrade or a new threshold changes them."""

from __future__ import annotations

import argparse
import json
import sys

from faultlens.commands import about

HELP = "replay tests: write a trace's expected verdicts (--expect), or check traces against theirs"
DESCRIPTION = """\
Turn a recorded incident into a test in two commands:

  faultlens record --out incident.parquet ...        (or any trace: simulate, a colleague's)
  faultlens check --expect incident.parquet           writes incident.parquet.expect.jsonl
  (review that file: one verdict per line; commit it beside the trace)
  faultlens check incident.parquet                    later, after an upgrade or a threshold change

--expect TRACE|DIR writes TRACE.expect.jsonl (for every *.parquet of a DIR) from today's acting diagnoses: job, fault class, nodes,
first action and an onset window (the first evidence ±--slack seconds). Record-only diagnoses
(action none) and requests for stacks are not verdicts; alerts are. A trace on which nothing may
happen gets a file with only its header line.

TRACE... | DIR runs the detectors on each trace (as `faultlens analyze`) and compares with its
expect file (a DIR is searched for *.expect.jsonl). Differences are listed per trace:
  - missing   a verdict the file expects that no diagnosis gives today
  + extra     an acting diagnosis the file does not expect
  ~ changed   the same job and fault class with other nodes, another action, or an onset moved
  !           a machine evicted that no expected verdict evicts (the worst outcome)
Exit status: 0 all as expected, 1 any difference, 2 a trace or expect file could not be read.
--json prints one JSON line per trace; --junit FILE writes JUnit XML for CI systems.
The pytest plugin (installed with faultlens) collects every *.expect.jsonl under the folders
pytest is given, one test per trace: `pytest incidents/`."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from faultlens.engine_flags import add_engine_arguments

    parser.add_argument("paths", nargs="+", metavar="TRACE|DIR",
                        help="Parquet traces (or their expect files), or folders holding *.expect.jsonl")
    parser.add_argument("--expect", action="store_true",
                        help="write TRACE.expect.jsonl from today's diagnoses instead of checking (review, then commit)")
    parser.add_argument("--slack", type=float, default=60.0,
                        help="with --expect: the onset window, seconds either side of the first evidence (default 60)")
    parser.add_argument("--json", action="store_true", help="one JSON line per trace instead of the readable diff")
    parser.add_argument("--junit", metavar="FILE", help="also write the results as JUnit XML to FILE")
    add_engine_arguments(parser)


def _expect(args, traces, config) -> int:
    from faultlens.replay_check import describe_verdict, write_expectations

    for trace in traces:
        try:
            path, verdicts = write_expectations(trace, config, slack_s=args.slack)
        except (OSError, ValueError) as exc:
            print(f"faultlens check: {about(trace, exc)}", file=sys.stderr)
            return 2
        if args.json:
            print(json.dumps({"trace": str(trace), "expect": str(path), "verdicts": [v.to_dict() for v in verdicts]}))
            continue
        print(f"wrote {path}: {len(verdicts)} verdict(s); review it, then commit it beside the trace")
        for v in verdicts:
            print(f"  {describe_verdict(v)}")
    return 0


def run(args: argparse.Namespace) -> int:
    from faultlens.engine_flags import engine_config
    from faultlens.replay_check import check_trace, junit_xml, render, traces_in

    try:
        traces = traces_in(args.paths, new=args.expect)
    except ValueError as exc:
        print(f"faultlens check: {exc}", file=sys.stderr)
        return 2
    if not traces:
        wanted = "*.parquet" if args.expect else "*.expect.jsonl"
        print(f"faultlens check: no {wanted} under {' '.join(args.paths)}", file=sys.stderr)
        return 2
    config = engine_config(args)
    if args.expect:
        return _expect(args, traces, config)
    checks = []
    for trace in traces:
        c = check_trace(trace, config)
        checks.append(c)
        print(json.dumps(c.to_dict()) if args.json else render(c), flush=True)
    if args.junit:
        with open(args.junit, "wb") as fh:
            fh.write(junit_xml(checks))
    failed = sum(1 for c in checks if not c.ok)
    if not args.json:
        print(f"{len(checks) - failed} of {len(checks)} trace(s) as expected", file=sys.stderr)
    if any(c.error for c in checks):
        return 2
    return 1 if failed else 0
