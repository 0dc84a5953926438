"""Stop-time checks the node agent runs on a signed `run_checks` command (docs/design.md §4, step 3).

Each check is a pure judgement over a snapshot (``judge_*``) plus a thin reader at the edge
(``read_*`` / ``measure_*``), run under a timeout by :mod:`collectors.checks.suite`, which
publishes one `check`/`result` event per node per command (docs/events.md).
"""
