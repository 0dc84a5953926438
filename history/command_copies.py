"""Which copy of a command the history keeps, and where the others go.

Anyone who can write to the `commands` topic can publish a copy of a real command under its id
(a forgery, or the real one altered). The receivers refuse it (events.command_screen), but the
history inserts a command once: a forged copy that arrived first would be the command on record,
its nodes the ones "evicted". So when the history has the verify keys (``faultlens history
--verify-key``, or the pipeline's own signing key), it checks each copy's signature:

- a copy signed by a trusted key is the command: it is stored, and it replaces a stored copy of
  the same id that differs (which cannot be the genuine one: one id, one signed body);
- a copy that fails the check is stored in `commands` only while its id has no other copy (so
  the acks that refused it still have a command to name), never gets a timeline mark, and is
  kept in `refused_commands` with the reason, as is any copy a genuine one displaced.

Without keys the history cannot tell a genuine copy from a forged one: the first copy stays the
command, as before, and a later copy that differs is kept in `refused_commands` as a conflict,
so the forgery (or the genuine command it shadows) stays visible.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pyarrow as pa

from faultlens.events.command import Command
from faultlens.events.signing import VerifyKeys

# docs/design.md §6 command record, field for field, after its id: the `commands` table of
# history.schema and the refused copies below hold the same columns.
COMMAND_COLUMNS = """
        job           VARCHAR NOT NULL,
        action        VARCHAR NOT NULL,
        nodes         VARCHAR[],
        ranks         INTEGER[],
        reason        VARCHAR,
        diagnosis_id  VARCHAR,
        issued_at     DOUBLE NOT NULL,
        expires_at    DOUBLE,
        params        JSON,
        signature     VARCHAR"""

# Added after version 1 without a version change, like `actions` (history.schema): files made
# before it gain the table when opened for writing; readers of older files see no refused copies.
REFUSED_COMMANDS_DDL = f"""
    CREATE TABLE IF NOT EXISTS refused_commands (
        copy_id       VARCHAR PRIMARY KEY,
        id            VARCHAR NOT NULL,{COMMAND_COLUMNS},
        key_id        VARCHAR,
        problem       VARCHAR NOT NULL
    )"""

# The command record's columns a copy differs in (history.sink's `commands` table, less its id).
FIELDS = ("job", "action", "nodes", "ranks", "reason", "diagnosis_id", "issued_at", "expires_at", "params",
          "signature")
DISPLACED = "displaced by the copy signed by a trusted key (this copy was not)"
CONFLICT = ("another copy of this command id is stored first; the history has no verify key "
            "(faultlens history --verify-key) to tell which copy is genuine")
CONFLICT_SIGNED = "another copy of this command id, also signed by a trusted key, was stored first"


@dataclass(frozen=True, slots=True)
class Screened:
    """A batch's commands: those to store as the command (``kept``, one per id) and the copies
    refused, each with why (``refused``). ``verified``: the kept ones passed a signature check."""

    kept: tuple[Command, ...]
    refused: tuple[tuple[Command, str], ...]
    verified: bool


def screen_commands(commands: list[Command], keys: VerifyKeys | None) -> Screened:
    """Split a batch's commands (pure). With ``keys`` a copy is kept when its signature is good
    under them; without, every copy is kept. Of several kept copies of one id the first stays
    and a differing later one is refused as a conflict; the same copy twice (a redelivery) is one."""
    kept: dict[str, Command] = {}
    refused: list[tuple[Command, str]] = []
    for cmd in commands:
        problem = cmd.signature_problem(keys) if keys is not None else None
        if problem is None:
            first = kept.setdefault(cmd.id, cmd)
            if first is cmd or first == cmd:
                continue
            problem = CONFLICT_SIGNED if keys is not None else CONFLICT
        if not any(seen == cmd for seen, _ in refused):  # a redelivered copy is one copy
            refused.append((cmd, problem))
    return Screened(tuple(kept.values()), tuple(refused), keys is not None)


# --- the DuckDB edge ---------------------------------------------------------------------------
def _cols(alias: str) -> str:
    return ", ".join(f'{alias}."{f}"' for f in FIELDS)


def _field_sql(alias: str, f: str) -> str:
    # params is JSON in the table and text in an incoming batch: compared and digested as text.
    return f'{alias}."{f}"' + ("::VARCHAR" if f == "params" else "")


def _row(alias: str) -> str:
    return "row(" + ", ".join(_field_sql(alias, f) for f in FIELDS) + ")"


def copy_id_sql(alias: str) -> str:
    """The id of one copy: a digest of every field, the signature included."""
    parts = ", ".join(f'"{f}" := {_field_sql(alias, f)}' for f in ("id", *FIELDS))
    return f"md5(to_json(struct_pack({parts}))::VARCHAR)"


def _insert_refused(select: str) -> str:
    return (f'INSERT INTO refused_commands (copy_id, id, {", ".join(FIELDS)}, key_id, problem) {select} '
            f"ON CONFLICT DO NOTHING")


def _written(cursor: duckdb.DuckDBPyConnection) -> int:
    """The row count an INSERT returns (DuckDB answers one row)."""
    row = cursor.fetchone()
    return int(row[0]) if row is not None else 0


def write_kept(conn: duckdb.DuckDBPyConnection, view: str, verified: bool) -> tuple[int, int]:
    """Store the kept copies registered as ``view``: (commands written, copies moved to
    refused_commands). Runs inside the sink's transaction."""
    if verified:
        displaced = _written(conn.execute(_insert_refused(
            f"SELECT {copy_id_sql('c')}, c.id, {_cols('c')}, NULL, '{DISPLACED}' FROM commands c "
            f"JOIN {view} i ON c.id = i.id WHERE {_row('c')} IS DISTINCT FROM {_row('i')}")))
        sets = ", ".join(f'"{f}" = excluded."{f}"' for f in FIELDS)
        written = _written(conn.execute(
            f'INSERT INTO commands (id, {", ".join(FIELDS)}) SELECT id, {", ".join(FIELDS)} FROM {view} '
            f"ON CONFLICT (id) DO UPDATE SET {sets} WHERE {_row('commands')} IS DISTINCT FROM {_row('excluded')}"
        ))
        return written, displaced
    conflicts = _written(conn.execute(_insert_refused(
        f"SELECT {copy_id_sql('i')}, i.id, {_cols('i')}, NULL, '{CONFLICT}' FROM {view} i "
        f"JOIN commands c ON c.id = i.id WHERE {_row('c')} IS DISTINCT FROM {_row('i')}")))
    written = _written(conn.execute(
        f'INSERT INTO commands (id, {", ".join(FIELDS)}) SELECT id, {", ".join(FIELDS)} FROM {view} '
        f"ON CONFLICT DO NOTHING"))
    return written, conflicts


def write_refused(conn: duckdb.DuckDBPyConnection, view: str) -> tuple[int, int]:
    """Store the refused copies registered as ``view`` (the commands columns, ``key_id`` and
    ``problem``): each in refused_commands, and the first of an id still free in commands (after
    the kept ones, so a genuine copy in the same batch wins). Returns (commands, refused) written."""
    refused = _written(conn.execute(_insert_refused(
        f"SELECT {copy_id_sql('r')}, r.id, {_cols('r')}, r.key_id, r.problem FROM {view} r")))
    placeholder = _written(conn.execute(
        f'INSERT INTO commands (id, {", ".join(FIELDS)}) '
        f'SELECT id, {", ".join(FIELDS)} FROM (SELECT *, row_number() OVER (PARTITION BY id) AS n FROM {view}) '
        f"WHERE n = 1 ON CONFLICT DO NOTHING"))
    return placeholder, refused


REFUSED_SCHEMA_EXTRA = (("key_id", pa.string()), ("problem", pa.string()))
