"""`faultlens run`'s heartbeat: the node's `heartbeat`/`beat` with its live workers' pids, so a job
with no node agent is still judged by the liveness and hang rules.

A hang is told from a job whose steps stopped while its machines still beat (diagnosis/hang/detector.py):
without any beat, a job that stops stepping is indistinguishable from one whose telemetry was lost,
and nothing is localised. The launcher knows its workers and whether they live, which is what a
beat says (collectors.heartbeat.beat_event, the node agent's own event). The last beat, when the
agent leaves on purpose, says ``stopping``: the node's silence after it is that stop.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Callable

from faultlens.events.beat import beat_event
from faultlens.events.envelope import Envelope

log = logging.getLogger(__name__)

SOURCE = "faultlens-run"  # the beat's `sources` entry: which sender beats for the node


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunHeartbeat(threading.Thread):
    """Beats every ``interval_s`` from its own thread until :meth:`stop` (which sends the last,
    ``stopping``, beat). ``pids()`` gives the workers started last; the beat lists those alive."""

    def __init__(self, *, job: str, node: str, interval_s: float, pids: Callable[[], list[int]],
                 send: Callable[[Envelope], None]):
        super().__init__(name="faultlens-run-heartbeat", daemon=True)
        self.job, self.node, self.interval_s = job, node, interval_s
        self.pids, self.send = pids, send
        self.seq = 0
        self._stop = threading.Event()

    def beat(self, stopping: bool = False) -> None:
        self.seq += 1
        live = [p for p in self.pids() if alive(p)]
        try:
            self.send(beat_event(job=self.job, node=self.node, seq=self.seq, pids=live, sources={SOURCE: "ok"},
                                 stopping=stopping))
        except Exception as exc:  # noqa: BLE001 - a beat is a report; the job goes on
            log.debug("heartbeat not sent: %r", exc)

    def run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.beat()

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self.beat(stopping=True)
