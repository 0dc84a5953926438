"""The simulated cluster driven live: its events go to the broker at ``speed``× simulated time and
it obeys the commands that come back, screened exactly as a real trainer screens them; its ranks
ack them on `train`/`command_ack` as real trainer hooks do (faultlens.demo.hook_acks).

``speed`` 0 runs in lockstep with the pipeline instead: after each slice of simulated time the
driver waits until the consumers have read what it published and the commands they sent have
arrived, so the run is as fast as the pipeline allows and never outruns it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable

from faultlens.demo.hook_acks import SimulatedHookAcks
from faultlens.demo.reproductions import is_reproduction, run_simulated_reproduction
from faultlens.demo.state import CommandRecord, DemoState
from faultlens.events.command import Command
from faultlens.events.command_screen import CommandScreen, Screened
from faultlens.events.signing import VerifyKeys
from faultlens.simulator import SimulatedCluster
from faultlens.streams.command_listener import CommandListener
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Producer

log = logging.getLogger(__name__)

SLICE_WALL_S = 0.1  # paced runs publish this often
LOCKSTEP_SLICE_S = 5.0  # simulated seconds per slice in lockstep
# How often the lockstep asks whether the pipeline caught up: a slice settles in ~0.15 s, and the
# question reads a few counters; at 20 ms it added 10 ms a slice on average.
LOCKSTEP_CHECK_S = 0.005
CRASH_WAIT_S = 60.0  # like the launcher's --crash-wait: a stopped job with no command restarts in place


class SimListener(CommandListener):
    """The real listener, judging expiry by the simulated clock: the cluster lives on it."""

    sim_clock: Callable[[], float] = time.time
    on_message: Callable[[bytes | None, float], None] | None = None  # every message, before it is screened

    def dispatch(self, raw: bytes | None, now: float | None = None) -> Screened:
        now = self.sim_clock() if now is None else now
        if self.on_message is not None:
            self.on_message(raw, now)  # first: the acks answer the cluster as it was when the command came
        return super().dispatch(raw, now)


class SimDriver:
    def __init__(self, settings: KafkaSettings, cluster: SimulatedCluster, duration_s: float, speed: float,
                 keys: VerifyKeys, state: DemoState, *, settled: Callable[[int], bool] | None = None):
        if speed < 0:
            raise ValueError(f"speed must be >= 0 (0: lockstep with the pipeline), got {speed}")
        self.settings = settings
        self.cluster = cluster
        self.duration_s = duration_s
        self.speed = speed
        self.state = state
        self.settled = settled  # lockstep: given events published so far, whether the pipeline caught up
        # Commands to obey, and (raw, now) messages for the ranks to ack, in the order they came.
        self._inbox: queue.Queue[Command | tuple[bytes | None, float]] = queue.Queue()
        self.hooks = SimulatedHookAcks(keys, cluster.cfg.job)
        self.listener = SimListener(settings, CommandScreen(keys, cluster.cfg.job),
                                    on_command=self._inbox.put, on_refused=self._refused)
        self.listener.sim_clock = lambda: self.cluster.now
        self.listener.on_message = lambda raw, now: self._inbox.put((raw, now))
        self.stop_event = threading.Event()
        self.published = 0
        self.applied = 0
        self.acks = 0

    def _refused(self, screened: Screened) -> None:
        self.state.on_command(CommandRecord(screened.command, False, screened.reason, time.time(), self.cluster.now))

    def start_listener(self, timeout: float = 30.0) -> bool:
        self.listener.start()
        return self.listener.ready.wait(timeout)

    def run(self) -> None:
        cfg = self.cluster.cfg
        start, end = cfg.start_ts, cfg.start_ts + self.duration_s
        self.state.sim_start, self.state.sim_end = start, end
        self.state.slots = list(self.cluster.slots)
        wall0 = time.monotonic()
        t = start
        with Producer(self.settings) as producer:
            while t < end and not self.stop_event.is_set():
                self._obey()
                step = LOCKSTEP_SLICE_S if self.speed == 0 else max(0.5, self.speed * SLICE_WALL_S)
                t = min(end, t + step)
                for event in self.cluster.advance(t):
                    producer.send_event(event)
                    self.published += 1
                producer.flush()
                self._launcher_restarts()
                self.state.sim_now, self.state.published = t, self.published
                if self.speed > 0:
                    wait = wall0 + (t - start) / self.speed - time.monotonic()
                    if wait > 0:
                        self.stop_event.wait(wait)
                elif self.settled is not None:
                    self._lockstep(self.settled)
            self._obey()
            tail = self.cluster.advance(self.cluster.now + 0.001)  # whatever the last commands emitted
            for event in tail:
                producer.send_event(event)
            self.published += len(tail)
            producer.flush()
        self.state.published = self.published

    def _lockstep(self, settled: Callable[[int], bool], limit_s: float = 5.0) -> None:
        deadline = time.monotonic() + limit_s
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            self._obey()  # a command that arrives while we wait is part of catching up
            if settled(self.published):
                return
            time.sleep(LOCKSTEP_CHECK_S)
        self.state.lockstep_timeouts += 1

    def _obey(self) -> None:
        while True:
            try:
                cmd = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(cmd, tuple):
                self._ack(*cmd)
                continue
            before = list(self.cluster.slots)
            if is_reproduction(cmd):
                run_simulated_reproduction(self.cluster, cmd)  # the launcher reproduces, then restarts the job
            self.cluster.apply(cmd)
            self.applied += 1
            gone = [n for n in before if n not in self.cluster.slots]
            if gone:
                self.state.on_evicted(gone, self.cluster.slots)
            if cmd.action in ("evict", "restart", "reattempt", "rollback"):
                self.state.on_restarted()
            self.state.on_command(CommandRecord(cmd, True, "obeyed", time.time(), self.cluster.now))

    def _ack(self, raw: bytes | None, now: float) -> None:
        """Every rank's answer to one message, from the node that holds it, on the simulated clock."""
        placement = {rank: self.cluster.node_of(rank) for rank in range(self.cluster.world)}
        for node, data in self.hooks.acks(raw, now, placement, alive=self.cluster.state != "down"):
            self.cluster.emit_at(self.cluster.now, node, "train", "command_ack", data)
            self.acks += 1

    def _launcher_restarts(self) -> None:
        """A job stopped by an episode that no command ended restarts in place after CRASH_WAIT_S,
        as the real launcher does; without it one missed command would stall the rest of the run."""
        for ep in list(self.cluster.episodes.values()):
            if not ep.ended and ep.stops_job and self.cluster.now > ep.end + CRASH_WAIT_S:
                log.info("simulated launcher: %s episode %d got no command; restarting in place", ep.planned.fault, ep.id)
                self.cluster.end_episode(ep.id, swap=[], reason="launcher restart after crash wait (no command)")
                self.state.launcher_restarts += 1

    def stop(self) -> None:
        self.stop_event.set()

    def close(self) -> None:
        self.listener.stop()
        self.listener.join(5)
