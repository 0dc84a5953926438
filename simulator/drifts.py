"""Slow gray failures: drifts that stay inside a single-threshold rule's noise band for a long time.

What degrading machines look like before anything breaks (no Xid, no throttle flag, no log line):

* ``gpu_sag``: one GPU's SM clocks and power sag together over ``ramp_s`` (30 minutes) and stay
  down (a failing voltage regulator or power stage holds the GPU below its boost point without
  any throttle reason NVML would report). Its rank computes slower in proportion, and since a
  synchronous job waits for its slowest rank, the whole job slows a little.
* ``compute_creep``: every rank of a node computes ``rate_per_h`` (3 %) slower per hour, with no
  GPU-side cue (host-side wear: memory bandwidth, a CPU stuck at a lower frequency, a slowly
  filling page cache).
* ``nic_decay``: one port's physical-layer errors climb over ``ramp_s`` (to ``errors_per_s``
  symbol errors, a quarter as many receive errors: under the counter rules' burst thresholds all
  along) while its share of the node's traffic falls by ``traffic_fall`` (NCCL shifts it to the
  other rails): a transceiver or cable going bad. Needs the simulated port counters (``net``).

The first two are labelled ``fail_slow`` (docs/design.md §9: a straggler found by comparison with its
peers), ``nic_decay`` is ``nic``; the label carries ``drift`` (the kind) beside the usual fields. Onset is the start of the drift,
when nothing is measurable yet: detection latency counts from there.

A stack snapshot shows the slow ranks apart from their peers only while they compute and the
peers already wait: a share of about ``slowdown × COMPUTE_SHARE`` of each step. So a capture
request during a drift answers with the straggler pattern only that often, and with the healthy
mix otherwise (a real py-spy round on a 3 % straggler is mostly indistinguishable from health).

They are not part of the random plan (:mod:`simulator.plan`): they last hours and overlap
everything, so a run asks for them explicitly (``simulate(..., drifts=(Drift(...),))``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from faultlens.simulator.effects import Effect, Episode
from faultlens.simulator.plan import PlannedFault, slot_of

DRIFT_KINDS = ("gpu_sag", "compute_creep", "nic_decay")
COMPUTE_SHARE = 0.8  # of a step spent computing (simulator.telemetry: compute is 0.8 of the step time)


@dataclass(frozen=True)
class Drift:
    kind: str
    t: float  # seconds after the trace start
    node: str  # slot name, n003 (faults are planned on slots, simulator.plan)
    gpu: int = 0  # gpu_sag: which GPU of the node
    ramp_s: float = 1800.0  # gpu_sag: from nothing to full depth
    clock_depth: float = 0.10  # gpu_sag: SM clocks lose this share at full depth
    power_depth: float = 0.10  # gpu_sag: and power this share
    slowdown: float = 0.08  # gpu_sag: its rank's compute time at full depth, +8 %
    rate_per_h: float = 0.03  # compute_creep: +3 % compute time per hour
    port: int = 0  # nic_decay: which port (mlx5_<port>) of the node
    errors_per_s: float = 1.2  # nic_decay: symbol errors per second at full strength (under the burst rule's 100/min)
    traffic_fall: float = 0.2  # nic_decay: the rail's share of traffic falls this much at full strength
    duration_s: float | None = None  # None: to the end of the run

    def __post_init__(self) -> None:
        if self.kind not in DRIFT_KINDS:
            raise ValueError(f"unknown drift {self.kind!r} (one of {', '.join(DRIFT_KINDS)})")
        if self.t < 0:
            raise ValueError(f"drift {self.kind} at t={self.t}: time must be >= 0")
        slot_of(self.node)
        for name in ("clock_depth", "power_depth"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"drift {self.kind}: {name} must be in [0, 1), got {getattr(self, name)}")
        if self.slowdown < 0 or self.rate_per_h < 0 or self.ramp_s <= 0:
            raise ValueError(f"drift {self.kind}: slowdown, rate_per_h must be >= 0 and ramp_s > 0")


def parse_drift(spec: str) -> Drift:
    """``KIND:NODE@SECONDS`` (``gpu_sag:n003@900``) → a Drift with the defaults; ValueError if malformed."""
    try:
        kind, rest = spec.split(":", 1)
        node, at = rest.split("@", 1)
        return Drift(kind.strip(), t=float(at), node=node.strip())
    except ValueError as exc:
        raise ValueError(f"--drift {spec!r}: expected KIND:NODE@SECONDS, e.g. gpu_sag:n003@900 ({exc})") from None


def add_drifts(sim, drifts: tuple[Drift, ...], run_s: float) -> None:
    """Schedule each drift on ``sim`` (a SimulatedCluster); it lasts to the run's end unless told."""
    for d in drifts:
        slot = slot_of(d.node)
        if slot >= sim.cfg.nodes:
            raise ValueError(f"drift {d.kind} at t={d.t:g}: node {d.node} is not in a {sim.cfg.nodes}-node job")
        if d.kind == "gpu_sag" and not 0 <= d.gpu < sim.cfg.gpus:
            raise ValueError(f"drift gpu_sag: gpu {d.gpu} outside 0..{sim.cfg.gpus - 1}")
        span = d.duration_s if d.duration_s is not None else max(1.0, run_s - d.t)
        if d.kind == "nic_decay" and (sim.cfg.net_interval_s <= 0 or not 0 <= d.port < sim.cfg.gpus):
            raise ValueError(f"drift nic_decay needs net telemetry and a port in 0..{sim.cfg.gpus - 1}")
        fault = "nic" if d.kind == "nic_decay" else "fail_slow"
        planned = PlannedFault(fault, d.t, slot, gpu=d.gpu if d.kind == "gpu_sag" else None, detail=d.kind)
        sim.call_at(sim.cfg.start_ts + d.t, lambda d=d, p=planned, span=span: _start(sim, d, p, span))


def _start(sim, d: Drift, planned: PlannedFault, span: float) -> None:
    injector = {"gpu_sag": _gpu_sag, "compute_creep": _compute_creep, "nic_decay": _nic_decay}[d.kind]
    sim.inject(planned, lambda s, p: injector(s, p, d, span))
    sim.labels[-1]["drift"] = d.kind


def _gpu_sag(sim, p: PlannedFault, d: Drift, span: float) -> Episode:
    node = sim.slots[p.slot]
    rank = p.slot * sim.cfg.gpus + d.gpu
    ep = sim.new_episode(p, nodes=[node], ranks=[rank], swap=[node],
                         detail=f"gpu_sag: GPU {d.gpu} SM clocks -{d.clock_depth:.0%} and power -{d.power_depth:.0%} "
                                f"over {d.ramp_s / 60:.0f} min, no throttle flag; its rank computes "
                                f"+{d.slowdown:.0%} at full depth")
    ep.end = sim.now + span
    sim.effect(kind="sag", t0=sim.now, t1=ep.end, episode=ep.id, node=node, gpus=(d.gpu,),
               factor=1.0 - d.clock_depth, power_factor=1.0 - d.power_depth, ramp_s=d.ramp_s)
    # node= lets a swap of the machine end the slowdown with it (the spare takes the same ranks).
    compute = sim.effect(kind="compute", t0=sim.now, t1=ep.end, episode=ep.id, node=node, ranks=frozenset({rank}),
                         factor=1.0 + d.slowdown, ramp_s=d.ramp_s)
    ep.extra["stack_states_fn"] = _glimpse(sim, compute, (rank,), ep.id)
    ep.extra["drift_effect"] = compute  # its t1 says when the drift really ended (a swap cuts it short)
    return ep


def _compute_creep(sim, p: PlannedFault, d: Drift, span: float) -> Episode:
    node = sim.slots[p.slot]
    ranks = sim.ranks_of(node)
    ep = sim.new_episode(p, nodes=[node], ranks=ranks, swap=[node],
                         detail=f"compute_creep: every rank of the node computes +{d.rate_per_h:.0%} per hour, "
                                f"no GPU-side cue")
    ep.end = sim.now + span
    # A linear ramp over the whole span to 1 + rate × hours is exactly rate per hour.
    compute = sim.effect(kind="compute", t0=sim.now, t1=ep.end, episode=ep.id, node=node, ranks=frozenset(ranks),
                         factor=1.0 + d.rate_per_h * span / 3600.0, ramp_s=span)
    ep.extra["stack_states_fn"] = _glimpse(sim, compute, tuple(ranks), ep.id)
    ep.extra["drift_effect"] = compute
    return ep


def _nic_decay(sim, p: PlannedFault, d: Drift, span: float) -> Episode:
    from faultlens.simulator.net import NetFault

    node = sim.slots[p.slot]
    ep = sim.new_episode(p, nodes=[node], ranks=[], swap=[node],
                         detail=f"nic_decay: mlx5_{d.port} port 1 errors climb to {d.errors_per_s:g} symbol errors/s "
                                f"over {d.ramp_s / 60:.0f} min while its traffic share falls {d.traffic_fall:.0%}")
    ep.end = sim.now + span
    # node= on the record of when it ends: a swap of the machine ends the port's decay with it.
    fault = sim.net_fault(NetFault(node, d.port, sim.now, ep.end, ep.id, ramp_s=d.ramp_s, traffic=1.0 - d.traffic_fall,
                                   errors={"symbol_error": d.errors_per_s, "port_rcv_errors": d.errors_per_s / 4}))
    ep.extra["drift_effect"] = fault
    return ep


def _glimpse(sim, compute: Effect, slow: tuple[int, ...], episode: int) -> Callable[[dict[int, str]], dict[int, str]]:
    """A capture round's answer: the straggler pattern with the probability that a snapshot lands
    while the slow ranks still compute and their peers already wait, else the healthy mix."""
    rng = np.random.default_rng([sim.cfg.seed, 0xD7, episode])
    slow_set = frozenset(slow)

    def states(healthy: dict[int, str]) -> dict[int, str]:
        excess = (compute.factor - 1.0) * compute.strength(sim.now) if compute.active(sim.now) else 0.0
        if rng.random() < min(1.0, COMPUTE_SHARE * excess):
            return {r: ("compute" if r in slow_set else "grad_sync") for r in healthy}
        return healthy

    return states
