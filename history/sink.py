"""The history sink: records → Arrow batches (pure) → idempotent upserts into DuckDB.

:func:`build_batch` turns events, diagnoses, commands and labels into one Arrow table per history
table, plus the job-timeline marks they imply (each record's row and marks: history.rows), and says
which records it could not store and why. :class:`HistorySink` writes a batch in one transaction: each Arrow table is registered into
DuckDB and copied with one ``INSERT ... SELECT ... ON CONFLICT DO NOTHING``, so a batch delivered
twice leaves the same rows (a diagnosis re-emitted with a higher fold count replaces its row).
Commands are the exception: which copy of a command id is kept, given the verify keys, is
history.command_copies (a forged copy that came first must not stay the command on record).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

import duckdb
import pyarrow as pa

from faultlens.events.action_record import ActionRecord
from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.events.fleet_record import MachineRecord
from faultlens.events.signing import VerifyKeys
from faultlens.history.command_copies import (
    REFUSED_COMMANDS_DDL,
    REFUSED_SCHEMA_EXTRA,
    screen_commands,
    write_kept,
    write_refused,
)
from faultlens.history.rows import (
    Unstorable,
    action_row,
    command_marks,
    command_row,
    diagnosis_marks,
    diagnosis_row,
    event_marks,
    event_row,
    label_row,
    machine_row,
)
from faultlens.history.schema import MACHINES_DDL

# High-rate periodic samples may be stored as a sample; everything else is always kept.
SAMPLED_KINDS = frozenset({("gpu", "sample"), ("host", "sample"), ("net", "sample")})

SCHEMAS: dict[str, pa.Schema] = {
    "events": pa.schema([
        ("id", pa.string()), ("ts", pa.float64()), ("job", pa.string()), ("node", pa.string()),
        ("source", pa.string()), ("kind", pa.string()), ("fault", pa.string()), ("rank", pa.int32()),
        ("step", pa.int64()), ("data", pa.string()),
    ]),
    "diagnoses": pa.schema([
        ("id", pa.string()), ("job", pa.string()), ("ts", pa.float64()), ("onset", pa.float64()),
        ("fault", pa.string()), ("nodes", pa.list_(pa.string())), ("ranks", pa.list_(pa.int32())),
        ("group", pa.string()), ("confidence", pa.float64()), ("action", pa.string()),
        ("evidence", pa.list_(pa.string())), ("detail", pa.string()), ("count", pa.int32()),
    ]),
    "commands": pa.schema([
        ("id", pa.string()), ("job", pa.string()), ("action", pa.string()), ("nodes", pa.list_(pa.string())),
        ("ranks", pa.list_(pa.int32())), ("reason", pa.string()), ("diagnosis_id", pa.string()),
        ("issued_at", pa.float64()), ("expires_at", pa.float64()), ("params", pa.string()),
        ("signature", pa.string()),
    ]),
    # Copies of commands the history refused (history.command_copies); its copy_id is computed there.
    "refused_commands": pa.schema([
        ("id", pa.string()), ("job", pa.string()), ("action", pa.string()), ("nodes", pa.list_(pa.string())),
        ("ranks", pa.list_(pa.int32())), ("reason", pa.string()), ("diagnosis_id", pa.string()),
        ("issued_at", pa.float64()), ("expires_at", pa.float64()), ("params", pa.string()),
        ("signature", pa.string()), *REFUSED_SCHEMA_EXTRA,
    ]),
    "job_timeline": pa.schema([
        ("id", pa.string()), ("job", pa.string()), ("ts", pa.float64()), ("state", pa.string()),
        ("reason", pa.string()),
    ]),
    "actions": pa.schema([
        ("id", pa.string()), ("ts", pa.float64()), ("job", pa.string()), ("op", pa.string()),
        ("actuator", pa.string()), ("nodes", pa.list_(pa.string())), ("diagnosis_id", pa.string()),
        ("fault", pa.string()), ("reason", pa.string()), ("mode", pa.string()), ("outcome", pa.string()),
        ("detail", pa.string()), ("duration_s", pa.float64()),
    ]),
    "machines": pa.schema([
        ("node", pa.string()), ("updated", pa.float64()), ("state", pa.string()), ("faults", pa.int32()),
        ("counted", pa.int32()), ("failed_checks", pa.int32()), ("evictions", pa.int32()), ("resumes", pa.int32()),
        ("lemon_rule", pa.string()), ("lemon_reason", pa.string()), ("lemon_at", pa.float64()),
        ("lemon_diagnoses", pa.list_(pa.string())), ("record", pa.string()),
    ]),
    "labels": pa.schema([
        ("id", pa.string()), ("job", pa.string()), ("fault", pa.string()), ("nodes", pa.list_(pa.string())),
        ("ranks", pa.list_(pa.int32())), ("onset", pa.float64()), ("extra", pa.string()),
    ]),
}


_EMPTY: dict[str, pa.Table] = {name: schema.empty_table() for name, schema in SCHEMAS.items()}  # immutable, shared


@dataclass(frozen=True, slots=True)
class Sampling:
    """Keep this fraction of the high-rate samples, chosen by a hash of the event id.

    Hashing the id (not drawing a random number) makes the choice deterministic: a re-delivered
    or re-loaded event is kept or dropped exactly as the first time.
    """

    rate: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0 or math.isnan(self.rate):
            raise ValueError(f"sample rate must be within 0..1, got {self.rate}")

    def keep(self, event: Envelope) -> bool:
        if self.rate >= 1.0 or (event.source, event.kind) not in SAMPLED_KINDS:
            return True
        digest = hashlib.blake2b(event.id.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") < self.rate * 2**64


@dataclass(frozen=True, slots=True)
class Rejected:
    """A record :func:`build_batch` could not store: its position in the input and the reason."""

    index: int
    reason: str


@dataclass
class Batch:
    tables: dict[str, pa.Table]
    rejected: list[Rejected] = field(default_factory=list)
    sampled_out: int = 0
    commands_verified: bool = False  # the commands table holds only copies signed by a trusted key

    def rows(self) -> dict[str, int]:
        return {name: t.num_rows for name, t in self.tables.items()}


def build_batch(items: Iterable[Any], sampling: Sampling = Sampling(), *, labels: Iterable[Any] = (),
                keys: VerifyKeys | None = None) -> Batch:
    """Rows for every record in ``items`` (Envelope, Diagnosis, Command or ActionRecord) and every
    label. With ``keys`` each command's signature is checked (history.command_copies)."""
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in SCHEMAS}
    rejected: list[Rejected] = []
    sampled_out = 0
    commands: list[Command] = []
    for i, item in enumerate(items):
        try:
            if isinstance(item, Envelope):
                marks = event_marks(item)
                if sampling.keep(item):
                    rows["events"].append(event_row(item))
                else:
                    sampled_out += 1
            elif isinstance(item, Diagnosis):
                rows["diagnoses"].append(diagnosis_row(item))
                marks = diagnosis_marks(item)
            elif isinstance(item, Command):
                command_row(item)  # an unstorable one is rejected here, at its index
                commands.append(item)
                marks = []  # only the copy kept as the command marks the timeline (below)
            elif isinstance(item, ActionRecord):
                rows["actions"].append(action_row(item))
                marks = []
            elif isinstance(item, MachineRecord):
                rows["machines"].append(machine_row(item))
                marks = []
            else:
                raise Unstorable(f"not an event, diagnosis, command, action or machine record: {type(item).__name__}")
            rows["job_timeline"].extend(marks)
        except Unstorable as exc:
            rejected.append(Rejected(i, str(exc)))
    # The engine re-emits a folded diagnosis under the same id with a growing count: keep the
    # fullest version of each (the table upsert does the same across batches).
    latest: dict[str, dict[str, Any]] = {}
    for row in rows["diagnoses"]:
        prev = latest.get(row["id"])
        if prev is None or (row["count"] or 0) >= (prev["count"] or 0):
            latest[row["id"]] = row
    rows["diagnoses"] = list(latest.values())
    # One row per machine in a batch too (one INSERT keeps the first of a key): the newest record,
    # the later one of two equally new (the topic's order).
    newest: dict[str, dict[str, Any]] = {}
    for row in rows["machines"]:
        if row["node"] not in newest or row["updated"] >= newest[row["node"]]["updated"]:
            newest[row["node"]] = row
    rows["machines"] = list(newest.values())
    screened = screen_commands(commands, keys)
    for cmd in screened.kept:
        rows["commands"].append(command_row(cmd))
        rows["job_timeline"].extend(command_marks(cmd))
    for cmd, problem in screened.refused:
        rows["refused_commands"].append({**command_row(cmd), "key_id": cmd.key_id, "problem": problem})
    for label in labels:
        try:
            rows["labels"].append(label_row(label))
        except Unstorable as exc:
            rejected.append(Rejected(-1, f"label: {exc}"))
    # Most tables of a polled batch are empty, and an empty from_pylist costs ~0.1-0.3 ms each:
    # a tenth of a small batch's write (the history writes one batch per poll).
    tables = {name: pa.Table.from_pylist(r, schema=SCHEMAS[name]) if r else _EMPTY[name] for name, r in rows.items()}
    return Batch(tables, rejected, sampled_out, screened.verified)


# --- the DuckDB edge ----------------------------------------------------------------------------
def _columns(name: str) -> str:
    return ", ".join(f'"{f.name}"' for f in SCHEMAS[name])


def _on_conflict(name: str) -> str:
    if name == "machines":
        # One row per machine: its newest record (the topic is compacted to one per machine too).
        sets = ", ".join(f'"{f.name}" = excluded."{f.name}"' for f in SCHEMAS[name] if f.name != "node")
        return f"ON CONFLICT (node) DO UPDATE SET {sets} WHERE excluded.updated >= machines.updated"
    if name != "diagnoses":
        return "ON CONFLICT DO NOTHING"
    # A later version of a folded diagnosis (higher count) replaces the stored one; the same or an
    # older version delivered again changes nothing, so the write stays idempotent.
    sets = ", ".join(f'"{f.name}" = excluded."{f.name}"' for f in SCHEMAS[name] if f.name != "id")
    return f"ON CONFLICT (id) DO UPDATE SET {sets} WHERE excluded.count > diagnoses.count"


class HistorySink:
    """Writes :class:`Batch` es into an open history connection (see history.schema.open_history)."""

    def __init__(self, conn: duckdb.DuckDBPyConnection):
        self.conn = conn
        self.inserted: dict[str, int] = {name: 0 for name in SCHEMAS}

    def write(self, batch: Batch) -> dict[str, int]:
        """Insert a batch atomically; returns the rows written per table (added, or a diagnosis
        replaced by a fuller version); duplicates count zero."""
        added: dict[str, int] = {}
        self.conn.execute("BEGIN TRANSACTION")
        try:
            for name, table in batch.tables.items():
                if table.num_rows == 0:
                    continue
                view = f"_incoming_{name}"
                self.conn.register(view, table)
                try:
                    if name in ("commands", "refused_commands"):
                        # A file made before the table (or a connection not opened by history.schema).
                        self.conn.execute(REFUSED_COMMANDS_DDL)
                        into_commands, refused = (write_kept(self.conn, view, batch.commands_verified)
                                                  if name == "commands" else write_refused(self.conn, view))
                        added["commands"] = added.get("commands", 0) + into_commands
                        added["refused_commands"] = added.get("refused_commands", 0) + refused
                        continue
                    if name == "machines":
                        self.conn.execute(MACHINES_DDL)  # a file made before the table
                    cols = _columns(name)
                    # DuckDB reports the rows written, so duplicates show up as a smaller count.
                    written = self.conn.execute(
                        f"INSERT INTO {name} ({cols}) SELECT {cols} FROM {view} {_on_conflict(name)}"
                    ).fetchone()
                    added[name] = written[0] if written is not None else 0
                finally:
                    self.conn.unregister(view)
            self.conn.execute("COMMIT")
        except BaseException:
            try:
                self.conn.execute("ROLLBACK")
            except duckdb.Error:
                pass  # the connection itself failed; the original error is the one to report
            raise
        for name, n in added.items():
            self.inserted[name] += n
        return added
