"""The demo's history file, rewritten once at the end without its free blocks.

The history consumer appends batches as they arrive; DuckDB rewrites the row group a batch lands in
at each checkpoint and frees the old blocks, but never gives them back to the file system. A README
demo's history was 327 MiB with 627 of its 1,307 blocks free (`pragma_database_size`); copied table
by table it is 170 MiB with every row, key and the schema version kept. The rows themselves (mostly
raw telemetry: flight-recorder dumps, sampled GPU and NIC samples) stay: `faultlens rules diff`
replays every stored event through the detectors (docs/rules.md).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import duckdb

log = logging.getLogger(__name__)


def compact_history(db: Path) -> tuple[int, int]:
    """Rewrite ``db`` in place with only its used blocks; returns its size in bytes before and after.

    The copy is made beside it and renamed over it, so an error (a full disk) leaves the original
    whole; the caller must hold no connection to ``db``."""
    before = db.stat().st_size
    fresh = db.with_name(db.name + ".compacting")
    fresh.unlink(missing_ok=True)
    conn = duckdb.connect()
    try:
        conn.execute("SET enable_progress_bar = false")  # stdout may be the demo's JSON lines
        conn.execute("ATTACH ? AS src (READ_ONLY)", [str(db)])
        conn.execute("ATTACH ? AS dst", [str(fresh)])
        conn.execute("COPY FROM DATABASE src TO dst")
        conn.execute("DETACH dst")  # checkpoints the copy: nothing left in a write-ahead log
        conn.execute("DETACH src")
    except BaseException:
        conn.close()
        fresh.unlink(missing_ok=True)
        raise
    conn.close()
    os.replace(fresh, db)
    after = db.stat().st_size
    log.info("history %s compacted: %.0f MiB -> %.0f MiB", db, before / 2**20, after / 2**20)
    return before, after
