"""The demo's history is rewritten without its free blocks, and reads the same afterwards."""

from __future__ import annotations

import json

import duckdb
import pytest

from faultlens.demo.compact import compact_history
from faultlens.history.queries import run
from faultlens.history.schema import open_history


def _blocks(path) -> tuple[int, int]:
    conn = duckdb.connect(str(path), read_only=True)
    try:
        total, free = conn.execute("SELECT total_blocks, free_blocks FROM pragma_database_size()").fetchone()
        return total, free
    finally:
        conn.close()


def _history_written_in_batches(path) -> None:
    """Large payloads appended batch by batch with a checkpoint after each, as the history
    consumer's commits do: each checkpoint rewrites the row group and frees the old blocks."""
    conn = open_history(path, create=True)
    try:
        for batch in range(5):
            rows = [
                (
                    f"e{batch}-{i}",
                    1000.0 + batch * 100 + i,
                    "j",
                    f"n{i % 8:03d}",
                    "stack",
                    "recorder_dump",
                    json.dumps({"rank": i, "dump": f"{batch}-{i}-" + "x" * 16_000}),
                )
                for i in range(40)
            ]
            conn.executemany("INSERT INTO events (id, ts, job, node, source, kind, data) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            conn.execute("CHECKPOINT")
    finally:
        conn.close()


def test_compaction_gives_back_the_free_blocks_and_keeps_every_row_and_key(tmp_path):
    db = tmp_path / "history.duckdb"
    _history_written_in_batches(db)
    conn = open_history(db, read_only=True)
    summary_before = run(conn, "summary")
    conn.close()
    total_before, free_before = _blocks(db)
    assert free_before > 0, "the test's writes must leave free blocks to give back"

    before, after = compact_history(db)

    assert after < before and after == db.stat().st_size
    total_after, free_after = _blocks(db)
    assert free_after == 0 and total_after == total_before - free_before
    assert not list(tmp_path.glob("*.compacting*")), "the copy is renamed over the original"
    conn = open_history(db)  # still this build's schema version, writable
    try:
        assert run(conn, "summary") == summary_before
        assert conn.execute("SELECT count(*), count(DISTINCT data) FROM events").fetchone() == (200, 200)
        # the primary key came along: a redelivered event is still not stored twice
        conn.execute(
            "INSERT INTO events (id, ts, job, node, source, kind) VALUES ('e0-0', 1, 'j', 'n', 's', 'k') ON CONFLICT DO NOTHING"
        )
        assert conn.execute("SELECT count(*) FROM events WHERE id = 'e0-0'").fetchone() == (1,)
    finally:
        conn.close()


def test_a_failed_copy_leaves_the_history_as_it_was(tmp_path):
    db = tmp_path / "history.duckdb"
    _history_written_in_batches(db)
    size = db.stat().st_size
    held = duckdb.connect(str(db))  # another writer holds the file: it cannot be attached
    try:
        with pytest.raises(duckdb.Error):
            compact_history(db)
    finally:
        held.close()
    assert db.stat().st_size == size
    assert not list(tmp_path.glob("*.compacting*"))
