"""The history keeps what the remediation actuator did (table actions), once per operation."""

from __future__ import annotations

import duckdb

from faultlens.events.action_record import ActionRecord
from faultlens.history.schema import DDL, SCHEMA_VERSION, open_history
from faultlens.history.sink import HistorySink, build_batch


def records():
    drain = ActionRecord(ts=100.0, job="j1", op="take_out", actuator="slurm", nodes=("n3",), diagnosis_id="d-1",
                         fault="gpu_lost", reason="gpu_lost: evict", mode="act", outcome="ok",
                         detail="drained n3 (MIXED+DRAIN)", duration_s=0.05)
    requeue = ActionRecord(ts=100.1, job="j1", op="requeue", actuator="slurm", nodes=("n3",), diagnosis_id="d-1",
                           fault="gpu_lost", mode="act", outcome="error",
                           detail="`scontrol requeue 77` exited 1: Job is not a batch job")
    observed = ActionRecord(ts=200.0, job="j2", op="take_out", actuator="slurm", nodes=("n5",), diagnosis_id="d-2",
                            fault="nic", mode="observe", outcome="skipped", detail="observe-only: would take out n5")
    return [drain, requeue, observed]


def test_actions_are_stored_with_their_outcome_once(tmp_path):
    conn = open_history(tmp_path / "h.duckdb", create=True)
    sink = HistorySink(conn)
    assert sink.write(build_batch(records())) == {"actions": 3}
    # The same decision carried out again after a redelivery: same ids, no new rows.
    again = [ActionRecord.from_dict({**r.to_dict(), "ts": r.ts + 5}) for r in records()]
    assert sink.write(build_batch(again)).get("actions", 0) == 0
    rows = conn.execute("SELECT job, op, outcome, nodes, detail FROM actions ORDER BY ts").fetchall()
    assert rows == [("j1", "take_out", "ok", ["n3"], "drained n3 (MIXED+DRAIN)"),
                    ("j1", "requeue", "error", ["n3"], "`scontrol requeue 77` exited 1: Job is not a batch job"),
                    ("j2", "take_out", "skipped", ["n5"], "observe-only: would take out n5")]


def test_a_history_file_from_before_actions_gains_the_table(tmp_path):
    path = tmp_path / "old.duckdb"
    old = duckdb.connect(str(path))
    for statement in DDL:
        old.execute(statement)
    old.execute("INSERT INTO schema_version VALUES (?, 0)", [SCHEMA_VERSION])
    old.close()
    read_only = open_history(path, read_only=True)  # readers of an old file still open it
    read_only.close()
    conn = open_history(path)
    HistorySink(conn).write(build_batch(records()[:1]))
    assert conn.execute("SELECT count(*) FROM actions").fetchone()[0] == 1
