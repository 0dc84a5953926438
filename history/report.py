"""The fault-history report: every section of history.queries as rich tables or JSON lines."""

from __future__ import annotations

import datetime as dt
import math
from typing import IO, Any

import duckdb
import orjson
from rich.console import Console
from rich.table import Table

from faultlens.diagnosis.replay.scoring import LATENCY_WORDS_EVIDENCE, LATENCY_WORDS_LABELLED
from faultlens.history.queries import DEFAULTS, PYTHON_SECTIONS, REPORT_SECTIONS, run
from faultlens.history.unrecognised import unrecognised_lines

TITLES = {
    "summary": "History",
    "faults_by_class": "Faults by class",
    "faults_by_node": "Faults by node and class",
    "faults_by_day": "Faults by day (UTC, by onset)",
    "top_nodes": "Top offending nodes",
    "detection_latency": f"Detection latency of acting diagnoses: {LATENCY_WORDS_EVIDENCE} (s)",
    "detection_by_class": f"Detection latency by class, acting diagnoses: {LATENCY_WORDS_EVIDENCE} (s)",
    "label_detection": f"Detection latency: {LATENCY_WORDS_LABELLED}, matched as `faultlens score` matches (s)",
    "time_to_command": "Time to command: diagnosis → first command (s)",
    "mtbf": "MTBF per node (history window / failures)",
    "over_eviction": "Over-eviction (evicted nodes / really faulty nodes)",
    "wrongly_blamed": "Wrongly blamed: evictions of nodes that were not really faulty",
    "ettr": "ETTR per job (productive time / wall time)",
    "incidents": "Incidents (acting diagnoses)",
    "mttr_by_class": "MTTR by class: fault onset → job productive again (s)",
    "command_outcomes": "Commands and their outcome",
    "event_faults": "Fault signals in stored events",
    "action_outcomes": "Scheduler actions (actuator) by operation and outcome",
    "nodes_taken_out": "Machines taken out of the scheduler (drained / cordoned), still out first",
    "machines": "Machines across jobs: failures, MTBF and fleet state (lemons first)",
    "lemons": "Lemons: machines out for good, waiting for hardware inspection (faultlens nodes resume)",
    "refused_copies": "Copies of commands refused by the history's signature check (forged, altered, displaced)",
}

# Wide sections: the columns a terminal table shows (--json and --html have every column).
TABLE_COLUMNS = {
    "command_outcomes": ("issued_at", "job", "action", "nodes", "fault", "outcome", "to_restart_s"),
    "wrongly_blamed": ("issued_at", "job", "node", "fault", "group", "reason"),
    "nodes_taken_out": ("node", "actuator", "job", "fault", "taken_out_at", "times", "brought_back_at", "still_out",
                        "diagnosis_id"),
    "refused_copies": ("issued_at", "job", "action", "nodes", "problem", "command_id"),
    "machines": ("node", "state", "incidents", "jobs", "mtbf_s", "counted", "evictions", "lemon_rule"),
    "lemons": ("node", "lemon_at", "lemon_rule", "lemon_diagnoses", "resumes"),
}

# Sections that are one row of figures: printed as one JSON object, not a list of rows.
SINGLE_ROW = frozenset({"summary", "detection_latency", "label_detection", "time_to_command", "over_eviction"})
_TIMES = frozenset({"ts", "first_ts", "last_ts", "onset", "detected_at", "command_at", "recovered_at", "issued_at",
                    "restarted_at", "taken_out_at", "brought_back_at", "lemon_at", "last_failure_ts"})


def build(conn: duckdb.DuckDBPyConnection, **params: Any) -> dict[str, list[dict[str, Any]]]:
    """Every report section's rows, in report order."""
    out = {}
    for name in REPORT_SECTIONS:
        if name in PYTHON_SECTIONS:
            out[name] = unrecognised_lines(conn, int(params.get("limit") or DEFAULTS["limit"]))
        else:
            out[name] = run(conn, name, **params)
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"cannot encode {type(value).__name__}")


def json_lines(sections: dict[str, list[dict[str, Any]]]) -> list[bytes]:
    """One JSON line per section, each with a ``section`` key."""
    out = []
    for name, rows in sections.items():
        body: dict[str, Any] = {"section": name}
        if name in SINGLE_ROW:
            body.update(rows[0] if rows else {})
        else:
            body["rows"] = rows
        out.append(orjson.dumps(body, default=_jsonable, option=orjson.OPT_NON_STR_KEYS))
    return out


def cell(column: str, value: Any, *, max_items: int = 6, time_format: str = "%m-%d %H:%M:%S") -> str:
    """One value as table text: times in UTC, ratios to 3 places, ids shortened, lists cut at ``max_items``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if column in _TIMES:
            return dt.datetime.fromtimestamp(value, tz=dt.timezone.utc).strftime(time_format)
        if column in ("ettr", "ratio", "confidence"):
            return f"{value:.3f}"
        return f"{value:,.1f}"
    if column.endswith("id") and isinstance(value, str) and len(value) > 12:
        return value[:10] + "…"  # ids are for --json; a prefix is enough to tell rows apart
    if isinstance(value, list):
        more = f" (+{len(value) - max_items})" if len(value) > max_items else ""
        return ", ".join(str(v) for v in value[:max_items]) + more
    return str(value)


def render(sections: dict[str, list[dict[str, Any]]], file: IO[str] | None = None, max_rows: int = 30) -> None:
    """Rich tables on ``file`` (stdout by default)."""
    console = Console(file=file)
    if not console.is_terminal:
        console.width = 160  # piped or to a file: rich would assume 80 columns and fold every cell
    for name, rows in sections.items():
        table = Table(title=TITLES.get(name, name), title_justify="left")
        if not rows:
            console.print(f"[bold]{TITLES.get(name, name)}[/bold]: no data")
            continue
        cols = list(TABLE_COLUMNS.get(name, rows[0]))
        for col in cols:
            table.add_column(col, overflow="fold")
        for row in rows[:max_rows]:
            table.add_row(*(cell(c, row[c]) for c in cols))
        if len(rows) > max_rows:
            table.caption = f"{len(rows) - max_rows} more rows (use --json for all)"
        console.print(table)
