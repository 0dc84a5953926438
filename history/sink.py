"""The history sink: records → Arrow batches (pure) → idempotent upserts into DuckDB.

:func:`build_batch` turns events, diagnoses, commands and labels into one Arrow table per history
table, plus the job-timeline marks they imply, and says which records it could not store and
why. :class:`HistorySink` writes a batch in one transaction: each Arrow table is registered into
DuckDB and copied with one ``INSERT ... SELECT ... ON CONFLICT DO NOTHING``, so a batch delivered
twice leaves the same rows (a diagnosis re-emitted with a higher fold count replaces its row).
Commands are the exception: which copy of a command id is kept, given the verify keys, is
history.command_copies (a forged copy that came first must not stay the command on record).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import duckdb
import orjson
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
from faultlens.history.schema import MACHINES_DDL

# High-rate periodic samples may be stored as a sample; everything else is always kept.
SAMPLED_KINDS = frozenset({("gpu", "sample"), ("host", "sample"), ("net", "sample")})

# Faults during which the processes are alive but make no (or slow) progress; other faults take
# the job down until it is restarted.
STALL_FAULTS = frozenset({"job_hang", "fail_slow", "loss_spike"})
# Commands that end the current run of the job; capture_stacks/checkpoint leave it running.
RESTART_ACTIONS = frozenset({"evict", "restart", "reattempt", "rollback"})

_INT32 = 2**31 - 1
_INT64 = 2**63 - 1

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


class Unstorable(ValueError):
    """A record the history cannot hold (non-finite time, out-of-range rank, unknown type)."""


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


# --- pure conversion ----------------------------------------------------------------------------
def _finite(name: str, value: Any) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise Unstorable(f"{name} is not a number: {value!r}") from None
    if not math.isfinite(f):
        raise Unstorable(f"{name} is not finite: {value!r}")
    return f


def _opt_int(value: Any, limit: int) -> int | None:
    """An int payload field, or None when it is missing, not an int, or out of the column's range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    v = int(value)
    return v if -limit - 1 <= v <= limit else None


def _ranks(ranks: Iterable[int]) -> list[int]:
    out = [int(r) for r in ranks]
    bad = [r for r in out if not -_INT32 - 1 <= r <= _INT32]
    if bad:
        raise Unstorable(f"rank {bad[0]} out of range")
    return out


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        # orjson refuses ints beyond 64 bits and odd types; the stdlib writes them (or their text),
        # and storing an odd payload beats losing the event.
        try:
            return json.dumps(value, default=str)
        except (TypeError, ValueError) as exc:
            raise Unstorable(f"payload is not JSON-serialisable: {exc}") from None


def event_row(e: Envelope) -> dict[str, Any]:
    data = e.data
    fault = data.get("fault")
    return {
        "id": e.id, "ts": _finite("ts", e.ts), "job": e.job, "node": e.node, "source": e.source,
        "kind": e.kind, "fault": fault if isinstance(fault, str) else None,
        "rank": _opt_int(data.get("rank"), _INT32), "step": _opt_int(data.get("step"), _INT64),
        "data": _json(dict(data)),
    }


def event_marks(e: Envelope) -> list[dict[str, Any]]:
    if e.source == "train" and e.kind == "step":
        # One running mark per job per second: the timeline needs progress, not every rank's step.
        sec = math.floor(e.ts)
        return [{"id": f"run|{e.job}|{sec}", "job": e.job, "ts": float(sec), "state": "running", "reason": "step"}]
    if e.source == "job" and e.kind == "restart":
        reason = e.data.get("reason")
        return [{"id": f"restart|{e.id}", "job": e.job, "ts": e.ts, "state": "restarting",
                 "reason": f"restart: {reason}" if reason else "restart"}]
    if e.source == "job" and e.kind == "end":
        # Until the job's next start it is not running at all: that time is no wall time of it
        # (a job resubmitted a day later did not spend the day down; queries.ettr).
        reason = e.data.get("reason")
        return [{"id": f"end|{e.id}", "job": e.job, "ts": e.ts, "state": "ended",
                 "reason": f"end: {reason}" if isinstance(reason, str) else "end"}]
    if e.source == "job" and e.kind == "topology":
        return [{"id": f"start|{e.id}", "job": e.job, "ts": e.ts, "state": "restarting", "reason": "job start (topology)"}]
    return []


def diagnosis_row(d: Diagnosis) -> dict[str, Any]:
    return {
        "id": d.id, "job": d.job, "ts": _finite("ts", d.ts), "onset": _finite("onset", d.onset), "fault": d.fault,
        "nodes": list(d.nodes), "ranks": _ranks(d.ranks), "group": d.group,
        "confidence": _finite("confidence", d.confidence), "action": d.action, "evidence": list(d.evidence),
        "detail": d.detail, "count": _opt_int(d.count, _INT32),
    }


def diagnosis_marks(d: Diagnosis) -> list[dict[str, Any]]:
    if d.action in ("none", "alert"):
        return []  # recorded only (Xid 63, 92) or a person is told: the job keeps running
    if d.action == "capture_stacks" and d.fault != "job_hang":
        return []  # a fail-slow stack round is asked of a job that still steps
    state = "stalled" if d.fault in STALL_FAULTS else "down"
    return [{"id": f"onset|{d.id}", "job": d.job, "ts": d.onset, "state": state, "reason": f"{d.fault} onset"}]


def command_row(c: Command) -> dict[str, Any]:
    return {
        "id": c.id, "job": c.job, "action": c.action, "nodes": list(c.nodes), "ranks": _ranks(c.ranks),
        "reason": c.reason, "diagnosis_id": c.diagnosis_id, "issued_at": _finite("issued_at", c.issued_at),
        "expires_at": _finite("expires_at", c.expires_at), "params": _json(dict(c.params)),
        "signature": c.signature,
    }


def command_marks(c: Command) -> list[dict[str, Any]]:
    if c.action in RESTART_ACTIONS:
        return [{"id": f"cmd|{c.id}", "job": c.job, "ts": c.issued_at, "state": "restarting", "reason": c.action}]
    if c.action == "stop":
        return [{"id": f"cmd|{c.id}", "job": c.job, "ts": c.issued_at, "state": "down", "reason": "stop"}]
    return []


def action_row(a: ActionRecord) -> dict[str, Any]:
    row = a.to_dict()
    row["ts"] = _finite("ts", a.ts)
    return row


def machine_row(r: MachineRecord) -> dict[str, Any]:
    lemon = r.lemon or {}
    return {"node": r.node, "updated": _finite("updated", r.updated), "state": r.state(), "faults": len(r.faults),
            "counted": len(r.counted()), "failed_checks": sum(1 for c in r.checks if c.get("failed")),
            "evictions": len(r.evictions), "resumes": len(r.resumes), "lemon_rule": lemon.get("rule"),
            "lemon_reason": lemon.get("reason"), "lemon_at": lemon.get("ts"),
            "lemon_diagnoses": [str(i) for i in lemon.get("diagnosis_ids") or []], "record": _json(r.to_dict())}


def label_row(label: Any) -> dict[str, Any]:
    """A ground-truth label (docs/design.md §8) from a dict or a dataclass; its id is a hash of its content."""
    if dataclasses.is_dataclass(label) and not isinstance(label, type):
        label = dataclasses.asdict(label)
    elif hasattr(label, "to_dict"):
        label = label.to_dict()
    if not isinstance(label, Mapping):
        raise Unstorable(f"a label must be an object, got {type(label).__name__}")
    fault = label.get("fault")
    if not isinstance(fault, str) or not fault:
        raise Unstorable("label has no fault class")
    nodes = label.get("nodes") or []
    if isinstance(nodes, str):
        nodes = [nodes]
    onset = label.get("onset")
    canonical = _json({k: label[k] for k in sorted(label, key=str)})
    extra = {k: v for k, v in label.items() if k not in ("job", "fault", "nodes", "ranks", "onset")}
    return {
        "id": hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest(),
        "job": None if label.get("job") is None else str(label["job"]),
        "fault": fault, "nodes": [str(n) for n in nodes], "ranks": _ranks(label.get("ranks") or []),
        "onset": None if onset is None else _finite("onset", onset), "extra": _json(extra),
    }


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
    tables = {name: pa.Table.from_pylist(r, schema=SCHEMAS[name]) for name, r in rows.items()}
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
