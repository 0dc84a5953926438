"""Traces (docs/design.md §8): a Parquet file of envelopes in time order, ground truth beside it.

One row per event with the envelope columns (``v, id, ts, job, node, source, kind``) and ``data``
as JSON text, so a trace reads back into the exact envelopes that were written. Rows go out in
row groups of :data:`ROW_GROUP_ROWS` and come back batch by batch: a trace of millions of events
is written and read in bounded memory.

Labels sit beside the trace in ``TRACE.labels.jsonl`` (the trace path with ``.labels.jsonl``
appended), one JSON object per injected fault: ``{"job", "fault", "nodes", "ranks", "onset"}``.
What the live pipeline said sits beside it too when it was recorded (``faultlens record --topics ...
diagnoses``): ``TRACE.diagnoses.jsonl``, one diagnosis record per line as the ``diagnoses`` topic
carries it. The rows stay envelopes only: every reader (analyze, check, replay, history) feeds
them to the detectors, which make their own diagnoses.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.jsonl import json_lines

# Small enough that a reader holds one group (~10-40 MB of JSON) at a time, big enough that
# Parquet's per-group overhead stays negligible.
ROW_GROUP_ROWS = 16_384

SCHEMA = pa.schema(
    [
        ("v", pa.int32()),
        ("id", pa.string()),
        ("ts", pa.float64()),
        ("job", pa.string()),
        ("node", pa.string()),
        ("source", pa.string()),
        ("kind", pa.string()),
        ("data", pa.string()),
    ]
)

LABEL_KEYS = ("job", "fault", "nodes", "ranks", "onset")


class TraceError(ValueError):
    """A trace or labels file that cannot be read; the message names the file and the row."""


def trace_order(event: Envelope) -> tuple[float, int, str]:
    """The order of rows in a trace: time, then job records (topology) first, then id. A total
    order on the events themselves, so a recording of a replay comes back row for row."""
    return (event.ts, 0 if event.source == "job" else 1, event.id)


def labels_path(trace_path: str | os.PathLike[str]) -> Path:
    """``TRACE.labels.jsonl``: the literal trace path with ``.labels.jsonl`` appended."""
    return Path(str(trace_path) + ".labels.jsonl")


def diagnoses_path(trace_path: str | os.PathLike[str]) -> Path:
    """``TRACE.diagnoses.jsonl``: the recorded diagnoses beside a trace (as :func:`labels_path`)."""
    return Path(str(trace_path) + ".diagnoses.jsonl")


def _columns(rows: list[Envelope]) -> pa.RecordBatch:
    cols: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    for e in rows:
        cols["v"].append(e.v)
        cols["id"].append(e.id)
        cols["ts"].append(float(e.ts))
        cols["job"].append(e.job)
        cols["node"].append(e.node)
        cols["source"].append(e.source)
        cols["kind"].append(e.kind)
        data = e.data if type(e.data) is dict else dict(e.data)
        cols["data"].append(orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY).decode())
    return pa.RecordBatch.from_pydict(cols, schema=SCHEMA)


class TraceWriter:
    """Streaming writer: ``with TraceWriter(path) as w: w.write(event)``; rows must come in time order.

    The file appears complete or not at all: it is written beside the target and renamed on a
    clean close, so a crash mid-write never leaves a truncated trace under the real name.
    """

    def __init__(self, path: str | os.PathLike[str], *, row_group_rows: int = ROW_GROUP_ROWS):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.with_name(self.path.name + ".part")
        self._rows = row_group_rows
        self._writer = pq.ParquetWriter(self._tmp, SCHEMA, compression="zstd")
        self._buf: list[Envelope] = []
        self._last_ts = float("-inf")
        self.count = 0

    def write(self, event: Envelope) -> None:
        if event.ts < self._last_ts:
            raise TraceError(f"{self.path}: event {self.count} ({event.id}) at ts {event.ts} is earlier than "
                             f"the one before ({self._last_ts}); traces are in time order")
        self._last_ts = event.ts
        self._buf.append(event)
        self.count += 1
        if len(self._buf) >= self._rows:
            self._flush()

    def _flush(self) -> None:
        if self._buf:
            self._writer.write_batch(_columns(self._buf), row_group_size=self._rows)
            self._buf = []

    def close(self) -> None:
        self._flush()
        self._writer.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        self._writer.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_trace(path: str | os.PathLike[str], events: Iterable[Envelope], *,
                row_group_rows: int = ROW_GROUP_ROWS) -> int:
    """Stream ``events`` (in time order) into a Parquet trace; returns the row count."""
    with TraceWriter(path, row_group_rows=row_group_rows) as writer:
        for event in events:
            writer.write(event)
    return writer.count


def _open(path: str | os.PathLike[str]) -> pq.ParquetFile:
    try:
        pf = pq.ParquetFile(path)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such trace") from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise TraceError(f"{path}: not a Parquet trace ({exc})") from None
    missing = [n for n in SCHEMA.names if n not in pf.schema_arrow.names]
    if missing:
        raise TraceError(f"{path}: not a faultlens trace (missing column(s) {', '.join(missing)})")
    return pf


def trace_rows(path: str | os.PathLike[str]) -> int:
    """Row count from the Parquet footer, without reading the data (progress bars)."""
    return _open(path).metadata.num_rows


def trace_batches(path: str | os.PathLike[str], *, batch_rows: int = ROW_GROUP_ROWS) -> Iterator[pa.RecordBatch]:
    """The trace's rows as Arrow batches of the envelope columns, unchecked (streams.replay checks
    them a batch at a time and sends them without building envelopes)."""
    yield from _open(path).iter_batches(batch_size=batch_rows, columns=list(SCHEMA.names))


def iter_trace(path: str | os.PathLike[str], *, batch_rows: int = ROW_GROUP_ROWS) -> Iterator[Envelope]:
    """The trace's envelopes in file order, one batch in memory at a time.

    A row that is not a valid envelope raises :class:`TraceError` naming the row number and the
    bad field: a trace is a test fixture or evidence, so silently skipping a row would lie.
    """
    pf = _open(path)
    row = 0
    for batch in pf.iter_batches(batch_size=batch_rows, columns=list(SCHEMA.names)):
        cols = batch.to_pydict()
        for i in range(batch.num_rows):
            try:
                text = cols["data"][i]
                # A null refused by the envelope's own check, naming the field.
                data: Any = orjson.loads(text) if text is not None else None
                yield Envelope(
                    v=cols["v"][i], id=cols["id"][i], ts=cols["ts"][i], job=cols["job"][i],
                    node=cols["node"][i], source=cols["source"][i], kind=cols["kind"][i], data=data,
                )
            except orjson.JSONDecodeError as exc:
                raise TraceError(f"{path}: row {row}: data is not valid JSON ({exc})") from None
            except InvalidEvent as exc:
                raise TraceError(f"{path}: row {row}: {exc}") from None
            row += 1


# --- labels ---------------------------------------------------------------------------------
def _check_label(label: Any, where: str) -> dict[str, Any]:
    if not isinstance(label, Mapping):
        raise TraceError(f"{where}: a label must be a JSON object")
    missing = [k for k in LABEL_KEYS if k not in label]
    if missing:
        raise TraceError(f"{where}: label is missing {', '.join(missing)}")
    return dict(label)


def write_labels(path: str | os.PathLike[str], labels: Iterable[Mapping[str, Any]]) -> Path:
    """Write labels as JSON lines to ``path`` (pass :func:`labels_path` of the trace)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as f:
        for i, label in enumerate(labels):
            f.write(orjson.dumps(_check_label(label, f"{target}: label {i}")) + b"\n")
    return target


def read_labels(trace_path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The ground truth beside a trace: ``TRACE.labels.jsonl``, else ``<stem>.labels.jsonl``."""
    trace = Path(trace_path)
    candidates = [labels_path(trace), trace.with_name(trace.stem + ".labels.jsonl")]
    for path in candidates:
        if path.exists():
            break
    else:
        raise TraceError(f"no labels for {trace} (looked for {', '.join(str(c) for c in candidates)})")
    return [_check_label(obj, where) for where, obj in json_lines(path, TraceError)]


# --- recorded diagnoses -----------------------------------------------------------------------
def write_diagnoses(path: str | os.PathLike[str], diagnoses: Iterable[Diagnosis]) -> Path:
    """Write diagnoses as JSON lines (the bus's encoding) to ``path`` (pass :func:`diagnoses_path`)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as f:
        for d in diagnoses:
            f.write(d.encode() + b"\n")
    return target


def read_diagnoses(trace_path: str | os.PathLike[str]) -> list[Diagnosis]:
    """The diagnoses recorded beside a trace (``TRACE.diagnoses.jsonl``); [] when none were recorded."""
    path = diagnoses_path(trace_path)
    if not path.exists():
        return []
    out = []
    for where, obj in json_lines(path, TraceError):
        try:
            out.append(Diagnosis.from_dict(obj))
        except InvalidEvent as exc:
            raise TraceError(f"{where}: {exc}") from None
    return out
