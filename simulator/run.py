"""A whole simulated run: choose the fault plan, drive the cluster clock, stream the events.

Default sizing: without ``faults`` a run gets one fault per :data:`FAULT_EVERY_S` seconds;
without ``duration`` it lasts as long as its faults need (job-wide episodes back to back, see
:func:`simulator.plan.min_duration`). A 500-fault trace is ~12 simulated hours (job-wide
episodes take ~90 s each plus a 20 s gap; node-local ones overlap them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from faultlens.events.envelope import Envelope
from faultlens.simulator.cluster import SimulatedCluster
from faultlens.simulator.config import SimConfig
from faultlens.simulator.drifts import Drift, add_drifts
from faultlens.simulator.plan import FaultPlan, random_plan

FAULT_EVERY_S = 400.0
DEFAULT_DURATION_S = 3600.0
CHUNK_S = 60.0  # advance() window: bounds memory, and progress bars move once per chunk


def plan_for(config: SimConfig, faults: int | None = None, duration: float | None = None,
             every_class: bool = True) -> tuple[FaultPlan, float]:
    """A random plan (seeded from the config) and the run's duration in seconds."""
    if faults is None:
        duration = DEFAULT_DURATION_S if duration is None else duration
        faults = int(duration // FAULT_EVERY_S)
    if faults < 0:
        raise ValueError(f"--faults must be >= 0, got {faults}")
    if faults == 0:
        return FaultPlan(), DEFAULT_DURATION_S if duration is None else duration
    rng = np.random.default_rng([config.seed, 0xFA])
    return random_plan(faults, duration, config.nodes, rng, every_class)


@dataclass
class SimRun:
    """Iterate :meth:`events` once; ``labels`` is complete when the iteration ends."""

    config: SimConfig
    plan: FaultPlan
    duration: float
    drifts: tuple[Drift, ...] = ()  # slow gray failures beside the plan (simulator.drifts)
    cluster: SimulatedCluster = field(init=False)
    count: int = 0

    def __post_init__(self) -> None:
        self.plan.check()
        self.cluster = SimulatedCluster(self.config, self.plan)
        add_drifts(self.cluster, self.drifts, self.duration)

    @property
    def labels(self) -> list[dict[str, Any]]:
        return self.cluster.labels

    def events(self, chunk_s: float = CHUNK_S, progress=None, respond=None) -> Iterator[Envelope]:
        """The run's events in time order. ``respond(batch) -> commands`` closes the loop: the
        commands (capture_stacks, evict, ...) are applied as the cluster's agents and launcher
        would, so the answers appear in the next chunks, as in a trace recorded from a live
        cluster. Keep ``chunk_s`` small (about a second) when responding."""
        start = self.config.start_ts
        end = start + self.duration
        t = start
        while t < end:
            nxt = min(end, t + chunk_s)
            batch = self.cluster.advance(nxt)
            self.count += len(batch)
            yield from batch
            if respond is not None:
                for command in respond(batch):
                    self.cluster.apply(command)
            if progress is not None:
                progress(nxt - t)
            t = nxt


def simulate(config: SimConfig, plan: FaultPlan | None = None, duration: float | None = None,
             faults: int | None = None, every_class: bool = True, drifts: tuple[Drift, ...] = ()) -> SimRun:
    """A run ready to stream: the given plan, or a random one of ``faults`` faults, plus ``drifts``."""
    if plan is None:
        plan, duration = plan_for(config, faults, duration, every_class)
    elif duration is None:
        duration = max([plan.end() + 60.0, *(d.t + 60.0 for d in drifts)])
    return SimRun(config, plan, float(duration), tuple(drifts))
