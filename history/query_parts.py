"""The SQL pieces several report queries share (history.queries): what counts as an acting
diagnosis and its kind, the history's time span, which commands were accepted (not refused), the
incidents with their recovery, and the truth a wrongly blamed node is judged against.

Each is a fragment (a condition, a CASE, or common table expressions for a ``WITH``) that
history.queries pastes into its named queries, so a measure is defined once (docs/history.md).
"""

from __future__ import annotations

from faultlens.history.command_copies import CONFLICT, CONFLICT_SIGNED, DISPLACED, copy_id_sql

KINDS = ("acting", "evidence_request", "record_only")
ACTING = "action NOT IN ('none', 'capture_stacks')"
KIND_CASE = ("CASE action WHEN 'none' THEN 'record_only' WHEN 'capture_stacks' THEN 'evidence_request' "
         "ELSE 'acting' END")
KIND_COUNTS = """count(*) FILTER (WHERE action NOT IN ('none', 'capture_stacks')) AS acting,
               count(*) FILTER (WHERE action = 'capture_stacks') AS evidence_requests,
               count(*) FILTER (WHERE action = 'none') AS record_only"""

# Marks at the same second sort running first: a step's mark is floored to its second, so a fault
# at 40.0 must follow the step mark of 40.x, not precede it.
# A failure, for MTBF and incidents, is an acting diagnosis (it interrupts the job).
SPAN = """
    span AS (
        SELECT min(lo) AS first_ts, max(hi) AS last_ts FROM (
            SELECT min(ts) AS lo, max(ts) AS hi FROM events
            UNION ALL SELECT min(onset), max(ts) FROM diagnoses
            UNION ALL SELECT min(issued_at), max(issued_at) FROM commands
            UNION ALL SELECT min(ts), max(ts) FROM job_timeline
        )
    )"""

# What refused_commands says of a copy that is not about its signature (history.command_copies).
_NOT_SIGNATURE = "(" + ", ".join(f"'{p}'" for p in (DISPLACED, CONFLICT, CONFLICT_SIGNED)) + ")"

# A command the history knows was refused: a receiver it was addressed to answered `command_ack`
# with `obeyed: false` (a bad signature, expired, replayed ...), no receiver answered obeyed and
# nothing shows it carried out (a job restart naming it, check results or stack dumps answering it:
# the node agent acks only its refusals). Such a command evicted nobody, so evictions and time to command count only
# `accepted` commands. An ack from before `addressed` was in the payload counts as addressed when
# it comes from the command's job and from a node the command names (or it names none). A command
# no receiver answered stays counted (the history cannot tell it from one obeyed silently), unless
# the copy stored is one the history's own signature check refused (`failed_check`: it held the
# id alone, history.command_copies) and no receiver obeyed it.
ACCEPTED = """
    acks AS (SELECT k.command_id, k.node, k.obeyed, k.reason, k.ts,
                    k.job = c.job AND coalesce(k.addressed, len(c.nodes) = 0 OR list_contains(c.nodes, k.node))
                        AS addressed
             FROM (SELECT data->>'command_id' AS command_id, job, node, (data->>'obeyed') = 'true' AS obeyed,
                          TRY_CAST(data->>'addressed' AS BOOLEAN) AS addressed, data->>'reason' AS reason, ts
                   FROM events WHERE kind = 'command_ack' AND data->>'command_id' IS NOT NULL) k
             JOIN commands c ON c.id = k.command_id),
    carried_out AS (SELECT data->>'command_id' AS command_id FROM events
                    WHERE source = 'job' AND kind = 'restart' AND data->>'command_id' IS NOT NULL
                    UNION SELECT data->>'request_id' FROM events
                    WHERE ((source = 'check' AND kind = 'result') OR (source = 'stack' AND kind = 'stack_dump'))
                      AND data->>'request_id' IS NOT NULL),
    failed_check AS (SELECT c.id FROM commands c JOIN refused_commands r ON r.id = c.id
                     AND r.copy_id = """ + copy_id_sql("c") + """ WHERE r.problem NOT IN """ + _NOT_SIGNATURE + """),
    refused AS ((SELECT command_id AS id FROM acks GROUP BY command_id
                 HAVING bool_or(addressed AND NOT obeyed) AND NOT bool_or(obeyed)
                 UNION SELECT id FROM failed_check WHERE id NOT IN (SELECT command_id FROM acks WHERE obeyed))
                EXCEPT SELECT command_id FROM carried_out),
    accepted AS (SELECT * FROM commands WHERE id NOT IN (SELECT id FROM refused)),
    answers AS (SELECT command_id, count(*) FILTER (WHERE obeyed) AS obeyed_acks,
                       count(*) FILTER (WHERE addressed AND NOT obeyed) AS refused_acks,
                       arg_min(reason, ts) FILTER (WHERE addressed AND NOT obeyed) AS refusal
                FROM acks GROUP BY 1),
    marks AS (SELECT * FROM job_timeline WHERE id NOT IN (SELECT 'cmd|' || id FROM refused))"""

# Recovery: the first running mark after the diagnosis's first command (or, with no command,
# after the diagnosis itself). An ASOF join finds it in one merge instead of a scan per incident.
INCIDENTS = f"""{ACCEPTED},
    first_cmd AS (SELECT diagnosis_id, min(issued_at) AS issued_at, arg_min(action, issued_at) AS command
                  FROM accepted WHERE diagnosis_id <> '' GROUP BY diagnosis_id),
    i AS (SELECT d.*, c.command, c.issued_at AS command_at, coalesce(c.issued_at, d.ts) AS after_ts
          FROM diagnoses d LEFT JOIN first_cmd c ON c.diagnosis_id = d.id WHERE d.{ACTING}),
    running AS (SELECT job, ts AS recovered_at FROM job_timeline WHERE state = 'running'),
    incidents AS (
        SELECT i.job, i.id AS diagnosis_id, i.fault, i.nodes, i.action, i.onset, i.ts AS detected_at,
               i.ts - i.onset AS detection_s, i.command, i.command_at, i.command_at - i.ts AS to_command_s,
               r.recovered_at, r.recovered_at - i.onset AS recovery_s
        FROM i ASOF LEFT JOIN running r ON r.job = i.job AND r.recovered_at > i.after_ts
    )"""

# The really faulty nodes: the labels when the history has any, else confirmed acting diagnoses.
TRUTH = f"""
    truth AS (
        SELECT DISTINCT n FROM labels, unnest(nodes) AS u(n)
        UNION
        SELECT DISTINCT n FROM diagnoses, unnest(nodes) AS u(n)
        WHERE NOT EXISTS (SELECT 1 FROM labels) AND confidence >= $confirmed AND {ACTING}
    )"""
BASIS = "CASE WHEN EXISTS (SELECT 1 FROM labels) THEN 'labels' ELSE 'confirmed diagnoses' END"
