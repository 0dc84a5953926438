"""The report's SQL, one named query per question (docs/history.md defines each measure).

`faultlens report`, the HTML report, the plots and the notebooks all go through these queries, so a
measure is defined once: :func:`frame` gives a pandas DataFrame (DuckDB's ``.df()``, for plots and
notebooks), :func:`run` the same rows as plain Python values (for JSON lines and tables, where a
NULL must stay ``None`` and a list a list). Each query takes named parameters (``$name``) with the
defaults in ``DEFAULTS``; the pieces several queries share are history.query_parts'.

A diagnosis is one of three kinds (``query_parts.KINDS``), by its action: *acting* (it asks for something to be
done to the job: evict, restart, reattempt, rollback, stop-time diagnosis, hardware inspection),
an *evidence request* (``capture_stacks``: a hang or fail-slow suspicion that asks every rank for
its stack and blames nobody; it names every node of the job) or *record-only* (``none``). Failures,
incidents, latencies and every plot count acting diagnoses only; counting requests would show every
node of a job failing once per stack round.
"""

from __future__ import annotations

from typing import Any

import duckdb
import pandas as pd

from faultlens.diagnosis.replay.scoring import EARLY_S, WINDOW_S
from faultlens.history.query_parts import ACCEPTED, ACTING, BASIS, INCIDENTS, KIND_CASE, KIND_COUNTS, SPAN, TRUTH
from faultlens.history.schema import has_table

DEFAULTS: dict[str, Any] = {
    "limit": 10,          # rows of the "top" sections
    "max_gap": 60.0,      # a running mark counts as productive for at most this many seconds
    "buckets": 40,        # time buckets of faults_over_time
    "confirmed": 0.9,     # confidence from which a diagnosis counts as a really faulty node
    "repeat": 2,          # inspection_candidates: hardware failures on one node that warrant a look
    # label_detection matches as `faultlens score` does (diagnosis.replay.scoring): decided from early_window
    # before to match_window after the labelled onset
    "match_window": WINDOW_S,
    "early_window": EARLY_S,
}

QUERIES: dict[str, str] = {
    "summary": f"""
        WITH {SPAN}
        SELECT (SELECT count(*) FROM events) AS events,
               (SELECT count(*) FROM diagnoses) AS diagnoses,
               (SELECT count(*) FROM diagnoses WHERE {ACTING}) AS acting_diagnoses,
               (SELECT count(*) FROM commands) AS commands,
               (SELECT count(*) FROM labels) AS labels,
               (SELECT count(DISTINCT job) FROM job_timeline) AS jobs,
               first_ts, last_ts, last_ts - first_ts AS span_s
        FROM span""",
    # `nodes`: distinct nodes that acting diagnoses of the class blame (a request names them all).
    "faults_by_class": f"""
        SELECT fault, count(*) AS diagnoses, {KIND_COUNTS}, sum(count) AS occurrences,
               count(DISTINCT job) AS jobs,
               (SELECT count(DISTINCT n) FROM diagnoses d2, unnest(d2.nodes) AS u(n)
                WHERE d2.fault = d.fault AND d2.{ACTING}) AS nodes
        FROM diagnoses d GROUP BY fault ORDER BY acting DESC, diagnoses DESC, fault""",
    "faults_by_node": f"""
        SELECT n AS node, fault, count(*) AS diagnoses, {KIND_COUNTS}
        FROM diagnoses, unnest(nodes) AS u(n)
        GROUP BY node, fault ORDER BY node, fault""",
    "faults_by_day": f"""
        SELECT DATE '1970-01-01' + CAST(floor(onset / 86400) AS INTEGER) AS day, fault, count(*) AS diagnoses,
               {KIND_COUNTS}
        FROM diagnoses GROUP BY day, fault ORDER BY day, fault""",
    "faults_over_time": f"""
        WITH b AS (SELECT min(onset) AS lo, greatest(max(onset) - min(onset), 1.0) / $buckets AS width FROM diagnoses)
        SELECT b.lo + least(floor((onset - b.lo) / b.width), $buckets - 1) * b.width AS bucket_start,
               fault, count(*) AS diagnoses, {KIND_COUNTS}, any_value(b.width) AS width
        FROM diagnoses, b GROUP BY bucket_start, fault ORDER BY bucket_start, fault""",
    "diagnosis_kinds": f"""
        SELECT k.kind, count(d.id) AS diagnoses
        FROM (VALUES ('acting', 1), ('evidence_request', 2), ('record_only', 3)) AS k(kind, pos)
        LEFT JOIN (SELECT id, {KIND_CASE} AS kind FROM diagnoses) d ON d.kind = k.kind
        GROUP BY k.kind, k.pos ORDER BY k.pos""",
    # Offenders are nodes that failed (acting diagnoses); `diagnoses` also counts requests and records.
    "top_nodes": f"""
        SELECT n AS node, count(*) FILTER (WHERE {ACTING}) AS failures, count(*) AS diagnoses,
               list(DISTINCT fault ORDER BY fault) FILTER (WHERE {ACTING}) AS faults, max(ts) AS last_ts
        FROM diagnoses, unnest(nodes) AS u(n)
        GROUP BY node ORDER BY failures DESC, diagnoses DESC, node LIMIT $limit""",
    "detection_latency": f"""
        SELECT count(*) AS n, quantile_cont(ts - onset, 0.5) AS p50_s, quantile_cont(ts - onset, 0.99) AS p99_s,
               avg(ts - onset) AS mean_s, max(ts - onset) AS max_s
        FROM diagnoses WHERE {ACTING}""",
    "detection_by_class": f"""
        SELECT fault, count(*) AS n, quantile_cont(ts - onset, 0.5) AS p50_s,
               quantile_cont(ts - onset, 0.99) AS p99_s, max(ts - onset) AS max_s
        FROM diagnoses WHERE {ACTING} GROUP BY fault ORDER BY p50_s DESC, fault""",
    "detection_latencies": f"""
        SELECT fault, ts - onset AS latency_s FROM diagnoses WHERE {ACTING} ORDER BY latency_s""",
    # With ground truth, detection latency as `faultlens score` and the demo define it (diagnosis.replay.scoring):
    # each label's first matching diagnosis (same job and fault class, scored: not record-only, a stack
    # request, an alert or `unknown`; decided between early_window before and match_window after the
    # labelled onset; a shared node, or either names none), its decision time minus the labelled onset.
    "label_detection": """
        WITH m AS (
            -- greatest() skips NULLs: an undetected label must stay NULL
            SELECT l.id, CASE WHEN min(d.ts) IS NOT NULL THEN greatest(min(d.ts) - l.onset, 0) END AS latency_s
            FROM labels l LEFT JOIN diagnoses d
              ON d.job = l.job AND d.fault = l.fault AND d.fault <> 'unknown'
             AND d.action NOT IN ('none', 'capture_stacks', 'alert')
             AND d.ts BETWEEN l.onset - $early_window AND l.onset + $match_window
             AND (len(coalesce(l.nodes, [])) = 0 OR len(coalesce(d.nodes, [])) = 0 OR list_has_any(d.nodes, l.nodes))
            WHERE l.onset IS NOT NULL GROUP BY l.id, l.onset
        )
        SELECT count(*) AS labels, count(latency_s) AS detected, count(*) - count(latency_s) AS missed,
               quantile_cont(latency_s, 0.5) AS p50_s, quantile_cont(latency_s, 0.99) AS p99_s
        FROM m""",
    "time_to_command": f"""
        WITH {ACCEPTED},
        first_cmd AS (SELECT diagnosis_id, min(issued_at) AS issued_at FROM accepted
                      WHERE diagnosis_id <> '' GROUP BY diagnosis_id)
        SELECT count(*) AS n, quantile_cont(c.issued_at - d.ts, 0.5) AS p50_s,
               quantile_cont(c.issued_at - d.ts, 0.99) AS p99_s, avg(c.issued_at - d.ts) AS mean_s,
               (SELECT count(*) FROM diagnoses WHERE {ACTING}) - count(*) AS diagnoses_without_command
        FROM diagnoses d JOIN first_cmd c ON c.diagnosis_id = d.id WHERE d.{ACTING}""",
    "mtbf": f"""
        WITH {SPAN},
        f AS (SELECT n AS node, count(*) AS failures FROM diagnoses, unnest(nodes) AS u(n)
              WHERE {ACTING} GROUP BY node)
        SELECT node, failures, span.last_ts - span.first_ts AS window_s,
               (span.last_ts - span.first_ts) / failures AS mtbf_s
        FROM f, span ORDER BY mtbf_s, node""",
    "over_eviction": f"""
        WITH {ACCEPTED},
        evicted AS (SELECT DISTINCT n FROM accepted, unnest(nodes) AS u(n) WHERE action = 'evict'),
        {TRUTH}
        SELECT {BASIS} AS basis,
               (SELECT count(*) FROM evicted) AS evicted_nodes,
               (SELECT count(*) FROM truth) AS faulty_nodes,
               (SELECT count(*) FROM evicted WHERE n NOT IN (SELECT n FROM truth)) AS healthy_evicted,
               (SELECT count(*) FROM evicted)::DOUBLE / nullif((SELECT count(*) FROM truth), 0) AS ratio""",
    # Each eviction of a node that was not really faulty, with the command and diagnosis behind it.
    "wrongly_blamed": f"""
        WITH {ACCEPTED}, {TRUTH}
        SELECT c.job, n AS node, c.issued_at, d.fault, d."group", c.reason, c.id AS command_id,
               {BASIS} AS basis
        FROM accepted c CROSS JOIN unnest(c.nodes) AS u(n) LEFT JOIN diagnoses d ON d.id = c.diagnosis_id
        WHERE c.action = 'evict' AND n NOT IN (SELECT n FROM truth)
        ORDER BY c.issued_at, node""",
    # What-if ETTR from a history (history.whatif.sources): acting diagnoses per class per node-day
    # the history watched, and how fast each class was called. A node counts from its first event to
    # its last: a machine evicted halfway, or a standby that joined late, watched part of the span, and
    # the job's own records (node '-') are no machine. (Nodes x the whole span counted every machine
    # that ever appeared for the whole history: 18 "nodes" for an 8-node job that swapped machines.)
    "fault_rates": f"""
        WITH {SPAN}, watched AS (
            SELECT count(*) AS nodes, sum(hi - lo) / 86400.0 AS node_days FROM (
                SELECT node, min(ts) AS lo, max(ts) AS hi FROM events
                WHERE coalesce(node, '') NOT IN ('', '-') AND source <> 'job' GROUP BY node))
        SELECT d.fault, count(*) AS faults, watched.nodes, (span.last_ts - span.first_ts) / 86400.0 AS days,
               watched.node_days, count(*) / nullif(watched.node_days, 0) AS rate_per_node_day,
               quantile_cont(d.ts - d.onset, 0.5) AS detection_p50_s
        FROM diagnoses d, span, watched WHERE d.{ACTING}
        GROUP BY d.fault, watched.nodes, watched.node_days, span.first_ts, span.last_ts ORDER BY d.fault""",
    "ettr": f"""
        WITH {ACCEPTED}, m AS (
            SELECT job, ts, state,
                   coalesce(lead(ts) OVER (PARTITION BY job ORDER BY ts, state <> 'running', id), ts) AS next_ts
            FROM marks
        ), w AS (
            SELECT job, max(ts) - min(ts) - coalesce(sum(next_ts - ts) FILTER (WHERE state = 'ended'), 0) AS wall_s,
                   coalesce(sum(least(next_ts - ts, $max_gap)) FILTER (WHERE state = 'running'), 0) AS productive_s,
                   count(*) FILTER (WHERE state IN ('down', 'stalled')) AS incidents
            FROM m GROUP BY job
        )
        SELECT job, wall_s, productive_s, productive_s / nullif(wall_s, 0) AS ettr, incidents
        FROM w ORDER BY job""",
    "timeline": f"""
        WITH {ACCEPTED}
        SELECT job, ts, coalesce(lead(ts) OVER (PARTITION BY job ORDER BY ts, state <> 'running', id), ts) AS next_ts,
               state, reason
        FROM marks ORDER BY job, ts, state <> 'running', id""",
    # Consecutive marks of one state merged into one span (plots: a month of per-second step marks
    # is hundreds of thousands of marks, but only a few hundred state changes).
    "timeline_spans": f"""
        WITH {ACCEPTED}, m AS (
            SELECT job, id, ts, state, coalesce(lead(ts) OVER w, ts) AS next_ts,
                   CASE WHEN lag(state) OVER w IS DISTINCT FROM state THEN 1 ELSE 0 END AS starts
            FROM marks WINDOW w AS (PARTITION BY job ORDER BY ts, state <> 'running', id)
        ), g AS (
            SELECT *, sum(starts) OVER (PARTITION BY job ORDER BY ts, state <> 'running', id
                                        ROWS UNBOUNDED PRECEDING) AS span
            FROM m
        )
        SELECT job, state, min(ts) AS ts, max(next_ts) AS next_ts, count(*) AS marks
        FROM g GROUP BY job, span, state ORDER BY job, ts""",
    "incidents": f"""
        WITH {INCIDENTS}
        SELECT * FROM incidents ORDER BY job, onset, diagnosis_id""",
    # MTTR: fault onset → the job productive again, per class (incidents that never recovered
    # within the history are counted apart, not as zero).
    "mttr_by_class": f"""
        WITH {INCIDENTS}
        SELECT fault, count(*) AS incidents, count(recovery_s) AS recovered, avg(recovery_s) AS mttr_s,
               quantile_cont(recovery_s, 0.5) AS p50_s, max(recovery_s) AS max_s,
               quantile_cont(detection_s, 0.5) AS detection_p50_s
        FROM incidents GROUP BY fault ORDER BY mttr_s DESC NULLS LAST, fault""",
    # Every command and what came of it: a job restart that names it (`job/restart` events carry
    # the command id), or the stack dumps that answered it (`stack_dump.request_id`).
    "command_outcomes": f"""
        WITH {ACCEPTED},
        r AS (SELECT data->>'command_id' AS command_id, min(ts) AS restarted_at,
                          arg_min(CAST(data->'nodes_out' AS VARCHAR[]), ts) AS nodes_out,
                          arg_min(CAST(data->'nodes_in' AS VARCHAR[]), ts) AS nodes_in
                   FROM events WHERE source = 'job' AND kind = 'restart' AND data->>'command_id' IS NOT NULL
                   GROUP BY 1),
        s AS (SELECT data->>'request_id' AS command_id, count(*) AS dumps,
                     count(*) FILTER (WHERE (data->>'ok') IS DISTINCT FROM 'false') AS usable_dumps,
                     count(DISTINCT node) AS dump_nodes
              FROM events WHERE source = 'stack' AND kind = 'stack_dump' AND data->>'request_id' IS NOT NULL
              GROUP BY 1)
        SELECT c.job, c.issued_at, c.action, c.nodes, d.fault, c.reason,
               CASE WHEN c.id IN (SELECT id FROM refused) THEN 'refused'
                    WHEN r.command_id IS NOT NULL THEN 'job restarted'
                    WHEN s.command_id IS NOT NULL THEN 'stack dumps received'
                    WHEN c.action IN ('evict', 'restart', 'reattempt', 'rollback') THEN 'no restart recorded'
                    ELSE 'no effect recorded' END AS outcome,
               r.restarted_at - c.issued_at AS to_restart_s, r.nodes_out, r.nodes_in,
               s.usable_dumps, s.dump_nodes, d.id IS NOT NULL AS has_diagnosis, c.id AS command_id,
               coalesce(k.obeyed_acks, 0) AS obeyed_acks, coalesce(k.refused_acks, 0) AS refused_acks, k.refusal
        FROM commands c LEFT JOIN diagnoses d ON d.id = c.diagnosis_id
        LEFT JOIN r ON r.command_id = c.id LEFT JOIN s ON s.command_id = c.id LEFT JOIN answers k ON k.command_id = c.id
        ORDER BY c.issued_at, c.id""",
    # Every command issued, with the diagnosis behind it and what its receivers said: `obeyed` (an
    # ack obeyed it, or it was carried out: see query_parts.ACCEPTED), `refused` (see ACCEPTED) or `no answer`.
    "actions_taken": f"""
        WITH {ACCEPTED}
        SELECT c.issued_at, c.job, c.action, c.nodes, c.diagnosis_id, d.fault, d.confidence, d.detail AS diagnosis,
               CASE WHEN c.id IN (SELECT id FROM refused) THEN 'refused'
                    WHEN coalesce(k.obeyed_acks, 0) > 0 OR c.id IN (SELECT command_id FROM carried_out) THEN 'obeyed'
                    ELSE 'no answer' END AS receivers,
               coalesce(k.obeyed_acks, 0) AS obeyed_acks, coalesce(k.refused_acks, 0) AS refused_acks, k.refusal,
               c.reason, c.id AS command_id
        FROM commands c LEFT JOIN diagnoses d ON d.id = c.diagnosis_id LEFT JOIN answers k ON k.command_id = c.id
        ORDER BY c.issued_at, c.id""",
    # Nodes to send to hardware inspection: repeated hardware failures, or the engine already asked.
    "inspection_candidates": f"""
        SELECT n AS node, count(*) AS hardware_failures, list(DISTINCT fault ORDER BY fault) AS faults,
               bool_or(action = 'inspect_hardware') AS engine_asked, max(ts) AS last_ts
        FROM diagnoses, unnest(nodes) AS u(n)
        WHERE fault IN ('gpu_lost', 'gpu_memory', 'nvlink', 'gpu_thermal', 'gpu_reset_required', 'nic', 'kernel')
          AND {ACTING}
        GROUP BY node
        HAVING count(*) >= $repeat OR bool_or(action = 'inspect_hardware')
        ORDER BY hardware_failures DESC, node""",
    "acting_diagnoses": f"""
        SELECT ts, job, fault, action, nodes, "group", confidence, detail, id
        FROM diagnoses WHERE {ACTING} ORDER BY ts, id""",
    "event_faults": """
        SELECT source, kind, fault, count(*) AS events, count(DISTINCT node) AS nodes
        FROM events WHERE fault IS NOT NULL GROUP BY source, kind, fault ORDER BY events DESC, source, kind""",
    # What the actuator did on the scheduler: operations by outcome (`skipped`: observe-only or dry run).
    "action_outcomes": """
        SELECT op, outcome, actuator, count(*) AS actions, count(DISTINCT job) AS jobs,
               len(list_distinct(flatten(list(coalesce(nodes, []))))) AS nodes, max(ts) AS last_ts
        FROM actions GROUP BY op, outcome, actuator ORDER BY op, outcome, actuator""",
    # Each machine an actuator took out (drained / cordoned, outcome ok): the latest time, why, and
    # whether a later bring_back (ok) returned it; those still out first.
    "nodes_taken_out": """
        WITH a AS (SELECT ts, job, op, actuator, diagnosis_id, fault, reason, n AS node
                   FROM actions, unnest(nodes) AS u(n) WHERE outcome = 'ok'),
        t AS (SELECT node, max(ts) AS taken_out_at, count(*) AS times, arg_max(job, ts) AS job,
                     arg_max(actuator, ts) AS actuator, arg_max(fault, ts) AS fault,
                     arg_max(diagnosis_id, ts) AS diagnosis_id, arg_max(reason, ts) AS reason
              FROM a WHERE op = 'take_out' GROUP BY node),
        b AS (SELECT node, max(ts) AS brought_back_at FROM a WHERE op = 'bring_back' GROUP BY node)
        SELECT t.node, t.actuator, t.job, t.fault, t.taken_out_at, t.times,
               CASE WHEN b.brought_back_at >= t.taken_out_at THEN b.brought_back_at END AS brought_back_at,
               b.brought_back_at IS NULL OR b.brought_back_at < t.taken_out_at AS still_out,
               t.diagnosis_id, t.reason
        FROM t LEFT JOIN b USING (node)
        ORDER BY still_out DESC, t.taken_out_at, t.node""",
    # Per machine (docs/fleet.md): failures (acting diagnoses naming it) and MTBF from the
    # diagnoses, its state and what counted against it from its fleet record (remediation's `fleet`
    # topic); lemons (hardware_inspection) first.
    "machines": f"""
        WITH {SPAN},
        f AS (SELECT n AS node, count(*) AS incidents, count(DISTINCT job) AS jobs, max(ts) AS last_failure_ts
              FROM diagnoses, unnest(nodes) AS u(n) WHERE {ACTING} GROUP BY node)
        SELECT node, coalesce(m.state, 'in_service') AS state, coalesce(f.incidents, 0) AS incidents,
               coalesce(f.jobs, 0) AS jobs, (span.last_ts - span.first_ts) / nullif(f.incidents, 0) AS mtbf_s,
               f.last_failure_ts, m.counted, m.failed_checks, m.evictions, m.resumes, m.lemon_rule
        FROM f FULL OUTER JOIN machines m USING (node), span
        ORDER BY (coalesce(m.state, '') = 'hardware_inspection') DESC, incidents DESC, node""",
    # Machines out for good, waiting for hardware inspection (or a person's `faultlens nodes resume`).
    "lemons": """
        SELECT node, lemon_at, lemon_rule, lemon_reason, lemon_diagnoses, counted, failed_checks, evictions, resumes
        FROM machines WHERE state = 'hardware_inspection' ORDER BY lemon_at, node""",
    # Copies of commands the history did not keep as the command (history.command_copies): refused
    # by its signature check (forged, altered, unsigned, unknown key), displaced by the genuine copy,
    # or, without a verify key, a second copy of an id it cannot tell from the first.
    "refused_copies": """
        SELECT issued_at, job, action, nodes, problem, id AS command_id, key_id, copy_id
        FROM refused_commands ORDER BY issued_at, id, copy_id""",
}

# Queries over tables a history file may predate (history.schema: `actions` came after version 1
# and a file opened read-only does not gain it): no rows there, not an error.
NEEDS_TABLE = {"action_outcomes": "actions", "nodes_taken_out": "actions", "refused_copies": "refused_commands",
               "machines": "machines", "lemons": "machines"}

# The sections `faultlens report` prints, in order (the helper queries feed plots and notebooks).
REPORT_SECTIONS = (
    "summary", "faults_by_class", "faults_by_node", "faults_by_day", "top_nodes", "detection_latency",
    "detection_by_class", "label_detection", "time_to_command", "mtbf", "over_eviction", "wrongly_blamed", "ettr",
    "incidents", "mttr_by_class", "command_outcomes", "event_faults", "action_outcomes", "nodes_taken_out",
    "machines", "lemons", "refused_copies", "unrecognised_lines",
)
# Sections computed in Python rather than SQL (history.report.build dispatches them).
PYTHON_SECTIONS = frozenset({"unrecognised_lines"})


def _params(sql: str, given: dict[str, Any]) -> dict[str, Any]:
    values = {**DEFAULTS, **{k: v for k, v in given.items() if v is not None}}
    return {k: v for k, v in values.items() if f"${k}" in sql}


def _execute(conn: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any]) -> duckdb.DuckDBPyConnection:
    try:
        sql = QUERIES[name]
    except KeyError:
        raise KeyError(f"unknown query {name!r} (one of {', '.join(QUERIES)})") from None
    return conn.execute(sql, _params(sql, params))


def _missing_table(conn: duckdb.DuckDBPyConnection, name: str) -> bool:
    table = NEEDS_TABLE.get(name)
    return table is not None and not has_table(conn, table)


def frame(conn: duckdb.DuckDBPyConnection, name: str, **params: Any) -> pd.DataFrame:
    """Query ``name`` as a pandas DataFrame (NULL → NaN/None, lists → arrays, as DuckDB converts them)."""
    if _missing_table(conn, name):
        return pd.DataFrame()
    return _execute(conn, name, params).df()


def run(conn: duckdb.DuckDBPyConnection, name: str, **params: Any) -> list[dict[str, Any]]:
    """Rows of query ``name`` as dicts of plain Python values (None for NULL, lists as lists)."""
    if _missing_table(conn, name):
        return []
    cur = _execute(conn, name, params)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def kind_counts(conn: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Diagnoses of each kind (``query_parts.KINDS``): what a plot counts and what it leaves out."""
    return {r["kind"]: r["diagnoses"] for r in run(conn, "diagnosis_kinds")}


def is_empty(conn: duckdb.DuckDBPyConnection) -> bool:
    """Whether the history holds nothing to report on."""
    s = run(conn, "summary")[0]
    return not any(s[k] for k in ("events", "diagnoses", "commands", "labels")) and not s["jobs"]
