"""faultlens score TRACE: analyze a trace and compare the diagnoses with its ground-truth labels."""

from __future__ import annotations

import argparse
import json
import os
import sys

from faultlens.diagnosis.engine.offline import analyze_trace
from faultlens.diagnosis.replay.scoring import EARLY_S, LATENCY_WORDS_LABELLED, WINDOW_S, score
from faultlens.engine_flags import add_engine_arguments, engine_config
from faultlens.events.trace import LABEL_KEYS, TraceError, read_labels

HELP = "analyze a trace and score the diagnoses against TRACE.labels.jsonl (precision, recall, latency)"
DESCRIPTION = f"""\
Runs `faultlens analyze` on TRACE and matches its diagnoses with the injected faults in
TRACE.labels.jsonl (or --labels FILE). A diagnosis matches a label when it has the same job and
fault class, was decided between {EARLY_S:.0f}s before and --window seconds (default {WINDOW_S:.0f})
after the onset, and names at least one of the label's nodes (or either names none). Record-only
diagnoses (action none), requests for stacks (action capture_stacks: suspicions blame nobody) and `unknown`
are not scored. Per class: precision, recall, detection latency (onset → decision), nodes wrongly
blamed, and for job_hang / fail_slow whether the evicted group holds the culprit.

Prints a table; with --json one JSON line per fault class and a last line with the overall
precision, recall, detection_latency_p50_s, detection_latency_p99_s and healthy_nodes_blamed.
--show-misses lists missed labels and unmatched diagnoses on stderr."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help="Parquet trace file")
    parser.add_argument("--labels", help="labels file (default TRACE.labels.jsonl)")
    parser.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    parser.add_argument("--window", type=float, default=WINDOW_S, help=f"match window after onset, s (default {WINDOW_S:.0f})")
    parser.add_argument("--show-misses", action="store_true", help="list missed labels and unmatched diagnoses on stderr")
    add_engine_arguments(parser)


def _labels(args) -> list[dict]:
    if not args.labels:
        return read_labels(args.trace)
    from faultlens.events.jsonl import json_lines

    out = []
    for where, label in json_lines(args.labels, TraceError):
        if not isinstance(label, dict) or any(k not in label for k in LABEL_KEYS):
            raise TraceError(f"{where}: a label needs {', '.join(LABEL_KEYS)}")
        out.append(label)
    return out


def run(args: argparse.Namespace) -> int:
    # Each error names its own file (the trace, or the labels with where they were looked for).
    if not os.path.exists(args.trace):  # before its labels, which a missing trace has none of either
        print(f"faultlens score: {args.trace}: no such trace", file=sys.stderr)
        return 2
    try:
        labels = _labels(args)
        found, _ = analyze_trace(args.trace, config=engine_config(args),
                                 progress=sys.stderr.isatty())
    except (TraceError, FileNotFoundError, OSError, ValueError) as exc:
        print(f"faultlens score: {exc}", file=sys.stderr)
        return 2
    result = score(found, labels, window_s=args.window)
    rows = [result.classes[k].to_dict() for k in sorted(result.classes)]
    overall = result.overall()
    if args.show_misses:
        for lab in result.missed:
            print(json.dumps({"missed": lab}), file=sys.stderr)
        for d in result.unmatched:
            print(json.dumps({"unmatched": d.to_dict()}), file=sys.stderr)
    if args.json:
        for r in rows:
            print(json.dumps(r))
        print(json.dumps(overall), flush=True)
        return 0
    _table(rows, overall)
    return 0


def _table(rows: list[dict], overall: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    def f(x):
        return "-" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))

    t = Table(title="faultlens score")
    t.add_column("fault", no_wrap=True, min_width=18)
    for col in ("labels", "detected", "diagnoses", "precision", "recall", "latency p50 s", "latency p99 s",
                "wrong nodes", "group holds culprit"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(r["fault"], f(r["labels"]), f(r["detected"]), f(r["diagnoses"]), f(r["precision"]), f(r["recall"]),
                  f(r["detection_latency_p50_s"]), f(r["detection_latency_p99_s"]), f(r["wrong_nodes"]),
                  r.get("group_holds_culprit", ""))
    t.add_row("[b]overall", f(overall["labels"]), f(overall["detected"]), f(overall["diagnoses"]),
              f(overall["precision"]), f(overall["recall"]), f(overall["detection_latency_p50_s"]),
              f(overall["detection_latency_p99_s"]), f(overall["healthy_nodes_blamed"]), overall["group_holds_culprit"])
    # Piped output has no terminal width to fit: give the table the room it needs.
    console = Console(width=None if sys.stdout.isatty() else 150)
    console.print(t)
    console.print(f"latency: {LATENCY_WORDS_LABELLED} (decision time minus the labelled onset)")
