"""One self-contained HTML file for a fault history: what to hand a colleague after an incident.

Everything is inline (CSS, PNG charts as base64 data URIs), so the file opens anywhere, offline,
and can be attached to a ticket. Every value that comes from the history is HTML-escaped: a
diagnosis detail quotes log lines and stack frames, which hold ``<`` and ``&``.

The numbers are the same named queries as `faultlens report` (history.queries) and the charts
are history.plots; this module only lays them out.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
from pathlib import Path
from typing import Any, Iterable

import duckdb

from faultlens.diagnosis.replay.scoring import LATENCY_WORDS_EVIDENCE, LATENCY_WORDS_LABELLED
from faultlens.history import plots
from faultlens.history.queries import kind_counts, run
from faultlens.history.report import cell

MAX_ROWS = 200  # rows per table; the file stays small enough to mail, --json has every row

# Column headings with their units; a column not listed is shown under its own name.
HEADINGS = {
    "job": "job", "fault": "fault class", "nodes": "nodes", "node": "node", "action": "action",
    "onset": "onset (UTC)", "detected_at": "detected (UTC)", "issued_at": "issued (UTC)",
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
figure { margin: 10px 0 22px; }
figure img { max-width: 100%; height: auto; border: 1px solid #e5e5ea; }
nav a { margin-right: 14px; }
footer { color: #777; font-size: 13px; margin-top: 40px; }
"""

_NOWRAP = frozenset({"job", "node", "fault", "action", "ts", "onset", "issued_at", "detected_at", "command"})


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _is_numeric(column: str, value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and column not in ("job", "node")


def _table(rows: list[dict[str, Any]], columns: Iterable[str], *, empty: str,
           classes: dict[str, Any] | None = None) -> str:
    """An HTML table of ``columns`` of ``rows``; ``classes`` maps a column to a function row → CSS class."""
    if not rows:
        return f'<p class="note">{_e(empty)}</p>'
    cols = list(columns)
    numeric = {c for c in cols if any(_is_numeric(c, r.get(c)) for r in rows[:MAX_ROWS])}
    head = "".join(f'<th{" class=num" if c in numeric else ""}>{_e(HEADINGS.get(c, c))}</th>' for c in cols)
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
            cells.append(f"<td{attr}>{_e(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = (f'<p class="note">{len(rows) - MAX_ROWS} more rows not shown (`faultlens report --json` has them all).</p>'
            if len(rows) > MAX_ROWS else "")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{more}"


def _figure(conn: duckdb.DuckDBPyConnection, name: str, alt: str) -> str:
    fig = plots.PLOTS[name](conn)
    if fig is None:
        return f'<p class="note">No data for the chart “{_e(alt)}”.</p>'
    data = base64.b64encode(plots.png_bytes(fig)).decode("ascii")
    return f'<figure><img alt="{_e(alt)}" src="data:image/png;base64,{data}"></figure>'


def _card(value: str, label: str, tone: str = "") -> str:
    return f'<div class="card {tone}"><div class="v">{_e(value)}</div><div class="k">{_e(label)}</div></div>'


def _num(value: Any, fmt: str = "{:.1f}", none: str = "-") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return none
    return fmt.format(value)


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _outcome_class(row: dict[str, Any]) -> str:
    if row["outcome"] in ("job restarted", "stack dumps received"):
        return "good"
    return "bad" if row["action"] in ("evict", "restart", "reattempt", "rollback") else ""


def _state_class(row: dict[str, Any]) -> str:
    return {"hardware_inspection": "bad", "in_service": "good"}.get(row.get("state") or "", "")


def _receivers_class(row: dict[str, Any]) -> str:
    return {"obeyed": "good", "refused": "bad"}.get(row["receivers"], "")


def _action_rows(conn: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    rows = run(conn, "actions_taken")
    for r in rows:
        r["answers"] = f"{r['obeyed_acks']} obeyed, {r['refused_acks']} refused" \
            if r["obeyed_acks"] or r["refused_acks"] else "-"
        if not r["diagnosis_id"]:
            r["diagnosis_id"] = "(none)"
    return rows


def _command_rows(conn: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    rows = run(conn, "command_outcomes")
    for r in rows:
        notes = []
        if r["outcome"] == "job restarted":
            # an elastic job may go on with fewer machines than it lost (trainer_hooks/elastic_run.py): out and in pair as far as both go
            swapped = ", ".join(f"{a}→{b}" for a, b in zip(r["nodes_out"] or [], r["nodes_in"] or [], strict=False))
            notes.append(f"after {_num(r['to_restart_s'])} s" + (f"; replaced {swapped}" if swapped else ""))
        elif r["outcome"] == "stack dumps received":
            notes.append(f"{r['usable_dumps']} usable dumps from {r['dump_nodes']} node(s)")
        if not r["has_diagnosis"]:
            notes.append("no diagnosis in the history caused it (forged, manual, or from another history)")
        r["details"] = "; ".join(notes)
    return rows


def _projection(conn: duckdb.DuckDBPyConnection) -> str:
    """What this history's detection would give a big job (faultlens ettr, docs/ettr.md)."""
    from faultlens.history.whatif.headline import headline, history_rows

    rows = history_rows(conn)
    if not rows:
        return ""
    try:
        p = headline(rows)
    except ValueError as exc:
        return f'<p class="note">No ETTR projection: {_e(str(exc))}</p>'
    lo, hi = p["ettr_ci"]
    losses = [{"cause": x["cause"], "share": f"{x['share']:.2%}"} for x in p["largest_losses"]]
    return "\n".join([
        f'<h3 id="projection">Projected: a {p["gpus"]:,}-GPU, {p["days"]:g}-day job with this detection</h3>',
        f'<p class="note">ByteRobust\'s fault rates and recovery, detection as this history measured it '
        f'({_e(", ".join(p["measured_classes"]))}): ETTR <b>{p["ettr"]:.2%}</b> (Monte Carlo '
        f'{p["ettr_monte_carlo"]:.2%}, 95 % CI {lo:.2%} to {hi:.2%}); with the framework\'s timeout alone '
        f'{p["timeout_only_ettr"]:.2%}. Checkpoint every {p["checkpoint_interval_optimal_s"]:.0f} s (the optimum). '
        "Model and assumptions: docs/ettr.md; more with <code>faultlens ettr</code>.</p>",
        _table(losses, ["cause", "share"], empty=""),
    ])


def _headline_cards(ettr: list[dict[str, Any]], kinds: dict[str, int], latency: dict[str, Any],
                    labels: dict[str, Any] | None, ttc: dict[str, Any], commands: list[dict[str, Any]],
                    over: dict[str, Any]) -> list[str]:
    """The cards at the top: ETTR per job, acting diagnoses, detection latency, commands, healthy evictions."""
    cards = []
    for job in ettr[:4]:
        tone = "good" if (job["ettr"] or 0) >= 0.9 else "bad" if (job["ettr"] or 0) < 0.7 else ""
        cards.append(_card(_num(job["ettr"], "{:.1%}"), f"ETTR of {job['job']}", tone))
    cards.append(_card(str(kinds["acting"]), f"acting diagnoses (+{kinds['evidence_request']} stack requests, "
                                             f"{kinds['record_only']} record-only)"))
    # The headline latency is the one `faultlens score` and the demo print: from the labelled onset where
    # there is ground truth, else from the first evidence; the words under it say which (diagnosis.replay.scoring).
    if labels:
        cards.append(_card(f"{_num(labels['p50_s'])} s", f"detection latency p50 (p99 {_num(labels['p99_s'])} s): "
                                                          f"{LATENCY_WORDS_LABELLED}"))
    else:
        cards.append(_card(f"{_num(latency['p50_s'])} s", f"detection latency p50 (p99 {_num(latency['p99_s'])} s): "
                                                           f"{LATENCY_WORDS_EVIDENCE}"))
    cards.append(_card(f"{_num(ttc['p50_s'])} s", "diagnosis → command p50"))
    failed = sum(1 for c in commands if _outcome_class(c) == "bad")
    cards.append(_card(f"{len(commands)}", f"commands ({failed} with no effect recorded)", "bad" if failed else ""))
    healthy = over["healthy_evicted"] or 0
    cards.append(_card(str(healthy), f"healthy nodes evicted (truth from {over['basis']})", "bad" if healthy else "good"))
    return cards


def render(conn: duckdb.DuckDBPyConnection, *, source: str = "", max_gap: float | None = None,
           generated_at: float | None = None) -> str:
    """The whole report as one HTML string."""
    summary = run(conn, "summary")[0]
    ettr = run(conn, "ettr", max_gap=max_gap)
    latency = run(conn, "detection_latency")[0]
    ttc = run(conn, "time_to_command")[0]
    over = run(conn, "over_eviction")[0]
    wrong = run(conn, "wrongly_blamed")
    commands = _command_rows(conn)
    actions = _action_rows(conn)
    labels = run(conn, "label_detection")[0] if summary["labels"] else None
    generated = generated_at if generated_at is not None else dt.datetime.now(dt.timezone.utc).timestamp()

    cards = _headline_cards(ettr, kind_counts(conn), latency, labels, ttc, commands, over)

    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>faultlens incident report{(' — ' + _e(source)) if source else ''}</title>",
        f"<style>{CSS}</style></head><body><main>",
        "<h1>faultlens incident report</h1>",
        f'<p class="meta">History {_e(source or "(in memory)")}: {_when(summary["first_ts"])} to '
        f'{_when(summary["last_ts"])} ({_num(summary["span_s"], "{:,.0f}")} s); {summary["events"]:,} events, '
        f'{summary["diagnoses"]} diagnoses, {summary["commands"]} commands, {summary["jobs"]} job(s), '
        f'{summary["labels"]} ground-truth labels.</p>',
        '<nav><a href="#ettr">ETTR</a><a href="#incidents">Incidents</a><a href="#actions">Actions taken</a>'
        '<a href="#mttr">MTTR</a>'
        '<a href="#latency">Detection latency</a><a href="#commands">Commands</a>'
        '<a href="#blamed">Wrongly blamed</a><a href="#faults">Faults</a><a href="#nodes">Nodes</a><a href="#machines">Machines</a>'
        '<a href="#diagnoses">Diagnoses</a></nav>',
        f'<div class="cards">{"".join(cards)}</div>',
        '<p class="note">An <b>acting</b> diagnosis asks for something to be done to the job (evict, restart, '
        "reattempt, rollback, stop-time diagnosis, inspection). A <b>stack request</b> (capture_stacks) is a "
        "suspicion that asks every rank for its stack and blames nobody; a <b>record-only</b> finding changes "
        "nothing. Failures, incidents, latencies and every chart count acting diagnoses only.</p>",

        '<h2 id="ettr">Effective training time (ETTR) per job</h2>',
        '<p class="note">Productive time (train steps seen) / wall time, from the job timeline.</p>',
        _table(ettr, ["job", "ettr", "productive_s", "wall_s", "incidents"], empty="No job timeline in this history."),
        _figure(conn, "job_timeline", "Job timelines"),
        _projection(conn),

        '<h2 id="incidents">Incidents</h2>',
        '<p class="note">Each acting diagnosis: when the fault began (first evidence), when it was diagnosed, the '
        "first command, and when the job was productive again.</p>",
        _table(run(conn, "incidents"), ["job", "onset", "fault", "nodes", "action", "detection_s", "command",
                                        "to_command_s", "recovery_s"], empty="No incidents."),

        '<h2 id="actions">Actions taken</h2>',
        '<p class="note">Every command remediation issued, the diagnosis behind it, and what its receivers '
        "answered: <b>obeyed</b> (a receiver acked it, or the launcher restarted the job for it), <b>refused</b> "
        "(a receiver it was addressed to refused it, for the reason shown, and none obeyed: it counts as no "
        "eviction) or <b>no answer</b> (no receiver acked it; an agent-side command may be obeyed silently).</p>",
        _table(actions, ["issued_at", "job", "action", "nodes", "diagnosis_id", "fault", "confidence", "receivers",
                         "answers", "refusal", "reason"],
               empty="No commands were issued.", classes={"receivers": _receivers_class}),

        '<h2 id="mttr">Time to recover (MTTR) per fault class</h2>',
        _table(run(conn, "mttr_by_class"), ["fault", "incidents", "recovered", "mttr_s", "p50_s", "max_s",
                                            "detection_p50_s"], empty="No incidents."),
        _figure(conn, "mttr", "MTTR per fault class"),

        '<h2 id="latency">Detection latency</h2>',
        '<p class="note">Detection latency is the decision time of the first diagnosis that finds a fault minus '
        "the fault's onset: the labelled onset where there is ground truth (as <code>faultlens score</code> and "
        "the demo count it), otherwise the time of the diagnosis's first evidence, which is all a live system "
        "knows. A fault whose log line is its first evidence is therefore diagnosed in 0 s by the second measure "
        "and in the time the line took to appear by the first.</p>",
    ]
    if labels:
        parts.append(f'<p class="note"><b>{LATENCY_WORDS_LABELLED}</b>: {labels["detected"]} of {labels["labels"]} '
                     f'labelled faults detected, {labels["missed"]} missed; p50 {_num(labels["p50_s"])} s, '
                     f'p99 {_num(labels["p99_s"])} s.</p>')
    parts += [
        f'<p class="note"><b>{LATENCY_WORDS_EVIDENCE if not labels else "first evidence → diagnosis"}</b>, '
        f'over {latency["n"]} acting diagnoses: p50 {_num(latency["p50_s"])} s, p99 {_num(latency["p99_s"])} s, '
        f'max {_num(latency["max_s"])} s (the table and the chart below). Diagnosis → first command: p50 '
        f'{_num(ttc["p50_s"])} s, p99 {_num(ttc["p99_s"])} s; {ttc["diagnoses_without_command"]} acting '
        "diagnosis(es) got no command.</p>",
        _table(run(conn, "detection_by_class"), ["fault", "n", "p50_s", "p99_s", "max_s"], empty="No acting diagnoses."),
        _figure(conn, "detection_latency", "Detection latency histogram"),

        '<h2 id="commands">Commands and their outcome</h2>',
        '<p class="note">Outcome from the history: a job restart that names the command, or the stack dumps that '
        "answered a stack request.</p>",
        _table(commands, ["issued_at", "job", "action", "nodes", "fault", "outcome", "details", "reason"],
               empty="No commands were issued.", classes={"outcome": _outcome_class}),

        '<h2 id="blamed">Wrongly blamed</h2>',
        f'<p class="note">Over-eviction: {over["evicted_nodes"]} node(s) evicted, {over["faulty_nodes"]} really '
        f'faulty (from {_e(over["basis"])}), ratio {_num(over["ratio"], "{:.2f}")}. A hang or fail-slow verdict '
        "evicts its whole parallel group on purpose, so some healthy evictions there are by design.</p>",
        _table(wrong, ["issued_at", "job", "node", "fault", "group", "reason"],
               empty=f"No healthy node was evicted (truth from {over['basis']})."),

        '<h2 id="faults">Faults</h2>',
        _table(run(conn, "faults_by_class"), ["fault", "acting", "evidence_requests", "record_only", "occurrences",
                                              "nodes"], empty="No diagnoses."),
        _figure(conn, "faults_over_time", "Acting diagnoses by class over time"),
        _figure(conn, "node_class_heatmap", "Acting diagnoses per node and class"),

        '<h2 id="nodes">Nodes</h2>',
        "<h3>Top offending nodes</h3>",
        _table(run(conn, "top_nodes"), ["node", "failures", "faults", "diagnoses"], empty="No node was diagnosed."),
        "<h3>Candidates for hardware inspection</h3>",
        _table(run(conn, "inspection_candidates"), ["node", "hardware_failures", "faults", "engine_asked"],
               empty="None: no node had repeated hardware failures."),
        _figure(conn, "mtbf", "MTBF per node"),

        '<h2 id="machines">Machines across jobs</h2>',
        '<p class="note">Failures are acting diagnoses naming the machine; MTBF is the history window / its '
        "failures. State and what <b>counted</b> against it come from remediation's fleet record (docs/fleet.md): "
        "sympathetic errors (Xid 45, Xid 43 after 13, NCCL ranks that only waited), user-code faults and group "
        "blames never count. A <b>hardware_inspection</b> machine is a lemon: drained, never a spare, back only "
        "by <code>faultlens nodes resume</code>.</p>",
        "<h3>Lemons</h3>",
        _table(run(conn, "lemons"), ["node", "lemon_at", "lemon_rule", "lemon_reason", "lemon_diagnoses", "resumes"],
               empty="No lemon: no machine kept failing across jobs.", classes={"lemon_rule": lambda r: "bad"}),
        "<h3>Every machine</h3>",
        _table(run(conn, "machines"), ["node", "state", "incidents", "jobs", "mtbf_s", "last_failure_ts", "counted",
                                       "failed_checks", "evictions", "resumes", "lemon_rule"],
               empty="No machine was diagnosed or recorded.", classes={"state": _state_class}),

        '<h2 id="diagnoses">Acting diagnoses in full</h2>',
        _table(run(conn, "acting_diagnoses"), ["ts", "job", "fault", "action", "nodes", "group", "confidence", "detail"],
               empty="No acting diagnoses."),
        f"<footer>Written by <code>faultlens report --html</code> at {_when(generated)}. Definitions of every "
        "measure: docs/history.md.</footer>",
        "</main></body></html>",
    ]
    return "\n".join(parts)


def write(conn: duckdb.DuckDBPyConnection, path: str | Path, **kwargs: Any) -> Path:
    """Write the report to ``path`` (parents created) and return it."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(conn, **kwargs), encoding="utf-8")
    return out
