"""One self-contained HTML file for a fault history: what to hand a colleague after an incident.

Everything is inline (CSS, PNG charts as base64 data URIs), so the file opens anywhere, offline,
and can be attached to a ticket. Every value that comes from the history is HTML-escaped: a
diagnosis detail quotes log lines and stack frames, which hold ``<`` and ``&``.

The numbers are the same named queries as `faultlens report` (history.queries) and the charts
are history.plots; this module only lays them out, section by section, with the HTML building
blocks of history.html_parts.
"""

from __future__ import annotations

import base64
import datetime as dt
from pathlib import Path
from typing import Any

import duckdb

from faultlens.diagnosis.replay.scoring import LATENCY_WORDS_EVIDENCE, LATENCY_WORDS_LABELLED
from faultlens.history import plots
from faultlens.history.html_parts import CSS, card, esc, num, table, when
from faultlens.history.queries import kind_counts, run


def _figure(png: bytes | None, alt: str) -> str:
    if png is None:
        return f'<p class="note">No data for the chart “{esc(alt)}”.</p>'
    data = base64.b64encode(png).decode("ascii")
    return f'<figure><img alt="{esc(alt)}" src="data:image/png;base64,{data}"></figure>'


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
            notes.append(f"after {num(r['to_restart_s'])} s" + (f"; replaced {swapped}" if swapped else ""))
        elif r["outcome"] == "stack dumps received":
            notes.append(f"{r['usable_dumps']} usable dumps from {r['dump_nodes']} node(s)")
        if not r["has_diagnosis"]:
            notes.append("no diagnosis in the history caused it (forged, manual, or from another history)")
        r["details"] = "; ".join(notes)
    return rows


def _projection(conn: duckdb.DuckDBPyConnection) -> str:
    """What this history's detection would give a big job (faultlens ettr, docs/ettr.md)."""
    from faultlens.history.whatif.headline import headline, history_rows, loss_source_words

    rows = history_rows(conn)
    if not rows:
        return ""
    try:
        p = headline(rows)
    except ValueError as exc:
        return f'<p class="note">No ETTR projection: {esc(str(exc))}</p>'
    lo, hi = p["ettr_ci"]
    # each loss says where its seconds come from, as the demo prints it: a preset's guess must not
    # read as this history's measurement
    losses = [{"cause": x["cause"], "share": f"{x['share']:.2%}", "source": loss_source_words(x)}
              for x in p["largest_losses"]]
    return "\n".join([
        f'<h3 id="projection">Projected: a {p["gpus"]:,}-GPU, {p["days"]:g}-day job with this detection</h3>',
        f'<p class="note">ByteRobust\'s fault rates and recovery, detection as this history measured it '
        f'({esc(", ".join(p["measured_classes"]))}): ETTR <b>{p["ettr"]:.2%}</b> (Monte Carlo '
        f'{p["ettr_monte_carlo"]:.2%}, 95 % CI {lo:.2%} to {hi:.2%}); with the framework\'s timeout alone '
        f'{p["timeout_only_ettr"]:.2%}. Checkpoint every {p["checkpoint_interval_optimal_s"]:.0f} s (the optimum). '
        "Model and assumptions: docs/ettr.md; more with <code>faultlens ettr</code>.</p>",
        table(losses, ["cause", "share", "source"], empty="", classes={"source": _guess_class}),
    ])


def _guess_class(loss: dict[str, Any]) -> str:
    return "guess" if "guess" in loss["source"] else ""


def _headline_cards(ettr: list[dict[str, Any]], kinds: dict[str, int], latency: dict[str, Any],
                    labels: dict[str, Any] | None, ttc: dict[str, Any], commands: list[dict[str, Any]],
                    over: dict[str, Any]) -> list[str]:
    """The cards at the top: ETTR per job, acting diagnoses, detection latency, commands, healthy evictions."""
    cards = []
    for job in ettr[:4]:
        tone = "good" if (job["ettr"] or 0) >= 0.9 else "bad" if (job["ettr"] or 0) < 0.7 else ""
        cards.append(card(num(job["ettr"], "{:.1%}"), f"ETTR of {job['job']}", tone))
    cards.append(card(str(kinds["acting"]), f"acting diagnoses (+{kinds['evidence_request']} stack requests, "
                                             f"{kinds['record_only']} record-only)"))
    # The headline latency is the one `faultlens score` and the demo print: from the labelled onset where
    # there is ground truth, else from the first evidence; the words under it say which (diagnosis.replay.scoring).
    if labels:
        cards.append(card(f"{num(labels['p50_s'])} s", f"detection latency p50 (p99 {num(labels['p99_s'])} s): "
                                                          f"{LATENCY_WORDS_LABELLED}"))
    else:
        cards.append(card(f"{num(latency['p50_s'])} s", f"detection latency p50 (p99 {num(latency['p99_s'])} s): "
                                                           f"{LATENCY_WORDS_EVIDENCE}"))
    cards.append(card(f"{num(ttc['p50_s'])} s", "diagnosis → command p50"))
    failed = sum(1 for c in commands if _outcome_class(c) == "bad")
    cards.append(card(f"{len(commands)}", f"commands ({failed} with no effect recorded)", "bad" if failed else ""))
    healthy = over["healthy_evicted"] or 0
    cards.append(card(str(healthy), f"healthy nodes evicted (truth from {over['basis']})", "bad" if healthy else "good"))
    return cards


def render(conn: duckdb.DuckDBPyConnection, *, source: str = "", max_gap: float | None = None,
           generated_at: float | None = None, charts: dict[str, bytes | None] | None = None) -> str:
    """The whole report as one HTML string; ``charts``: the PNGs history.plots.render_pngs drew
    already for this history (the demo writes them as files too), else they are drawn here."""
    charts = charts if charts is not None else plots.render_pngs(conn)
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

    return "\n".join([
        *_opening(summary, source, cards),
        *_job_sections(conn, ettr, actions, charts),
        *_latency_section(conn, latency, ttc, labels, charts),
        *_command_sections(commands, over, wrong),
        *_fleet_sections(conn, charts),
        *_closing(conn, generated),
    ])


def _opening(summary: dict[str, Any], source: str, cards: list[str]) -> list[str]:
    """The page head, the history it covers, the navigation and the headline cards."""
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>faultlens incident report{(' — ' + esc(source)) if source else ''}</title>",
        f"<style>{CSS}</style></head><body><main>",
        "<h1>faultlens incident report</h1>",
        f'<p class="meta">History {esc(source or "(in memory)")}: {when(summary["first_ts"])} to '
        f'{when(summary["last_ts"])} ({num(summary["span_s"], "{:,.0f}")} s); {summary["events"]:,} events, '
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
    ]


def _job_sections(conn: duckdb.DuckDBPyConnection, ettr: list[dict[str, Any]], actions: list[dict[str, Any]],
                  charts: dict[str, bytes | None]) -> list[str]:
    """ETTR per job, the incidents, the actions taken and MTTR per fault class."""
    return [
        '<h2 id="ettr">Effective training time (ETTR) per job</h2>',
        '<p class="note">Productive time (train steps seen) / wall time, from the job timeline.</p>',
        table(ettr, ["job", "ettr", "productive_s", "wall_s", "incidents"], empty="No job timeline in this history."),
        _figure(charts["job_timeline"], "Job timelines"),
        _projection(conn),

        '<h2 id="incidents">Incidents</h2>',
        '<p class="note">Each acting diagnosis: when the fault began (first evidence), when it was diagnosed, the '
        "first command, and when the job was productive again.</p>",
        table(run(conn, "incidents"), ["job", "onset", "fault", "nodes", "action", "detection_s", "command",
                                        "to_command_s", "recovery_s"], empty="No incidents."),

        '<h2 id="actions">Actions taken</h2>',
        '<p class="note">Every command remediation issued, the diagnosis behind it, and what its receivers '
        "answered: <b>obeyed</b> (a receiver acked it, or the launcher restarted the job for it), <b>refused</b> "
        "(a receiver it was addressed to refused it, for the reason shown, and none obeyed: it counts as no "
        "eviction) or <b>no answer</b> (no receiver acked it; an agent-side command may be obeyed silently).</p>",
        table(actions, ["issued_at", "job", "action", "nodes", "diagnosis_id", "fault", "confidence", "receivers",
                         "answers", "refusal", "reason"],
               empty="No commands were issued.", classes={"receivers": _receivers_class}),

        '<h2 id="mttr">Time to recover (MTTR) per fault class</h2>',
        table(run(conn, "mttr_by_class"), ["fault", "incidents", "recovered", "mttr_s", "p50_s", "max_s",
                                            "detection_p50_s"], empty="No incidents."),
        _figure(charts["mttr"], "MTTR per fault class"),
    ]


def _latency_section(conn: duckdb.DuckDBPyConnection, latency: dict[str, Any], ttc: dict[str, Any],
                     labels: dict[str, Any] | None, charts: dict[str, bytes | None]) -> list[str]:
    """Detection latency: against the labelled onsets where there are labels, and against the first evidence."""
    parts = [
        '<h2 id="latency">Detection latency</h2>',
        '<p class="note">Detection latency is the decision time of the first diagnosis that finds a fault minus '
        "the fault's onset: the labelled onset where there is ground truth (as <code>faultlens score</code> and "
        "the demo count it), otherwise the time of the diagnosis's first evidence, which is all a live system "
        "knows. A fault whose log line is its first evidence is therefore diagnosed in 0 s by the second measure "
        "and in the time the line took to appear by the first.</p>",
    ]
    if labels:
        parts.append(f'<p class="note"><b>{LATENCY_WORDS_LABELLED}</b>: {labels["detected"]} of {labels["labels"]} '
                     f'labelled faults detected, {labels["missed"]} missed; p50 {num(labels["p50_s"])} s, '
                     f'p99 {num(labels["p99_s"])} s.</p>')
    return parts + [
        f'<p class="note"><b>{LATENCY_WORDS_EVIDENCE if not labels else "first evidence → diagnosis"}</b>, '
        f'over {latency["n"]} acting diagnoses: p50 {num(latency["p50_s"])} s, p99 {num(latency["p99_s"])} s, '
        f'max {num(latency["max_s"])} s (the table and the chart below). Diagnosis → first command: p50 '
        f'{num(ttc["p50_s"])} s, p99 {num(ttc["p99_s"])} s; {ttc["diagnoses_without_command"]} acting '
        "diagnosis(es) got no command.</p>",
        table(run(conn, "detection_by_class"), ["fault", "n", "p50_s", "p99_s", "max_s"], empty="No acting diagnoses."),
        _figure(charts["detection_latency"], "Detection latency histogram"),
    ]


def _command_sections(commands: list[dict[str, Any]], over: dict[str, Any], wrong: list[dict[str, Any]]) -> list[str]:
    """The commands and their outcome, and the nodes wrongly blamed."""
    return [
        '<h2 id="commands">Commands and their outcome</h2>',
        '<p class="note">Outcome from the history: a job restart that names the command, or the stack dumps that '
        "answered a stack request.</p>",
        table(commands, ["issued_at", "job", "action", "nodes", "fault", "outcome", "details", "reason"],
               empty="No commands were issued.", classes={"outcome": _outcome_class}),

        '<h2 id="blamed">Wrongly blamed</h2>',
        f'<p class="note">Over-eviction: {over["evicted_nodes"]} node(s) evicted, {over["faulty_nodes"]} really '
        f'faulty (from {esc(over["basis"])}), ratio {num(over["ratio"], "{:.2f}")}. A hang or fail-slow verdict '
        "evicts its whole parallel group on purpose, so some healthy evictions there are by design.</p>",
        table(wrong, ["issued_at", "job", "node", "fault", "group", "reason"],
               empty=f"No healthy node was evicted (truth from {over['basis']})."),
    ]


def _fleet_sections(conn: duckdb.DuckDBPyConnection, charts: dict[str, bytes | None]) -> list[str]:
    """Faults by class, the nodes, and the machines across jobs (lemons first)."""
    return [
        '<h2 id="faults">Faults</h2>',
        table(run(conn, "faults_by_class"), ["fault", "acting", "evidence_requests", "record_only", "occurrences",
                                              "nodes"], empty="No diagnoses."),
        _figure(charts["faults_over_time"], "Acting diagnoses by class over time"),
        _figure(charts["node_class_heatmap"], "Acting diagnoses per node and class"),

        '<h2 id="nodes">Nodes</h2>',
        "<h3>Top offending nodes</h3>",
        table(run(conn, "top_nodes"), ["node", "failures", "faults", "diagnoses"], empty="No node was diagnosed."),
        "<h3>Candidates for hardware inspection</h3>",
        table(run(conn, "inspection_candidates"), ["node", "hardware_failures", "faults", "engine_asked"],
               empty="None: no node had repeated hardware failures."),
        _figure(charts["mtbf"], "MTBF per node"),

        '<h2 id="machines">Machines across jobs</h2>',
        '<p class="note">Failures are acting diagnoses naming the machine; MTBF is the history window / its '
        "failures. State and what <b>counted</b> against it come from remediation's fleet record (docs/fleet.md): "
        "sympathetic errors (Xid 45, Xid 43 after 13, NCCL ranks that only waited), user-code faults and group "
        "blames never count. A <b>hardware_inspection</b> machine is a lemon: drained, never a spare, back only "
        "by <code>faultlens nodes resume</code>.</p>",
        "<h3>Lemons</h3>",
        table(run(conn, "lemons"), ["node", "lemon_at", "lemon_rule", "lemon_reason", "lemon_diagnoses", "resumes"],
               empty="No lemon: no machine kept failing across jobs.", classes={"lemon_rule": lambda r: "bad"}),
        "<h3>Every machine</h3>",
        table(run(conn, "machines"), ["node", "state", "incidents", "jobs", "mtbf_s", "last_failure_ts", "counted",
                                       "failed_checks", "evictions", "resumes", "lemon_rule"],
               empty="No machine was diagnosed or recorded.", classes={"state": _state_class}),
    ]


def _closing(conn: duckdb.DuckDBPyConnection, generated: float) -> list[str]:
    """Every acting diagnosis in full, and the footer."""
    return [
        '<h2 id="diagnoses">Acting diagnoses in full</h2>',
        table(run(conn, "acting_diagnoses"), ["ts", "job", "fault", "action", "nodes", "group", "confidence", "detail"],
               empty="No acting diagnoses."),
        f"<footer>Written by <code>faultlens report --html</code> at {when(generated)}. Definitions of every "
        "measure: docs/history.md.</footer>",
        "</main></body></html>",
    ]

def write(conn: duckdb.DuckDBPyConnection, path: str | Path, **kwargs: Any) -> Path:
    """Write the report to ``path`` (parents created) and return it."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(conn, **kwargs), encoding="utf-8")
    return out
