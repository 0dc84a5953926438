"""The report's SQL, one named query per question (docs/history.md defines each measure).

`faultlens report`, the plots and the notebooks all go through :func:`run`, so a measure is
defined once. Each query takes named parameters (``$name``) with the defaults in ``DEFAULTS``.
"""

from __future__ import annotations

from typing import Any

import duckdb

DEFAULTS: dict[str, Any] = {
    "limit": 10,          # rows of the "top" sections
    "max_gap": 60.0,      # a running mark counts as productive for at most this many seconds
    "buckets": 40,        # time buckets of faults_over_time
    "confirmed": 0.9,     # confidence from which a diagnosis counts as a really faulty node
    "repeat": 2,          # inspection_candidates: hardware failures on one node that warrant a look
    "match_window": 600.0,  # label_detection: a diagnosis's evidence may start this long after the true onset
}

# Marks at the same second sort running first: a step's mark is floored to its second, so a fault
# at 40.0 must follow the step mark of 40.x, not precede it.
# A failure, for MTBF and incidents, is a diagnosis that interrupts the job (action other than `none`).
_SPAN = """
    span AS (
        SELECT min(lo) AS first_ts, max(hi) AS last_ts FROM (
            SELECT min(ts) AS lo, max(ts) AS hi FROM events
            UNION ALL SELECT min(onset), max(ts) FROM diagnoses
            UNION ALL SELECT min(issued_at), max(issued_at) FROM commands
            UNION ALL SELECT min(ts), max(ts) FROM job_timeline
        )
    )"""

QUERIES: dict[str, str] = {
    "summary": f"""
        WITH {_SPAN}
        SELECT (SELECT count(*) FROM events) AS events,
               (SELECT count(*) FROM diagnoses) AS diagnoses,
               (SELECT count(*) FROM commands) AS commands,
               (SELECT count(*) FROM labels) AS labels,
               (SELECT count(DISTINCT job) FROM job_timeline) AS jobs,
               first_ts, last_ts, last_ts - first_ts AS span_s
        FROM span""",
    "faults_by_class": """
        SELECT fault, count(*) AS diagnoses, sum(count) AS occurrences,
               count(DISTINCT job) AS jobs,
               (SELECT count(DISTINCT n) FROM diagnoses d2, unnest(d2.nodes) AS u(n) WHERE d2.fault = d.fault) AS nodes
        FROM diagnoses d GROUP BY fault ORDER BY diagnoses DESC, fault""",
    "faults_by_node": """
        SELECT n AS node, fault, count(*) AS diagnoses
        FROM diagnoses, unnest(nodes) AS u(n)
        GROUP BY node, fault ORDER BY node, fault""",
    "faults_by_day": """
        SELECT DATE '1970-01-01' + CAST(floor(onset / 86400) AS INTEGER) AS day, fault, count(*) AS diagnoses
        FROM diagnoses GROUP BY day, fault ORDER BY day, fault""",
    "faults_over_time": """
        WITH b AS (SELECT min(onset) AS lo, greatest(max(onset) - min(onset), 1.0) / $buckets AS width FROM diagnoses)
        SELECT b.lo + least(floor((onset - b.lo) / b.width), $buckets - 1) * b.width AS bucket_start,
               fault, count(*) AS diagnoses, any_value(b.width) AS width
        FROM diagnoses, b GROUP BY bucket_start, fault ORDER BY bucket_start, fault""",
    "top_nodes": """
        SELECT n AS node, count(*) AS diagnoses, count(DISTINCT fault) AS classes,
               list(DISTINCT fault ORDER BY fault) AS faults,
               count(*) FILTER (WHERE action <> 'none') AS failures, max(ts) AS last_ts
        FROM diagnoses, unnest(nodes) AS u(n)
        GROUP BY node ORDER BY diagnoses DESC, node LIMIT $limit""",
    "detection_latency": """
        SELECT count(*) AS n, quantile_cont(ts - onset, 0.5) AS p50_s, quantile_cont(ts - onset, 0.99) AS p99_s,
               avg(ts - onset) AS mean_s, max(ts - onset) AS max_s
        FROM diagnoses""",
    "detection_latencies": """
        SELECT fault, ts - onset AS latency_s FROM diagnoses ORDER BY latency_s""",
    # With ground truth: each label's first matching diagnosis (same job, a shared node, decided at
    # or after the true onset, first evidence within match_window of it).
    "label_detection": """
        WITH m AS (
            SELECT l.id, min(d.ts) - l.onset AS latency_s
            FROM labels l LEFT JOIN diagnoses d
              ON d.job = l.job AND list_has_any(d.nodes, l.nodes) AND d.ts >= l.onset
             AND d.onset <= l.onset + $match_window
            WHERE l.onset IS NOT NULL GROUP BY l.id, l.onset
        )
        SELECT count(*) AS labels, count(latency_s) AS detected, count(*) - count(latency_s) AS missed,
               quantile_cont(latency_s, 0.5) AS p50_s, quantile_cont(latency_s, 0.99) AS p99_s
        FROM m""",
    "time_to_command": """
        WITH first_cmd AS (SELECT diagnosis_id, min(issued_at) AS issued_at FROM commands
                           WHERE diagnosis_id <> '' GROUP BY diagnosis_id)
        SELECT count(*) AS n, quantile_cont(c.issued_at - d.ts, 0.5) AS p50_s,
               quantile_cont(c.issued_at - d.ts, 0.99) AS p99_s, avg(c.issued_at - d.ts) AS mean_s,
               (SELECT count(*) FROM diagnoses WHERE action <> 'none') - count(*) AS diagnoses_without_command
        FROM diagnoses d JOIN first_cmd c ON c.diagnosis_id = d.id""",
    "mtbf": f"""
        WITH {_SPAN},
        f AS (SELECT n AS node, count(*) AS failures FROM diagnoses, unnest(nodes) AS u(n)
              WHERE action <> 'none' GROUP BY node)
        SELECT node, failures, span.last_ts - span.first_ts AS window_s,
               (span.last_ts - span.first_ts) / failures AS mtbf_s
        FROM f, span ORDER BY mtbf_s, node""",
    "over_eviction": """
        WITH evicted AS (SELECT DISTINCT n FROM commands, unnest(nodes) AS u(n) WHERE action = 'evict'),
        truth AS (
            SELECT DISTINCT n FROM labels, unnest(nodes) AS u(n)
            UNION
            SELECT DISTINCT n FROM diagnoses, unnest(nodes) AS u(n)
            WHERE NOT EXISTS (SELECT 1 FROM labels) AND confidence >= $confirmed AND action <> 'none'
        )
        SELECT CASE WHEN EXISTS (SELECT 1 FROM labels) THEN 'labels' ELSE 'confirmed diagnoses' END AS basis,
               (SELECT count(*) FROM evicted) AS evicted_nodes,
               (SELECT count(*) FROM truth) AS faulty_nodes,
               (SELECT count(*) FROM evicted WHERE n NOT IN (SELECT n FROM truth)) AS healthy_evicted,
               (SELECT count(*) FROM evicted)::DOUBLE / nullif((SELECT count(*) FROM truth), 0) AS ratio""",
    "ettr": """
        WITH m AS (
            SELECT job, ts, state,
                   coalesce(lead(ts) OVER (PARTITION BY job ORDER BY ts, state <> 'running', id), ts) AS next_ts
            FROM job_timeline
        )
        SELECT job, max(ts) - min(ts) AS wall_s,
               coalesce(sum(least(next_ts - ts, $max_gap)) FILTER (WHERE state = 'running'), 0) AS productive_s,
               coalesce(sum(least(next_ts - ts, $max_gap)) FILTER (WHERE state = 'running'), 0)
                   / nullif(max(ts) - min(ts), 0) AS ettr,
               count(*) FILTER (WHERE state IN ('down', 'stalled')) AS incidents
        FROM m GROUP BY job ORDER BY job""",
    "timeline": """
        SELECT job, ts, coalesce(lead(ts) OVER (PARTITION BY job ORDER BY ts, state <> 'running', id), ts) AS next_ts,
               state, reason
        FROM job_timeline ORDER BY job, ts, state <> 'running', id""",
    # Consecutive marks of one state merged into one span (plots: a month of per-second step marks
    # is hundreds of thousands of marks, but only a few hundred state changes).
    "timeline_spans": """
        WITH m AS (
            SELECT job, id, ts, state, coalesce(lead(ts) OVER w, ts) AS next_ts,
                   CASE WHEN lag(state) OVER w IS DISTINCT FROM state THEN 1 ELSE 0 END AS starts
            FROM job_timeline WINDOW w AS (PARTITION BY job ORDER BY ts, state <> 'running', id)
        ), g AS (
            SELECT *, sum(starts) OVER (PARTITION BY job ORDER BY ts, state <> 'running', id
                                        ROWS UNBOUNDED PRECEDING) AS span
            FROM m
        )
        SELECT job, state, min(ts) AS ts, max(next_ts) AS next_ts, count(*) AS marks
        FROM g GROUP BY job, span, state ORDER BY job, ts""",
    # Recovery: the first running mark after the diagnosis's first command (or, with no command,
    # after the diagnosis itself). An ASOF join finds it in one merge instead of a scan per incident.
    "incidents": """
        WITH first_cmd AS (SELECT diagnosis_id, min(issued_at) AS issued_at, arg_min(action, issued_at) AS command
                           FROM commands WHERE diagnosis_id <> '' GROUP BY diagnosis_id),
        i AS (SELECT d.*, c.command, c.issued_at AS command_at, coalesce(c.issued_at, d.ts) AS after_ts
              FROM diagnoses d LEFT JOIN first_cmd c ON c.diagnosis_id = d.id WHERE d.action <> 'none'),
        running AS (SELECT job, ts AS recovered_at FROM job_timeline WHERE state = 'running')
        SELECT i.job, i.id AS diagnosis_id, i.fault, i.nodes, i.action, i.onset, i.ts AS detected_at,
               i.ts - i.onset AS detection_s, i.command, i.command_at, i.command_at - i.ts AS to_command_s,
               r.recovered_at, r.recovered_at - i.onset AS recovery_s
        FROM i ASOF LEFT JOIN running r ON r.job = i.job AND r.recovered_at > i.after_ts
        ORDER BY i.job, i.onset, i.id""",
    # Nodes to send to hardware inspection: repeated hardware failures, or the engine already asked.
    "inspection_candidates": """
        SELECT n AS node, count(*) AS hardware_failures, list(DISTINCT fault ORDER BY fault) AS faults,
               bool_or(action = 'inspect_hardware') AS engine_asked, max(ts) AS last_ts
        FROM diagnoses, unnest(nodes) AS u(n)
        WHERE fault IN ('gpu_lost', 'gpu_memory', 'nvlink', 'gpu_thermal', 'gpu_reset_required', 'nic', 'kernel')
          AND action <> 'none'
        GROUP BY node
        HAVING count(*) >= $repeat OR bool_or(action = 'inspect_hardware')
        ORDER BY hardware_failures DESC, node""",
    "event_faults": """
        SELECT source, kind, fault, count(*) AS events, count(DISTINCT node) AS nodes
        FROM events WHERE fault IS NOT NULL GROUP BY source, kind, fault ORDER BY events DESC, source, kind""",
}

# The sections `faultlens report` prints, in order (the helper queries feed plots and notebooks).
REPORT_SECTIONS = (
    "summary", "faults_by_class", "faults_by_node", "faults_by_day", "top_nodes", "detection_latency",
    "label_detection", "time_to_command", "mtbf", "over_eviction", "ettr", "incidents", "event_faults",
)


def _params(sql: str, given: dict[str, Any]) -> dict[str, Any]:
    values = {**DEFAULTS, **{k: v for k, v in given.items() if v is not None}}
    return {k: v for k, v in values.items() if f"${k}" in sql}


def run(conn: duckdb.DuckDBPyConnection, name: str, **params: Any) -> list[dict[str, Any]]:
    """Rows of query ``name`` as dicts (column → value)."""
    try:
        sql = QUERIES[name]
    except KeyError:
        raise KeyError(f"unknown query {name!r} (one of {', '.join(QUERIES)})") from None
    cur = conn.execute(sql, _params(sql, params))
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row)) for row in cur.fetchall()]


def columns(rows: list[dict[str, Any]], *names: str) -> tuple[list[Any], ...]:
    """Column lists from rows, for plotting without pandas."""
    return tuple([r[n] for r in rows] for n in names)


def is_empty(conn: duckdb.DuckDBPyConnection) -> bool:
    """Whether the history holds nothing to report on."""
    s = run(conn, "summary")[0]
    return not any(s[k] for k in ("events", "diagnoses", "commands", "labels")) and not s["jobs"]
