"""The HTML report's building blocks (history.html_report lays the sections out with them):
the stylesheet, escaping, a table of query rows with headings and units, a headline card, and how
a number or a time is shown. Every value that comes from the history goes through :func:`esc`.
"""

from __future__ import annotations

import datetime as dt
import html
from typing import Any, Iterable

from faultlens.history.report import cell

MAX_ROWS = 200  # rows per table; the file stays small enough to mail, --json has every row

# Column headings with their units; a column not listed is shown under its own name.
HEADINGS = {
    "job": "job", "fault": "fault class", "nodes": "nodes", "node": "node", "action": "action",
    "onset": "onset (UTC)", "detected_at": "detected (UTC)", "issued_at": "issued (UTC)",
    "source": "its seconds come from",
    "detection_s": "detection (s, first evidence → decision)", "command": "first command", "to_command_s": "to command (s)",
    "recovery_s": "recovery (s)", "wall_s": "wall (s)", "productive_s": "productive (s)", "ettr": "ETTR",
    "incidents": "incidents", "recovered": "recovered", "mttr_s": "MTTR (s)", "p50_s": "p50 (s)",
    "p99_s": "p99 (s)", "max_s": "max (s)", "detection_p50_s": "detection p50 (s)", "n": "diagnoses",
    "outcome": "outcome", "to_restart_s": "to restart (s)", "reason": "reason", "group": "group",
    "diagnoses": "all diagnoses", "acting": "acting", "evidence_requests": "stack requests", "record_only": "record-only",
    "occurrences": "occurrences", "jobs": "jobs", "failures": "failures", "mtbf_s": "MTBF (s)",
    "hardware_failures": "hardware failures", "faults": "classes", "engine_asked": "engine asked",
    "confidence": "confidence", "detail": "detail", "ts": "decided (UTC)", "basis": "truth from",
    "state": "state", "counted": "counted against it", "failed_checks": "failed checks", "evictions": "evictions",
    "resumes": "resumed by hand", "lemon_rule": "lemon rule", "lemon_at": "lemon since (UTC)",
    "lemon_reason": "why", "lemon_diagnoses": "diagnoses", "last_failure_ts": "last failure (UTC)",
    "diagnosis_id": "diagnosis", "receivers": "receivers", "answers": "acks", "refusal": "refused because",
}

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1d1f;
       margin: 0; background: #f5f5f7; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 48px; background: #fff; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 36px 0 8px; padding-bottom: 4px; border-bottom: 2px solid #e5e5ea; }
h3 { font-size: 16px; margin: 20px 0 6px; }
p.meta, p.note, figcaption { color: #555; margin: 4px 0 10px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 18px 0 8px; }
.card { flex: 1 1 150px; border: 1px solid #e5e5ea; border-radius: 8px; padding: 10px 14px; background: #fafafc; }
.card .v { font-size: 24px; font-weight: 600; }
.card .k { color: #555; font-size: 13px; }
.card.bad .v { color: #c0392b; }
.card.good .v { color: #1e8449; }
table { border-collapse: collapse; width: 100%; margin: 6px 0 14px; font-size: 13.5px; }
th, td { border-bottom: 1px solid #e5e5ea; padding: 5px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f5; font-weight: 600; position: sticky; top: 0; }
tr:nth-child(even) td { background: #fafafc; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.detail { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; white-space: pre-wrap;
            word-break: break-word; max-width: 560px; }
td.nw { white-space: nowrap; }
td.bad { color: #c0392b; font-weight: 600; }
td.good { color: #1e8449; }
td.guess { color: #b9770e; font-style: italic; }
figure { margin: 10px 0 22px; }
figure img { max-width: 100%; height: auto; border: 1px solid #e5e5ea; }
nav a { margin-right: 14px; }
footer { color: #777; font-size: 13px; margin-top: 40px; }
"""

_NOWRAP = frozenset({"job", "node", "fault", "action", "ts", "onset", "issued_at", "detected_at", "command"})


def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _is_numeric(column: str, value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and column not in ("job", "node")


def table(rows: list[dict[str, Any]], columns: Iterable[str], *, empty: str,
           classes: dict[str, Any] | None = None) -> str:
    """An HTML table of ``columns`` of ``rows``; ``classes`` maps a column to a function row → CSS class."""
    if not rows:
        return f'<p class="note">{esc(empty)}</p>'
    cols = list(columns)
    numeric = {c for c in cols if any(_is_numeric(c, r.get(c)) for r in rows[:MAX_ROWS])}
    head = "".join(f'<th{" class=num" if c in numeric else ""}>{esc(HEADINGS.get(c, c))}</th>' for c in cols)
    body = []
    for row in rows[:MAX_ROWS]:
        cells = []
        for c in cols:
            value = row.get(c)
            css = []
            if c in numeric:
                css.append("num")
            if c == "detail":
                css.append("detail")
            elif c in _NOWRAP:
                css.append("nw")
            if classes and c in classes and (extra := classes[c](row)):
                css.append(extra)
            text = cell(c, value, max_items=12, time_format="%Y-%m-%d %H:%M:%S")
            attr = f' class="{" ".join(css)}"' if css else ""
            cells.append(f"<td{attr}>{esc(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = (f'<p class="note">{len(rows) - MAX_ROWS} more rows not shown (`faultlens report --json` has them all).</p>'
            if len(rows) > MAX_ROWS else "")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{more}"


def card(value: str, label: str, tone: str = "") -> str:
    return f'<div class="card {tone}"><div class="v">{esc(value)}</div><div class="k">{esc(label)}</div></div>'


def num(value: Any, fmt: str = "{:.1f}", none: str = "-") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return none
    return fmt.format(value)


def when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
