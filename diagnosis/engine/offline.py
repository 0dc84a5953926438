"""The engine over a finite input (a trace, a list of events): ``faultlens analyze``, ``check``, the
benches. Each diagnosis's final version, in the order first emitted; dead letters counted and told."""

from __future__ import annotations

import logging

from faultlens.diagnosis.engine.config import EngineConfig
from faultlens.diagnosis.engine.core import Engine
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope, InvalidEvent

log = logging.getLogger(__name__)


def _engine(config: EngineConfig | None = None) -> Engine:
    return Engine(config)


def analyze(events, engine: Engine | None = None, on_dead=None) -> list[Diagnosis]:
    """Run the engine over an iterable of events; the final version of each diagnosis (by id),
    in the order first emitted. ``on_dead(event, reason)`` hears about dead letters."""
    engine = engine or _engine()
    latest: dict[str, Diagnosis] = {}
    for event in events:
        try:
            found = engine.process(event, hold=True)  # a job's plain steps taken as runs (Engine.process)
        except InvalidEvent as exc:
            for d in engine.release():
                latest[d.id] = d
            engine.stats["dead_letters"] += 1
            if on_dead is not None:
                on_dead(event, str(exc))
            continue
        for d in found:
            latest[d.id] = d
    for d in engine.flush():
        latest[d.id] = d
    return list(latest.values())


def analyze_trace(path, *, config: EngineConfig | None = None, progress: bool = False) -> tuple[list[Diagnosis], Engine]:
    """:func:`analyze` over a Parquet trace (events.trace), with a progress bar on stderr if asked."""
    from faultlens.events.trace import iter_trace, trace_rows

    engine = _engine(config)
    events = iter_trace(path)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=trace_rows(path), unit="ev", unit_scale=True, desc="analyze", leave=False)

        def counted(it):
            for i, e in enumerate(it, 1):
                if i % 4096 == 0:
                    bar.update(4096)
                yield e

        events = counted(events)

    def dead(event: Envelope, reason: str) -> None:
        log.warning("dead letter: %s/%s event %s: %s", event.source, event.kind, event.id, reason)

    try:
        found = analyze(events, engine, on_dead=dead)
    finally:
        if bar is not None:
            bar.close()
    return found, engine
