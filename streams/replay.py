"""Publish events to their topics at real speed, k× speed or as fast as possible.

The replayer (``faultlens replay``) and the simulator's ``--publish`` share this: events go to
``streams.topics.topic_for(event)`` keyed by node (job-level records by job), in trace order.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from streams.admin import ensure_topics
from streams.config import KafkaSettings
from streams.events import Envelope
from streams.producer import Producer
from streams.trace import iter_trace, trace_rows

log = logging.getLogger(__name__)

FLUSH_EVERY = 5_000  # bound the producer's buffer and surface delivery errors early


def paced(events: Iterable[Envelope], speed: float, *, clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> Iterator[Envelope]:
    """Yield each event no earlier than its offset from the first event, divided by ``speed``.

    ``speed`` 1 is real time, 10 is ten times faster, 0 is as fast as possible. Pacing follows
    event time, so the gaps of a trace (a hang, a silent node) are kept at every speed.
    """
    if speed < 0:
        raise ValueError(f"speed must be >= 0 (0: as fast as possible), got {speed}")
    first_ts: float | None = None
    start = clock()
    for event in events:
        if speed > 0:
            if first_ts is None:
                first_ts = event.ts
            wait = start + (event.ts - first_ts) / speed - clock()
            if wait > 0:
                sleep(wait)
        yield event


@dataclass
class PublishStats:
    events: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        rate = self.events / self.seconds if self.seconds > 0 else None
        return {"events": self.events, "seconds": round(self.seconds, 3), "events_per_s": round(rate, 1) if rate else None}


def publish(settings: KafkaSettings, events: Iterable[Envelope], speed: float = 0.0,
            progress: Callable[[int], None] | None = None) -> PublishStats:
    """Send ``events`` to their topics, paced; raises DeliveryError if the broker refused any."""
    ensure_topics(settings)
    stats = PublishStats()
    t0 = time.perf_counter()
    with Producer(settings) as producer:
        for event in paced(events, speed):
            producer.send_event(event)
            stats.events += 1
            if stats.events % FLUSH_EVERY == 0:
                producer.flush()
                if progress:
                    progress(FLUSH_EVERY)
        producer.flush()
        if progress:
            progress(stats.events % FLUSH_EVERY)
    stats.seconds = time.perf_counter() - t0
    return stats


def replay_trace(settings: KafkaSettings, path: str | os.PathLike[str], speed: float = 0.0,
                 show_progress: bool = True) -> PublishStats:
    """Publish a trace file back to its topics (with a progress bar on stderr)."""
    from tqdm import tqdm

    total = trace_rows(path)
    with tqdm(total=total, unit="ev", desc="replay", disable=not show_progress or None, leave=False) as bar:
        stats = publish(settings, iter_trace(path), speed, bar.update)
    log.info("replayed %d events from %s in %.1f s", stats.events, path, stats.seconds)
    return stats
