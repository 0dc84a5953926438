"""History files on disk: `faultlens report` tables/JSON/plots, and files that are not usable histories."""

from __future__ import annotations

import sqlite3
import struct
import sys

import duckdb
import orjson
import pytest

from faultlens.cli import main
from faultlens.history.schema import HistoryError, open_history
from faultlens.history.sink import HistorySink, build_batch
from tests.history import known
from tests.progress import run_watched


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "history.duckdb"
    conn = open_history(path, create=True)
    HistorySink(conn).write(build_batch(known.records(), labels=known.LABELS))
    conn.close()
    return path


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    return err[0]


def test_report_json_lines(db, capsys):
    assert main(["report", "--db", str(db), "--json"]) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    by = {line["section"]: line for line in lines}
    assert by["over_eviction"]["basis"] == "labels" and by["over_eviction"]["ratio"] == 2.0
    assert by["time_to_command"]["p50_s"] == pytest.approx(1.5)
    assert by["summary"]["diagnoses"] == 4


def test_report_tables_and_plots(db, tmp_path, capsys):
    plots = tmp_path / "plots"
    assert main(["report", "--db", str(db), "--plots", str(plots)]) == 0
    out = capsys.readouterr().out
    assert "Top offending nodes" in out and "n1" in out
    pngs = sorted(p.name for p in plots.glob("*.png"))
    assert pngs == ["detection_latency.png", "faults_over_time.png", "job_timeline.png", "mtbf.png", "mttr.png",
                    "node_class_heatmap.png"]
    for p in plots.glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_report_on_empty_history(tmp_path, capsys):
    path = tmp_path / "empty.duckdb"
    open_history(path, create=True).close()
    assert main(["report", "--db", str(path)]) == 1
    assert "is empty" in _one_line_error(capsys)


def test_report_on_missing_file(tmp_path, capsys):
    assert main(["report", "--db", str(tmp_path / "nope.duckdb")]) == 1
    assert "does not exist" in _one_line_error(capsys)


def test_report_on_garbage_file(tmp_path, capsys):
    path = tmp_path / "garbage.duckdb"
    path.write_bytes(b"this is not a database\n" * 200)
    assert main(["report", "--db", str(path)]) == 1
    assert "not a DuckDB history file" in _one_line_error(capsys)


def test_report_on_corrupt_duckdb(tmp_path, db, capsys):
    data = bytearray(db.read_bytes())
    data[4096:] = b"\xff" * (len(data) - 4096)  # keep the magic, wreck the headers and blocks
    bad = tmp_path / "corrupt.duckdb"
    bad.write_bytes(bytes(data))
    assert main(["report", "--db", str(bad)]) == 1
    assert "faultlens report:" in _one_line_error(capsys)


def test_report_on_sqlite_file(tmp_path, capsys):
    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.commit()
    assert main(["report", "--db", str(path)]) == 1
    assert "not a DuckDB history file" in _one_line_error(capsys)


def test_foreign_duckdb_file(tmp_path, capsys):
    path = tmp_path / "foreign.duckdb"
    c = duckdb.connect(str(path))
    c.execute("CREATE TABLE sales (x INTEGER)")
    c.close()
    assert main(["report", "--db", str(path)]) == 1
    assert "not a faultlens history" in _one_line_error(capsys)


def test_old_schema_version(db, capsys):
    c = duckdb.connect(str(db))
    c.execute("UPDATE schema_version SET version = 0")
    c.close()
    assert main(["report", "--db", str(db)]) == 1
    line = _one_line_error(capsys)
    assert "schema version 0" in line and "rebuild" in line
    with pytest.raises(HistoryError, match="schema version 0"):
        open_history(db, create=True)  # the writer refuses it too rather than mixing versions


def test_history_cli_rejects_a_foreign_db(tmp_path, capsys):
    path = tmp_path / "x.duckdb"
    path.write_bytes(struct.pack("<Q", 7) * 100)
    assert main(["history", "--db", str(path), "--from-trace", str(tmp_path / "t.parquet")]) == 1
    assert "not a DuckDB history file" in _one_line_error(capsys)


def test_report_while_a_writer_holds_the_file(db):
    writer = open_history(db)  # this process holds DuckDB's write lock, as a running consumer would
    try:
        # Waited for while it computes or prints (tests/progress.py): a lock waited on forever stalls it.
        proc = run_watched([sys.executable, "-m", "faultlens", "report", "--db", str(db)], stall_s=60, cpu=True,
                           limit_s=280)
    finally:
        writer.close()
    # A running consumer's history is reported from a copy taken now (issue 58), said in one line.
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "in use" in err[0] and "reporting a copy" in err[0]
