"""The node agent's heartbeat: `heartbeat`/`beat` every interval with the training pids and each source's status.

A missing beat is how a silent node is detected (DESIGN.md §3, `node_silent`); the `sources` map
tells a dead NVML sampler or a stuck log follower from a healthy node with nothing to say.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Mapping

from streams.events import Envelope


def beat_event(*, job: str, node: str, seq: int, pids: list[int], sources: Mapping[str, str],
               ts: float | None = None) -> Envelope:
    return Envelope(
        ts=time.time() if ts is None else ts,
        job=job,
        node=node,
        source="heartbeat",
        kind="beat",
        data={"seq": seq, "pids": sorted(pids), "sources": dict(sources)},
    )


class HeartbeatSource:
    """Agent source; ``statuses`` and ``pids`` are callables so each beat reads them fresh."""

    name = "heartbeat"

    def __init__(self, *, job: str, node: str, interval_s: float, publish: Callable[[Envelope], Any],
                 statuses: Callable[[], Mapping[str, str]], pids: Callable[[], list[int]]):
        self.job = job
        self.node = node
        self.interval_s = interval_s
        self.publish = publish
        self.statuses = statuses
        self.pids = pids
        self.seq = 0

    def beat(self) -> Envelope:
        try:
            pids = list(self.pids())
        except Exception:  # process discovery failing must not stop the beat that says we are alive
            pids = []
        event = beat_event(job=self.job, node=self.node, seq=self.seq, pids=pids, sources=self.statuses())
        self.seq += 1
        self.publish(event)
        return event

    def run(self, stop: threading.Event) -> None:
        # Beats keep a fixed cadence: the next one is due one interval after the last was due,
        # not after the last one finished (a slow beat does not drift the schedule).
        due = time.monotonic()
        while not stop.is_set():
            self.beat()
            due += self.interval_s
            now = time.monotonic()
            if due < now:
                due = now
            if stop.wait(due - now):
                return
