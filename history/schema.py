"""The fault-history schema (docs/history.md): DDL, its version, and opening a history file safely.

A history file is a DuckDB database. Opening one checks that it is a DuckDB file, that it is a
faultlens history (it has ``schema_version``) and that its version is the one this build reads,
so the report never runs its SQL against a foreign or stale file and fails with a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from faultlens.events.home import faultlens_home
from faultlens.history.command_copies import COMMAND_COLUMNS, REFUSED_COMMANDS_DDL

SCHEMA_VERSION = 1

DB_ENV = "FAULTLENS_DB"

# Every table has a primary key on an id so that a re-delivered message (at-least-once) or a trace
# loaded twice does not double a row: the sink inserts with ON CONFLICT DO NOTHING.
DDL = (
    """
    CREATE TABLE IF NOT EXISTS schema_version (
        version     INTEGER NOT NULL,
        created_at  DOUBLE  NOT NULL
    )""",
    # One row per stored event (all, or a sample of the high-rate samples). `fault`, `rank` and
    # `step` are lifted out of `data` because the report and the notebooks filter on them.
    """
    CREATE TABLE IF NOT EXISTS events (
        id      VARCHAR PRIMARY KEY,
        ts      DOUBLE  NOT NULL,
        job     VARCHAR NOT NULL,
        node    VARCHAR NOT NULL,
        source  VARCHAR NOT NULL,
        kind    VARCHAR NOT NULL,
        fault   VARCHAR,
        rank    INTEGER,
        step    BIGINT,
        data    JSON
    )""",
    # docs/design.md §9 diagnosis record, field for field, plus the fold count.
    """
    CREATE TABLE IF NOT EXISTS diagnoses (
        id          VARCHAR PRIMARY KEY,
        job         VARCHAR NOT NULL,
        ts          DOUBLE  NOT NULL,
        onset       DOUBLE  NOT NULL,
        fault       VARCHAR NOT NULL,
        nodes       VARCHAR[],
        ranks       INTEGER[],
        "group"     VARCHAR,
        confidence  DOUBLE,
        action      VARCHAR NOT NULL,
        evidence    VARCHAR[],
        detail      VARCHAR,
        count       INTEGER
    )""",
    # docs/design.md §6 command record, field for field.
    f"""
    CREATE TABLE IF NOT EXISTS commands (
        id            VARCHAR PRIMARY KEY,{COMMAND_COLUMNS}
    )""",
    # State marks: "from ts on, the job is in `state`". Derived by the sink from train steps
    # (running), diagnoses (fault onset: stalled or down), commands and job restarts (restarting).
    # `id` names the record the mark came from, so marks are idempotent like everything else.
    """
    CREATE TABLE IF NOT EXISTS job_timeline (
        id      VARCHAR PRIMARY KEY,
        job     VARCHAR NOT NULL,
        ts      DOUBLE  NOT NULL,
        state   VARCHAR NOT NULL,
        reason  VARCHAR
    )""",
    # Ground truth of a simulated or labelled trace (docs/design.md §8): one row per injected fault.
    """
    CREATE TABLE IF NOT EXISTS labels (
        id      VARCHAR PRIMARY KEY,
        job     VARCHAR,
        fault   VARCHAR NOT NULL,
        nodes   VARCHAR[],
        ranks   INTEGER[],
        onset   DOUBLE,
        extra   JSON
    )""",
)

TABLES = ("events", "diagnoses", "commands", "job_timeline", "labels")

# Added after version 1 without a version change: what the remediation actuator did on the
# scheduler (events.action_record), one row per operation with its outcome. Files made before it
# gain the table when opened for writing; readers of older files see no actions.
ACTIONS_DDL = """
    CREATE TABLE IF NOT EXISTS actions (
        id            VARCHAR PRIMARY KEY,
        ts            DOUBLE  NOT NULL,
        job           VARCHAR NOT NULL,
        op            VARCHAR NOT NULL,
        actuator      VARCHAR NOT NULL,
        nodes         VARCHAR[],
        diagnosis_id  VARCHAR,
        fault         VARCHAR,
        reason        VARCHAR,
        mode          VARCHAR,
        outcome       VARCHAR NOT NULL,
        detail        VARCHAR,
        duration_s    DOUBLE
    )"""


# Added after version 1 like `actions`: each machine's record across jobs (the compacted `fleet`
# topic, events.fleet_record), newest per machine, with its lemon verdict lifted out.
MACHINES_DDL = """
    CREATE TABLE IF NOT EXISTS machines (
        node            VARCHAR PRIMARY KEY,
        updated         DOUBLE  NOT NULL,
        state           VARCHAR NOT NULL,
        faults          INTEGER,
        counted         INTEGER,
        failed_checks   INTEGER,
        evictions       INTEGER,
        resumes         INTEGER,
        lemon_rule      VARCHAR,
        lemon_reason    VARCHAR,
        lemon_at        DOUBLE,
        lemon_diagnoses VARCHAR[],
        record          JSON
    )"""


class HistoryError(RuntimeError):
    """A history file that cannot be used; the message is one line meant for a person."""


def default_db_path() -> Path:
    """``$FAULTLENS_DB``, else ``$FAULTLENS_HOME/history.duckdb``."""
    env = os.environ.get(DB_ENV)
    return Path(env) if env else faultlens_home() / "history.duckdb"


def _quiet(conn: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    # DuckDB draws a progress bar on stdout for long queries, which would corrupt JSON-lines output.
    # Inside Jupyter DuckDB refuses to touch the setting without ipywidgets (and draws no bar).
    try:
        conn.execute("SET enable_progress_bar = false")
    except duckdb.Error:
        pass
    return conn


def _connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    try:
        return _quiet(duckdb.connect(str(path), read_only=read_only))
    except duckdb.IOException as exc:
        text = str(exc)
        if "lock" in text.lower():
            raise HistoryError(f"{path} is in use by another process (a running `faultlens history`?)") from None
        if "not a valid duckdb" in text.lower() or "database file" in text.lower() or "magic" in text.lower():
            raise HistoryError(f"{path} is not a DuckDB history file") from None
        raise HistoryError(f"cannot open {path}: {text.splitlines()[0]}") from None
    except duckdb.Error as exc:
        raise HistoryError(f"cannot open {path}: {str(exc).splitlines()[0]}") from None


def check_version(conn: duckdb.DuckDBPyConnection, path: Path | str = "history") -> int:
    """The file's schema version; raises :class:`HistoryError` when it is not this build's."""
    tables = {r[0] for r in conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()}
    if "schema_version" not in tables:
        raise HistoryError(f"{path} is a DuckDB file but not a faultlens history (no schema_version table)")
    row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
    version = row[0] if row else None
    if version is None:
        raise HistoryError(f"{path} has an empty schema_version table; it was not written by faultlens")
    if version != SCHEMA_VERSION:
        hint = "rebuild it with `faultlens history`" if version < SCHEMA_VERSION else "upgrade faultlens"
        raise HistoryError(f"{path} has history schema version {version}; this build reads {SCHEMA_VERSION} ({hint})")
    missing = [t for t in TABLES if t not in tables]
    if missing:
        raise HistoryError(f"{path} is missing table(s) {', '.join(missing)}; it is damaged or not a faultlens history")
    return version


def open_history(path: str | os.PathLike[str] | None = None, *, create: bool = False,
                 read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open (and with ``create``, make) a history file; every failure is a :class:`HistoryError`."""
    p = Path(path) if path else default_db_path()
    if p.is_dir():
        raise HistoryError(f"{p} is a directory, not a history file")
    exists = p.exists() and p.stat().st_size > 0
    if not exists and not create:
        raise HistoryError(f"{p} does not exist (build it with `faultlens history`)")
    if exists and not _looks_like_duckdb(p):
        raise HistoryError(f"{p} is not a DuckDB history file")
    if not exists:
        p.parent.mkdir(parents=True, exist_ok=True)
    conn = _connect(p, read_only=read_only and exists)
    try:
        if exists:
            check_version(conn, p)
            if not read_only:
                conn.execute(ACTIONS_DDL)
                conn.execute(REFUSED_COMMANDS_DDL)
                conn.execute(MACHINES_DDL)
            elif not has_table(conn, "refused_commands"):
                # A file from before the table, read only: an empty one for this session, so the
                # queries that consult it (history.queries: accepted commands) read it as "none".
                conn.execute(REFUSED_COMMANDS_DDL.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
            if read_only and not has_table(conn, "machines"):
                conn.execute(MACHINES_DDL.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
        else:
            for statement in (*DDL, ACTIONS_DDL, REFUSED_COMMANDS_DDL, MACHINES_DDL):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?, epoch(now()))", [SCHEMA_VERSION])
    except BaseException:
        conn.close()
        raise
    return conn


def memory_history() -> duckdb.DuckDBPyConnection:
    """An in-memory history (tests, a trace analysed without keeping the file)."""
    conn = _quiet(duckdb.connect(":memory:"))
    for statement in (*DDL, ACTIONS_DDL, REFUSED_COMMANDS_DDL, MACHINES_DDL):
        conn.execute(statement)
    conn.execute("INSERT INTO schema_version VALUES (?, epoch(now()))", [SCHEMA_VERSION])
    return conn


def _looks_like_duckdb(path: Path) -> bool:
    # DuckDB files carry the magic "DUCK" at byte 8; checking first gives a clear message for a
    # CSV or a SQLite file instead of whatever the storage layer happens to say.
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return False
    return len(head) >= 12 and head[8:12] == b"DUCK"


def has_table(conn: duckdb.DuckDBPyConnection, table: str) -> bool:
    row = conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table]).fetchone()
    return row is not None and bool(row[0])
