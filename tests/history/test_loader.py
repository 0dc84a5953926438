"""`faultlens history --from-trace`: a simulated trace (events, labels, engine diagnoses) into a history."""

from __future__ import annotations

import orjson
import pytest

from faultlens.cli import main
from faultlens.events.trace import iter_trace, read_labels
from faultlens.history.loader import load_trace
from faultlens.history.queries import run
from faultlens.history.schema import HistoryError, memory_history, open_history
from faultlens.history.sink import SAMPLED_KINDS, HistorySink, Sampling


def _count(conn, sql: str) -> int:
    return conn.execute(sql).fetchone()[0]


def test_trace_loads_events_labels_and_diagnoses(sim_trace):
    events = list(iter_trace(sim_trace))
    conn = memory_history()
    stats = load_trace(sim_trace, HistorySink(conn), progress=False)
    assert stats.events == len(events) == _count(conn, "SELECT count(*) FROM events")
    assert stats.labels == len(read_labels(sim_trace)) == _count(conn, "SELECT count(*) FROM labels")
    assert stats.diagnoses > 0 and stats.diagnoses == _count(conn, "SELECT count(*) FROM diagnoses")
    assert stats.notes == [] and stats.rejected == 0
    # the simulated job steps, so it has a timeline and an ETTR between 0 and 1
    rows = run(conn, "ettr")
    assert rows and all(0.0 < r["ettr"] <= 1.0 for r in rows)


def test_loading_twice_adds_nothing(sim_trace, tmp_path):
    db = tmp_path / "h.duckdb"
    conn = open_history(db, create=True)
    load_trace(sim_trace, HistorySink(conn), progress=False)
    before = [_count(conn, f"SELECT count(*) FROM {t}") for t in ("events", "diagnoses", "labels", "job_timeline")]
    again = load_trace(sim_trace, HistorySink(conn), progress=False)
    after = [_count(conn, f"SELECT count(*) FROM {t}") for t in ("events", "diagnoses", "labels", "job_timeline")]
    conn.close()
    assert after == before
    assert sum(again.inserted.values()) == 0


def test_sampling_drops_only_high_rate_samples(sim_trace):
    events = list(iter_trace(sim_trace))
    samples = sum(1 for e in events if (e.source, e.kind) in SAMPLED_KINDS)
    assert samples > 100
    conn = memory_history()
    stats = load_trace(sim_trace, HistorySink(conn), sampling=Sampling(0.1), diagnose=False, progress=False)
    stored = _count(conn, "SELECT count(*) FROM events")
    kept_samples = _count(conn, "SELECT count(*) FROM events WHERE kind = 'sample' AND source IN ('gpu', 'host', 'net')")
    assert stored == len(events) - stats.sampled_out
    assert stored - kept_samples == len(events) - samples
    assert 0.03 * samples < kept_samples < 0.2 * samples
    assert _count(conn, "SELECT count(*) FROM diagnoses") == 0


def test_cli_from_trace(sim_trace, tmp_path, capsys):
    db = tmp_path / "h.duckdb"
    assert main(["history", "--from-trace", str(sim_trace), "--db", str(db), "--no-progress",
                 "--sample-rate", "0.5"]) == 0
    out = orjson.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["events"] > 0 and out["sampled_out"] > 0 and out["labels"] > 0
    assert main(["report", "--db", str(db), "--json"]) == 0
    by = {s["section"]: s for s in map(orjson.loads, capsys.readouterr().out.splitlines())}
    assert by["summary"]["events"] == out["events"] - out["sampled_out"]
    assert by["label_detection"]["labels"] == out["labels"]
    assert by["over_eviction"]["basis"] == "labels"


def test_cli_from_a_file_that_is_not_a_trace(tmp_path, capsys):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 garbage")
    assert main(["history", "--from-trace", str(bad), "--db", str(tmp_path / "h.duckdb"), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a Parquet trace" in err[0]


def test_missing_trace(tmp_path):
    with pytest.raises(HistoryError, match="does not exist"):
        load_trace(tmp_path / "nope.parquet", HistorySink(memory_history()), progress=False)


def test_a_trace_that_breaks_part_way_keeps_what_came_before(sim_trace, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from faultlens.events.trace import SCHEMA

    rows = pq.read_table(sim_trace).slice(0, 300).to_pylist()
    rows[200]["source"] = "bogus"  # a row that is not a valid envelope
    broken = tmp_path / "broken.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), broken)
    db = tmp_path / "h.duckdb"
    assert main(["history", "--from-trace", str(broken), "--db", str(db), "--no-progress", "--no-diagnose"]) == 1
    captured = capsys.readouterr()
    out = orjson.loads(captured.out.strip().splitlines()[-1])
    assert out["truncated"] is True and out["events"] == 200
    assert "row 200" in captured.err and "Traceback" not in captured.err
    conn = open_history(db, read_only=True)
    assert _count(conn, "SELECT count(*) FROM events") == 200
    conn.close()


def test_alerts_and_fail_slow_stack_rounds_do_not_mark_the_job_down_or_stalled():
    from faultlens.events.diagnosis_record import Diagnosis
    from faultlens.history.rows import diagnosis_marks

    def d(fault, action):
        return Diagnosis(job="j", ts=100.0, onset=90.0, fault=fault, action=action, nodes=("n1",))

    assert diagnosis_marks(d("nic", "alert")) == [] and diagnosis_marks(d("fail_slow", "capture_stacks")) == []
    assert [m["state"] for m in diagnosis_marks(d("job_hang", "capture_stacks"))] == ["stalled"]  # it is stuck
    assert [m["state"] for m in diagnosis_marks(d("gpu_lost", "evict"))] == ["down"]
