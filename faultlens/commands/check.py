"""faultlens check: replay tests for users. Keep a recorded incident's verdicts beside its trace and
find out when an upgrade or a new threshold changes them."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

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
happen gets a file with only its header line. An expect file that exists (maybe reviewed by hand)
is kept: for a TRACE named, that is an error (exit 2); for one found in a DIR, a note (the others
are written). --force replaces it.

TRACE... | DIR runs the detectors on each trace (as `faultlens analyze`) and compares with its
expect file (a DIR is searched for *.expect.jsonl). Differences are listed per trace:
  - missing   a verdict the file expects that no diagnosis gives today
  + extra     an acting diagnosis the file does not expect
  ~ changed   the same job and fault class with other nodes, another action, or an onset moved
  !           a machine evicted that no expected verdict evicts (the worst outcome)
Exit status: 0 all as expected, 1 any difference, 2 a trace or expect file could not be read.
--json prints one JSON line per trace; --junit FILE writes JUnit XML for CI systems.
The pytest plugin (installed with faultlens) collects every *.expect.jsonl under the folders
pytest is given, one test per trace: `python -m pytest incidents/`, pytest installed in faultlens's
environment (pip install pytest there); a pytest of another environment says only "no tests ran"."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from faultlens.engine_flags import add_engine_arguments

    parser.add_argument("paths", nargs="+", metavar="TRACE|DIR",
                        help="Parquet traces (or their expect files), or folders holding *.expect.jsonl")
    parser.add_argument("--expect", action="store_true",
                        help="write TRACE.expect.jsonl from today's diagnoses instead of checking (review, then commit)")
    parser.add_argument("--force", action="store_true",
                        help="with --expect: replace an expect file that exists (by default it is kept)")
    parser.add_argument("--slack", type=float, default=60.0,
                        help="with --expect: the onset window, seconds either side of the first evidence (default 60)")
    parser.add_argument("--json", action="store_true", help="one JSON line per trace instead of the readable diff")
    parser.add_argument("--junit", metavar="FILE", help="also write the results as JUnit XML to FILE")
    add_engine_arguments(parser)


def _expect(args, traces, config) -> int:
    from faultlens.replay_check import describe_verdict, expect_path, named_traces, write_expectations

    named, kept = named_traces(args.paths), []
    for trace in traces:
        if expect_path(trace).exists() and not args.force:
            # A reviewed file holds a person's judgement that today's verdicts may not repeat.
            kept.append(trace)
            if args.json:
                print(json.dumps({"trace": str(trace), "expect": str(expect_path(trace)), "kept": True}))
            print(f"faultlens check: {expect_path(trace)} exists (maybe reviewed by hand): kept; `faultlens check "
                  f"{trace}` shows how today's verdicts differ, --force replaces it", file=sys.stderr)
            continue
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
    return 2 if any(t in named for t in kept) else 0


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
        n, how = (0, "") if args.expect else _how_to_expect(args.paths)
        there = f"; {n} trace(s) there, none with one: {how}" if n else ""
        if not n and not args.expect:
            there = " (nor a *.parquet trace to write one for: `faultlens record --out DIR/NAME.parquet` records one)"
        print(f"faultlens check: no {wanted} under {' '.join(args.paths)}{there}", file=sys.stderr)
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
    n, how = _how_to_expect(args.paths, skip=traces)
    if n and not args.json:
        print(f"faultlens check: {n} trace(s) not checked, having no expect file: {how}", file=sys.stderr)
    failed = sum(1 for c in checks if not c.ok)
    if not args.json:
        print(f"{len(checks) - failed} of {len(checks)} trace(s) as expected", file=sys.stderr)
    if any(c.error for c in checks):
        return 2
    return 1 if failed else 0



def _how_to_expect(paths: list[str], skip: list | tuple = ()) -> tuple[int, str]:
    """How many traces in the folders of ``paths`` have no expect file (``skip``: those checked), and
    the command line that writes theirs."""
    from faultlens.replay_check import traces_without_expect

    lacking = [t for t in traces_without_expect(paths) if t not in set(skip)]
    named = lacking if len(lacking) <= 5 else [p for p in paths if Path(p).is_dir()]
    return len(lacking), (f"write {'it' if len(lacking) == 1 else 'them'} with\n  "
                          + shlex.join(["faultlens", "check", "--expect", *map(str, named)])
                          + "\nthen review each expect file and commit it beside its trace")
