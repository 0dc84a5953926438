"""What the simulated job's ranks answer to a capture_stacks request: each rank's py-spy dump
(or, on a node where capture is broken, the error), and with the trainer hook its faulthandler
stacks and Flight Recorder dump, drawn from the stack state the active episode gives each rank.

:class:`StackAnswers` is a mixin of :class:`simulator.cluster.SimulatedCluster`, as
:class:`simulator.telemetry.PeriodicTelemetry` is, and works on its state (``episodes``, the
clock of the step in progress, ``stack_broken``) and its placing of a rank's events.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from faultlens.events.flight_recorder import RECORDER_KIND, bound, recorder_payload
from faultlens.events.topology import Topology
from faultlens.simulator import recorder, stacks
from faultlens.simulator.config import SimConfig
from faultlens.simulator.effects import Episode


class StackAnswers:
    """The ranks' answers to a stack capture, each read from the states when the rank answers."""

    # The cluster's state it reads (SimulatedCluster.__init__ sets each).
    cfg: SimConfig
    world: int
    topology: Topology
    episodes: dict[int, Episode]
    step: int
    step_started: float
    proc_first_step: int
    stack_broken: set[str]

    # The cluster's own, which the answers call.
    def rank_event_at(self, ts: float, rank: int, source: str, kind: str, episode: int,
                      data: Callable[[], dict[str, Any]]) -> None:
        raise NotImplementedError

    def compute_factors(self, t: float) -> dict[int, float]:
        raise NotImplementedError

    def local(self, rank: int) -> int:
        raise NotImplementedError

    def pid(self, rank: int) -> int:
        raise NotImplementedError

    def node_of(self, rank: int) -> str:
        raise NotImplementedError

    def stack_states(self) -> dict[int, str]:
        """What each rank is doing now, for a capture_stacks answer: the active episode decides."""
        for ep in self.episodes.values():
            if not ep.ended and "stack_states" in ep.extra:
                return ep.extra["stack_states"]
        healthy = {r: ("grad_sync" if r % 3 else "compute") for r in range(self.world)}
        # A slow drift shows in a snapshot only now and then (simulator.drifts): it never hides a
        # crash or hang episode's stacks.
        for ep in self.episodes.values():
            if not ep.ended and "stack_states_fn" in ep.extra:
                return ep.extra["stack_states_fn"](healthy)
        return healthy

    def stack_round(self, ts: float, states: dict[int, str], request_id: str, episode: int = -1) -> None:
        """Every rank's agent answers a capture request: a py-spy dump, or on a node where capture
        is broken (py-spy missing, ptrace denied) the error, with ``ok: false``. With the trainer
        hook (``flight_recorder``), every rank also answers from its listener thread at once, as
        trainer_hooks.hook does: its faulthandler stacks, then its Flight Recorder dump."""
        hooked = self.cfg.flight_recorder
        if hooked:
            topo = self.topology  # the processes asked, even if a node is swapped before they answer
            names = recorder.group_names(topo)
            clock = recorder.Clock(self.step_started, self.cfg.step_time_s, self.step - self.proc_first_step,
                                   self.compute_factors(ts))
        for rank in range(self.world):
            self.rank_event_at(ts + 0.05 * self.local(rank), rank, "stack", "stack_dump", episode,
                               functools.partial(self._py_spy, rank, states, request_id))
            if hooked:
                t = ts + 0.01 + 0.001 * self.local(rank)
                self.rank_event_at(t, rank, "stack", "stack_dump", episode,
                                   functools.partial(self._faulthandler, rank, states, request_id))
                self.rank_event_at(t + 0.0005, rank, "stack", RECORDER_KIND, episode, functools.partial(
                    self._recorder, rank, topo, states, clock, names, request_id))

    # A rank's answers, read from ``states`` when the rank answers (not when it was asked).
    def _py_spy(self, rank: int, states: dict[int, str], request_id: str) -> dict[str, Any]:
        return self._dump(rank, states[rank], request_id)

    def _faulthandler(self, rank: int, states: dict[int, str], request_id: str) -> dict[str, Any]:
        return {"rank": rank, "pid": self.pid(rank), "dump": stacks.faulthandler_dump(self.pid(rank), states[rank]),
                "request_id": request_id, "tool": "faulthandler"}

    def _recorder(self, rank: int, topo: Topology, states: dict[int, str], clock: recorder.Clock,
                  names: dict[tuple[str, int], str], request_id: str) -> dict[str, Any]:
        dump = bound(recorder.dump_json(topo, rank, states, clock, self.cfg.recorder_buffer, names))
        if dump is None:  # the simulated recorder writes JSON: a None here is a simulator bug
            raise ValueError(f"rank {rank}: the simulated Flight Recorder dump is not JSON")
        return recorder_payload(rank, self.pid(rank), dump, request_id)

    def _dump(self, rank: int, state: str, request_id: str) -> dict[str, Any]:
        node = self.node_of(rank)
        if node in self.stack_broken:
            why = ("py-spy: command not found" if sum(map(ord, node)) % 2 == 0 else
                   "Error: Failed to attach to process: Operation not permitted (os error 1) (ptrace_scope 1)")
            return {"rank": rank, "pid": self.pid(rank), "dump": why, "request_id": request_id, "tool": "py-spy", "ok": False}
        return {"rank": rank, "pid": self.pid(rank), "dump": stacks.py_spy_dump(self.pid(rank), state),
                "request_id": request_id, "tool": "py-spy"}
