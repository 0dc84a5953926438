"""The node agent's heartbeat: `heartbeat`/`beat` every interval with the training pids and each source's status.

A missing beat is how a silent node is detected (docs/design.md §3, `node_silent`); the `sources` map
tells a dead NVML sampler or a stuck log follower from a healthy node with nothing to say, and
``health`` (collectors/agent_health.py) says what the agent itself sees and keeps: sampler lag,
the last NVML call that answered, GPUs stuck in a call, follower positions, spool depth and
drops, and ``blind``, what it cannot see right now. Nothing in a beat waits on NVML, py-spy or
Kafka: every number is read from counters the sources keep.
``unranked_pids`` names the training processes whose rank the agent cannot read (its
``--rank-env`` misses the trainer's variable), before any capture needs their stacks placed.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping

from faultlens.collectors.stack_capture import TrainingProcess, unranked_pids
from faultlens.events.beat import beat_event
from faultlens.events.envelope import Envelope

log = logging.getLogger(__name__)


class HeartbeatSource:
    """Agent source; ``statuses`` and ``pids`` (or ``processes``) are callables so each beat reads
    them fresh. ``processes`` gives the training processes with their ranks, one discovery for
    both the pids and the ``unranked_pids`` of the beat."""

    name = "heartbeat"

    def __init__(self, *, job: str, node: str, interval_s: float, publish: Callable[[Envelope], Any],
                 statuses: Callable[[], Mapping[str, str]], pids: Callable[[], list[int]] | None = None,
                 processes: Callable[[], list[TrainingProcess]] | None = None,
                 health: Callable[[], Mapping[str, Any]] | None = None):
        if (pids is None) == (processes is None):
            raise ValueError("HeartbeatSource needs exactly one of pids or processes")
        self.job = job
        self.node = node
        self.interval_s = interval_s
        self.publish = publish
        self.statuses = statuses
        self.pids = pids
        self.processes = processes
        self.health = health
        self.seq = 0
        self._unranked: list[int] = []
        # Process discovery reads /proc, and reading a wedged process's /proc entries can block
        # (its mmap lock held in the kernel): it runs in a thread of its own, waited for briefly.
        self.discover_timeout_s = min(2.0, interval_s)
        self._discovery: threading.Thread | None = None
        self._found: tuple[list[int], list[int] | None] | None = None
        self._last_found: tuple[list[int], list[int] | None] = ([], None)
        self.stale_discoveries = 0
        # A beat may be asked for while the beat loop is in one (a caller wanting a beat now): the
        # discovery thread and the sequence number are shared, so beats are taken one at a time.
        self._beating = threading.Lock()

    def _discover(self) -> tuple[list[int], list[int] | None]:
        pids, processes = self.pids, self.processes
        if processes is None:  # then pids is given (the constructor takes exactly one)
            return list(pids() if pids is not None else ()), None
        procs = list(processes())
        unranked = unranked_pids(procs)
        if unranked != self._unranked and unranked:
            log.warning("training pid(s) %s carry no rank this agent can read: fix its --rank-env, or their "
                        "stacks cannot be placed in a hang", unranked)
        self._unranked = unranked
        return [p.pid for p in procs], unranked

    def _discover_bounded(self) -> tuple[list[int], list[int] | None, bool]:
        """(pids, unranked, stale): a discovery still stuck from an earlier beat is not started
        again, and one that takes longer than ``discover_timeout_s`` leaves the last answer."""
        if self._discovery is None or not self._discovery.is_alive():
            self._found = None

            def run() -> None:
                try:
                    self._found = self._discover()
                except Exception:  # process discovery failing must not stop the beat that says we are alive
                    self._found = ([], None)

            self._discovery = threading.Thread(target=run, name="heartbeat-discovery", daemon=True)
            self._discovery.start()
        self._discovery.join(self.discover_timeout_s)
        found = self._found
        if found is None:
            self.stale_discoveries += 1
            if self.stale_discoveries == 1 or self.stale_discoveries % 100 == 0:
                log.warning("finding the training processes takes over %.1fs (a process stuck in the kernel?); "
                            "beating with the last pids known", self.discover_timeout_s)
            return (*self._last_found, True)
        self._last_found = found
        return (*found, False)

    def beat(self, *, stopping: bool = False, cancel: threading.Event | None = None) -> Envelope:
        """One beat; ``stopping``: the agent's last, on a deliberate stop (a dead machine says no
        such thing, so the silence that follows is not judged a machine's, diagnosis/rules/liveness.py).
        ``cancel``: the beat loop's stop; a beat it overtook is taken but not sent."""
        with self._beating:
            return self._beat(stopping, cancel)

    def _beat(self, stopping: bool, cancel: threading.Event | None) -> Envelope:
        pids, unranked, stale = self._discover_bounded()
        health = None
        if self.health is not None:
            try:
                health = self.health()
            except Exception:  # a broken health report must not stop the beat that says we are alive
                log.exception("agent health report failed; beating without it")
        if stale and health is not None:
            health = {**health, "pids_stale": True}
        event = beat_event(job=self.job, node=self.node, seq=self.seq, pids=pids, sources=self.statuses(),
                           unranked_pids=unranked, health=health, stopping=stopping)
        if cancel is not None and cancel.is_set():
            # The agent began stopping while this beat was taken: its sources may read "stopped"
            # (they stop on the same event), which is no blindness. The last beat says the stop.
            return event
        self.seq += 1
        self.publish(event)
        return event

    def run(self, stop: threading.Event) -> None:
        # Beats keep a fixed cadence: the next one is due one interval after the last was due,
        # not after the last one finished (a slow beat does not drift the schedule).
        due = time.monotonic()
        while not stop.is_set():
            self.beat(cancel=stop)
            due += self.interval_s
            now = time.monotonic()
            if due < now:
                due = now
            if stop.wait(due - now):
                return
