"""faultlens report: summarise a DuckDB fault history (tables, JSON lines, PNG charts, one HTML file)."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile

HELP = "summarise a fault history: faults by class/node/day, latencies, MTBF, MTTR, over-eviction, ETTR (tables, JSON, PNGs, HTML)"
DESCRIPTION = """\
Reads a history written by `faultlens history` and prints: faults by class, by node and by day;
the top offending nodes; detection latency (fault onset → diagnosis) and time to command
(diagnosis → command) p50/p99; MTBF per node; the over-eviction ratio; the ETTR of each job
(productive time / wall time); each incident; what the actuator did on the scheduler (operations
by outcome) and the machines it took out, still out first. Definitions: docs/history.md.

--json prints one JSON line per section (each with a "section" key) instead of tables.
--plots DIR also writes PNG charts there (faults over time, node × class heat map, detection
latency histogram, job timelines, MTBF, MTTR). Charts count acting diagnoses only: stack requests
(capture_stacks) are drawn apart and record-only findings are left out; each says so in its caption.
--html OUT.html also writes one self-contained HTML report (charts inlined, no external files):
per-job ETTR, incidents, MTTR per class, detection latency, commands and their outcome, the wrongly
blamed nodes; open it in any browser. Exits 1 with one line on stderr when the file is not a
usable history or holds nothing."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="DuckDB history file (default $FAULTLENS_DB or $FAULTLENS_HOME/history.duckdb)")
    parser.add_argument("--json", action="store_true", help="JSON lines (one per section) instead of tables")
    parser.add_argument("--plots", metavar="DIR", help="write PNG charts into DIR")
    parser.add_argument("--html", metavar="OUT.html", help="write one self-contained HTML report to OUT.html")
    parser.add_argument("--top", type=int, default=10, help="rows in the top-nodes section (default 10)")
    parser.add_argument("--max-gap", type=float, default=60.0,
                        help="ETTR: seconds a step mark counts as productive at most (default 60)")


def run(args: argparse.Namespace) -> int:
    import duckdb

    from faultlens.history import report
    from faultlens.history.queries import is_empty
    from faultlens.history.schema import HistoryError, default_db_path, open_history

    db = args.db or default_db_path()
    snapshot = None
    try:
        conn = open_history(db, read_only=True)
    except HistoryError as exc:
        if "in use" not in str(exc):
            print(f"faultlens report: {exc}", file=sys.stderr)
            return 1
        try:
            conn, snapshot = _snapshot(db)
        except (HistoryError, OSError) as again:
            print(f"faultlens report: {exc}; a copy of it would not open either: {again}", file=sys.stderr)
            return 1
    try:
        if is_empty(conn):
            print(f"faultlens report: the history {db} is empty: nothing to report", file=sys.stderr)
            return 1
        sections = report.build(conn, limit=args.top, max_gap=args.max_gap)
        if args.json:
            for line in report.json_lines(sections):
                sys.stdout.write(line.decode() + "\n")
        else:
            report.render(sections)
        if args.plots:
            from faultlens.history.plots import write_plots

            for name, path in write_plots(conn, args.plots).items():
                print(f"plot {name}: {path if path else 'no data to plot'}", file=sys.stderr)
        if args.html:
            from faultlens.history import html_report

            try:
                path = html_report.write(conn, args.html, source=str(db), max_gap=args.max_gap)
            except OSError as exc:
                print(f"faultlens report: cannot write {args.html}: {exc}", file=sys.stderr)
                return 1
            print(f"html report: {path.resolve()}", file=sys.stderr)
        sys.stdout.flush()
        return 0
    except duckdb.Error as exc:
        print(f"faultlens report: {db}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    finally:
        conn.close()
        if snapshot is not None:
            shutil.rmtree(snapshot, ignore_errors=True)


def _snapshot(db):
    """A read-only copy of a history another process holds open (`faultlens up` or `history`
    writing it: DuckDB lets no other process open the file, not even to read). The copy is the
    file and its write-ahead log as they are now; what is written after is in the next report."""
    from pathlib import Path

    from faultlens.history.schema import open_history

    src = Path(db)
    folder = Path(tempfile.mkdtemp(prefix="faultlens-report-"))
    try:
        copy = folder / src.name
        shutil.copyfile(src, copy)
        wal = src.with_name(src.name + ".wal")
        if wal.exists():
            shutil.copyfile(wal, copy.with_name(copy.name + ".wal"))
        print(f"faultlens report: {src} is in use (a running `faultlens up`?): reporting a copy taken now",
              file=sys.stderr)
        return open_history(copy, read_only=True), folder
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
