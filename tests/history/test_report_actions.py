"""`faultlens report` on the actions table: operations by outcome, and the machines taken out."""

from __future__ import annotations

import duckdb
import orjson

from faultlens.cli import main
from faultlens.events.action_record import ActionRecord
from faultlens.history import queries, report
from faultlens.history.schema import DDL, SCHEMA_VERSION, memory_history, open_history
from faultlens.history.sink import HistorySink, build_batch
from tests.history import known

T0 = 1_700_000_000.0


def slurm(ts, op, nodes, outcome="ok", *, job="train-7", diagnosis="", fault="", mode="act", detail=""):
    return ActionRecord(ts=T0 + ts, job=job, op=op, actuator="slurm", nodes=tuple(nodes), diagnosis_id=diagnosis,
                        fault=fault, reason=f"{fault}: stop-time checks failed" if fault else "", mode=mode,
                        outcome=outcome, detail=detail, duration_s=0.04)


# What the Slurm actuator recorded over one afternoon (details as slurm.py writes them).
ACTIONS = [
    # a crash whose checks failed on gpu-12: drained; the launcher restarts the job, the requeue fails
    slurm(10, "take_out", ["gpu-12"], diagnosis="d-cuda", fault="cuda_error",
          detail="drained gpu-12 (MIXED+DRAIN)"),
    slurm(10.1, "requeue", ["gpu-12"], "error", diagnosis="d-cuda", fault="cuda_error",
          detail="no Slurm job named 'train-7' in the queue"),
    # gpu-12 passed its checks at the next crash: back in service
    slurm(900, "bring_back", ["gpu-12"], diagnosis="d-nan", fault="nan_loss",
          detail="resumed gpu-12 (IDLE)"),
    # a lost GPU on gpu-3 and gpu-4 (one decision, two machines): still out
    slurm(1200, "take_out", ["gpu-3", "gpu-4"], diagnosis="d-lost", fault="gpu_lost",
          detail="drained gpu-3,gpu-4 (ALLOCATED+DRAIN)"),
    # a job in observe-only mode: what would have been done
    slurm(1300, "take_out", ["gpu-9"], "skipped", job="eval-2", diagnosis="d-nic", fault="nic", mode="observe",
          detail="observe-only: would take out gpu-9"),
    # gpu-12 again, later, by a person (`faultlens nodes drain`): out again
    slurm(2000, "take_out", ["gpu-12"], job="-", detail="drained gpu-12 (IDLE+DRAIN)"),
]


def history(actions=ACTIONS):
    conn = memory_history()
    HistorySink(conn).write(build_batch([*known.records(), *actions]))
    return conn


def test_actions_by_operation_and_outcome():
    rows = {(r["op"], r["outcome"]): r for r in queries.run(history(), "action_outcomes")}
    assert set(rows) == {("take_out", "ok"), ("take_out", "skipped"), ("requeue", "error"), ("bring_back", "ok")}
    take_out = rows[("take_out", "ok")]
    # three operations on three machines (the gpu_lost one names two), two jobs (train-7 and the person's "-")
    assert (take_out["actions"], take_out["nodes"], take_out["jobs"]) == (3, 3, 2)
    assert take_out["actuator"] == "slurm" and take_out["last_ts"] == T0 + 2000
    assert (rows[("requeue", "error")]["actions"], rows[("take_out", "skipped")]["nodes"]) == (1, 1)


def test_machines_taken_out_still_out_first_and_brought_back_ones_say_when():
    rows = queries.run(history(), "nodes_taken_out")
    assert [(r["node"], r["still_out"]) for r in rows] == [("gpu-3", True), ("gpu-4", True), ("gpu-12", True)]
    gpu3, gpu12 = rows[0], rows[2]
    assert (gpu3["fault"], gpu3["diagnosis_id"], gpu3["taken_out_at"], gpu3["brought_back_at"]) == (
        "gpu_lost", "d-lost", T0 + 1200, None)
    # gpu-12: out, back at 900, out again by hand at 2000; the skipped (observe-only) gpu-9 never went out
    assert (gpu12["times"], gpu12["taken_out_at"], gpu12["job"], gpu12["brought_back_at"]) == (2, T0 + 2000, "-", None)
    # without the second drain, gpu-12 is back in service since 900
    rows = queries.run(history(ACTIONS[:-1]), "nodes_taken_out")
    back = {r["node"]: r for r in rows}["gpu-12"]
    assert back["still_out"] is False and back["brought_back_at"] == T0 + 900 and back["diagnosis_id"] == "d-cuda"
    assert [r["node"] for r in rows] == ["gpu-3", "gpu-4", "gpu-12"]


def test_report_json_and_tables_carry_the_actions(tmp_path, capsys):
    db = tmp_path / "history.duckdb"
    conn = open_history(db, create=True)
    HistorySink(conn).write(build_batch([*known.records(), *ACTIONS]))
    conn.close()
    assert main(["report", "--db", str(db), "--json"]) == 0
    by = {line["section"]: line for line in map(orjson.loads, capsys.readouterr().out.splitlines())}
    assert {(r["op"], r["outcome"]) for r in by["action_outcomes"]["rows"]} == {
        ("take_out", "ok"), ("take_out", "skipped"), ("requeue", "error"), ("bring_back", "ok")}
    assert [r["node"] for r in by["nodes_taken_out"]["rows"] if r["still_out"]] == ["gpu-3", "gpu-4", "gpu-12"]
    out = tmp_path / "report.txt"
    with open(out, "w") as fh:
        report.render(report.build(history()), file=fh)
    text = out.read_text()
    assert "Scheduler actions (actuator) by operation and outcome" in text and "bring_back" in text
    assert "Machines taken out of the scheduler" in text and "gpu-4" in text and "gpu_lost" in text


def test_a_history_from_before_the_actions_table_reports_no_actions(tmp_path, capsys):
    path = tmp_path / "old.duckdb"
    old = duckdb.connect(str(path))
    for statement in DDL:
        old.execute(statement)
    old.execute("INSERT INTO schema_version VALUES (?, 0)", [SCHEMA_VERSION])
    HistorySink(old).write(build_batch(known.records()))
    old.close()
    conn = open_history(path, read_only=True)  # as `faultlens report` opens it: the table is not added
    assert not queries.has_table(conn, "actions")
    assert queries.run(conn, "action_outcomes") == [] and queries.frame(conn, "nodes_taken_out").empty
    conn.close()
    assert main(["report", "--db", str(path), "--json"]) == 0
    by = {line["section"]: line for line in map(orjson.loads, capsys.readouterr().out.splitlines())}
    assert by["action_outcomes"]["rows"] == [] and by["nodes_taken_out"]["rows"] == []
    assert by["summary"]["diagnoses"] == 4
