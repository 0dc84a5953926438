"""Load a trace into a history without a broker: its events, its labels and (optionally) the
diagnoses the engine produces over it, with the engine settings the caller names (the same flags
as `faultlens diagnose`, so an offline load reproduces a live run).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.events import trace
from faultlens.history.schema import HistoryError
from faultlens.history.sink import Batch, HistorySink, Sampling, build_batch

log = logging.getLogger(__name__)


@dataclass
class LoadStats:
    events: int = 0
    sampled_out: int = 0
    diagnoses: int = 0
    labels: int = 0
    rejected: int = 0
    engine_errors: int = 0
    truncated: bool = False  # the trace stopped being readable part way; what came before is stored
    inserted: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"events": self.events, "sampled_out": self.sampled_out, "diagnoses": self.diagnoses,
                "labels": self.labels, "rejected": self.rejected, "engine_errors": self.engine_errors,
                "truncated": self.truncated, "inserted": self.inserted, "notes": self.notes}


def _labels(path: Path) -> tuple[list[Any], str | None]:
    try:
        return list(trace.read_labels(path) or ()), None
    except FileNotFoundError:
        return [], None
    except (ValueError, OSError) as exc:
        return [], f"labels not loaded: {exc}"


class _Diagnoser:
    """Feeds events to the engine in trace order (it keeps event time itself) and counts failures."""

    def __init__(self, engine: Engine, stats: LoadStats):
        self.engine = engine
        self.stats = stats

    def _safe(self, fn: Callable[[], Iterable[Any] | None]) -> list[Any]:
        try:
            return list(fn() or ())
        except Exception as exc:  # noqa: BLE001 - an event the engine refuses (InvalidEvent) or chokes on must not stop the load
            self.stats.engine_errors += 1
            if self.stats.engine_errors <= 5:
                log.warning("diagnosis engine: %s: %s", type(exc).__name__, exc)
            return []

    def feed(self, event: Any) -> list[Any]:
        return self._safe(lambda: self.engine.process(event))

    def finish(self) -> list[Any]:
        return self._safe(self.engine.flush)


def load_trace(path: str | Path, sink: HistorySink, *, sampling: Sampling = Sampling(), diagnose: bool = True,
               engine_config: EngineConfig | None = None, batch_size: int = 5000,
               progress: bool = True) -> LoadStats:
    """Write a trace's events (sampled), labels and diagnoses (an engine with ``engine_config``;
    with ``diagnose`` False, those recorded beside the trace, if any) into ``sink``."""
    path = Path(path)
    if not path.exists():
        raise HistoryError(f"trace {path} does not exist")
    try:
        total = trace.trace_rows(path)
    except ValueError as exc:  # TraceError: not a Parquet trace, missing columns
        raise HistoryError(str(exc)) from None
    stats = LoadStats()
    labels, note = _labels(path)
    if note:
        stats.notes.append(note)
    diagnoser = _Diagnoser(Engine(engine_config or EngineConfig()), stats) if diagnose else None
    recorded: list[Any] = []
    if not diagnose:  # what the live pipeline said, when `faultlens record` kept it (TRACE.diagnoses.jsonl)
        try:
            recorded = trace.read_diagnoses(path)
        except (ValueError, OSError) as exc:
            stats.notes.append(f"recorded diagnoses not loaded: {exc}")

    def write(items: list[Any], labels: Iterable[Any] = ()) -> None:
        batch: Batch = build_batch(items, sampling, labels=labels)
        stats.sampled_out += batch.sampled_out
        stats.rejected += len(batch.rejected)
        for rej in batch.rejected[:5]:
            log.warning("not stored: %s", rej.reason)
        for table, n in sink.write(batch).items():
            stats.inserted[table] = stats.inserted.get(table, 0) + n

    from tqdm import tqdm

    pending: list[Any] = []
    diagnosis_ids: set[str] = set()  # the engine re-emits a folded diagnosis as its count grows
    try:
        with tqdm(trace.iter_trace(path), total=total, desc=f"loading {path.name}", unit="ev",
                  disable=not progress, mininterval=0.5) as bar:
            for event in bar:
                stats.events += 1
                pending.append(event)
                if diagnoser is not None:
                    found = diagnoser.feed(event)
                    diagnosis_ids.update(d.id for d in found)
                    pending.extend(found)
                if len(pending) >= batch_size:
                    write(pending)
                    pending = []
    except (trace.TraceError, OSError) as exc:
        # A truncated or corrupt trace: keep what was read, say where it stopped.
        stats.truncated = True
        stats.notes.append(f"trace read stopped after {stats.events} events: {exc}")
        log.error("trace %s: %s", path, exc)
    if diagnoser is not None:
        found = diagnoser.finish()
        diagnosis_ids.update(d.id for d in found)
        pending.extend(found)
    pending.extend(recorded)
    stats.diagnoses = len(diagnosis_ids) + len(recorded)
    write(pending, labels)
    stats.labels = len(labels)
    return stats
