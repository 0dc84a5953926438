"""The telemetry a training job gives off every interval, whatever its faults: NVML samples,
heartbeats, per-rank step telemetry and NIC counters.

It exists apart from :mod:`simulator.cluster` so that the clock and the episodes (what happens)
read apart from how a healthy or degraded job looks on each tick. :class:`PeriodicTelemetry` is a
mixin of :class:`simulator.cluster.SimulatedCluster` and works on its state (``cfg``, ``effects``,
``state``, the generators, ``_emit``); the draws stay in the order the seed fixes.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from faultlens.events.envelope import number
from faultlens.simulator.config import SimConfig
from faultlens.simulator.effects import Effect
from faultlens.simulator.metrics import RECOVERY_GPU_RESET, GpuMods, NodeGpus, sample_nodes
from faultlens.simulator.net import NetFault, NodeNet, busy_share

FIRST_STEP = 20_000  # the job is well into pretraining when the trace starts


class PeriodicTelemetry:
    """What the clock of :class:`~simulator.cluster.SimulatedCluster` emits on each sample, beat,
    step and net tick, bent by the active effects of its episodes."""

    # The cluster's state it reads and moves (SimulatedCluster.__init__ sets each).
    cfg: SimConfig
    world: int
    rng: np.random.Generator
    vrng: np.random.Generator
    nrng: np.random.Generator
    slots: list[str]
    gpus: dict[str, NodeGpus]
    effects: list[Effect]
    state: str  # running | hung | down
    halted: set[int]
    step: int
    net_faults: list[NetFault]
    _busy: list[tuple[float, float]]
    _hb_seq: int
    _rank_speed: np.ndarray
    _rank_nodes: list[str]
    nets: dict[str, NodeNet]

    # The cluster's own, which the telemetry calls.
    def _emit(self, ts: float, node: str, source: str, kind: str, data: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def ranks_of(self, node: str) -> list[int]:
        raise NotImplementedError

    def pid(self, rank: int) -> int:
        raise NotImplementedError

    def node_of(self, rank: int) -> str:
        raise NotImplementedError

    def _gpu_mods(self, node: str, t: float) -> dict[int, GpuMods]:
        mods: dict[int, GpuMods] = {}
        idle = self.state == "down"
        spin = self.state == "hung"
        if not idle and not spin and not self.effects:
            return mods
        if idle or spin:
            mods = {g: GpuMods(idle=idle, spin=spin) for g in range(self.cfg.gpus)}
        for e in self.effects:
            if e.node != node or not e.active(t) or e.kind not in ("lost", "thermal", "slow", "reset", "idle", "sag"):
                continue
            for g in e.gpus or range(self.cfg.gpus):
                m = mods.setdefault(g, GpuMods(idle=idle, spin=spin))
                if e.kind == "idle":
                    m.idle, m.spin = True, False
                elif e.kind == "lost":
                    m.lost = True
                elif e.kind == "reset":
                    m.recovery_action = RECOVERY_GPU_RESET
                else:
                    s = e.strength(t)
                    if e.kind == "sag":
                        m.clock_factor *= 1.0 - (1.0 - e.factor) * s
                        m.power_factor *= 1.0 - (1.0 - e.power_factor) * s
                    elif e.kind == "thermal":
                        m.heat_c += 30.0 * s
                        m.clock_factor *= 1.0 - 0.35 * s
                        m.throttle = ("sw_thermal", "hw_thermal") if s > 0.6 else ("sw_thermal",) if s > 0.3 else ()
                    else:
                        m.clock_factor *= 1.0 - (1.0 - 1.0 / e.factor) * s
                        m.util_factor *= 1.0 - 0.2 * s
        return mods

    def _do_samples(self, t: float) -> None:
        noise = self.rng.standard_normal((len(self.slots), self.cfg.gpus, 4))
        mods = [self._gpu_mods(node, t) for node in self.slots]
        rows = sample_nodes([self.gpus[n] for n in self.slots], noise, mods)
        for node, gpus in zip(self.slots, rows, strict=True):
            self._emit(t, node, "gpu", "sample", {"gpus": gpus, "interval_s": self.cfg.sample_interval_s})

    def _do_beats(self, t: float) -> None:
        self._hb_seq += 1
        for node in self.slots:
            lost = [g for g, m in self._gpu_mods(node, t).items() if m.lost] if self.effects else []
            nvml = f"error: GPU {lost[0]} is lost (NVML_ERROR_GPU_IS_LOST)" if lost else "ok"
            pids = [] if self.state == "down" else [self.pid(r) for r in self.ranks_of(node)]
            self._emit(t, node, "heartbeat", "beat", {"seq": self._hb_seq, "pids": pids,
                                                     "sources": {"nvml": nvml, "kernel_log": "ok", "trainer_log": "ok"}})

    def _do_step(self, t: float) -> None:
        cfg = self.cfg
        factors = np.ones(self.world)
        loss_mode = ""
        for e in self.effects:
            if not e.active(t):
                continue
            if e.kind == "compute":
                idx = np.fromiter(e.ranks, dtype=int)
                factors[idx] *= 1.0 + (e.factor - 1.0) * e.strength(t)
            elif e.kind == "loss":
                loss_mode = e.mode
                if e.steps:
                    e.steps -= 1
                    if not e.steps:
                        e.t1 = t  # its last step
        noise = self.rng.normal(0, 1, (self.world, 3))
        base_compute = 0.8 * cfg.step_time_s
        # Every rank's compute shares the step's batch (±3 %); a slow batch stalls one rank's loader.
        common_jitter = 1.0 + 0.03 * float(self.vrng.normal())
        compute = base_compute * self._rank_speed * factors * (1.0 + 0.015 * noise[:, 0]) * common_jitter
        if cfg.loader_stall_p > 0 and self.vrng.random() < cfg.loader_stall_p:
            compute[int(self.vrng.integers(self.world))] *= float(self.vrng.uniform(1.3, 2.0))
        step_time = float(compute.max() + 0.2 * cfg.step_time_s * (1.0 + 0.02 * noise[0, 1]))
        trend = 1.75 + 1.3 * math.exp(-(self.step - FIRST_STEP + 40_000) / 60_000)
        common = trend + 0.012 * float(noise[0, 2])
        self.step += 1
        # Whole-job arrays, rounded once: per-rank Python arithmetic dominated big clusters.
        loss = common + 0.004 * noise[:, 1]
        gnorm = 0.9 * np.exp(0.06 * noise[:, 2])
        if loss_mode == "spike":
            loss, gnorm = loss * 8.0, gnorm * 8.0
        step_s = step_time * (1.0 + 0.001 * noise[:, 0])
        if loss_mode == "nan":
            losses = gnorms = [number(float("nan"))] * self.world
        else:
            losses, gnorms = np.round(loss, 5).tolist(), np.round(gnorm, 5).tolist()
        step_l = np.round(step_s, 4).tolist()
        tps_l = np.round(cfg.tokens_per_step / step_s, 1).tolist()
        mfu_l = np.round(0.42 * cfg.step_time_s / step_s, 4).tolist()
        comp_l = np.round(compute, 4).tolist()
        nodes = self._rank_nodes
        for rank in range(self.world):
            if rank in self.halted:
                continue
            self._emit(t, nodes[rank], "train", "step", {
                "rank": rank, "step": self.step, "loss": losses[rank], "grad_norm": gnorms[rank],
                "step_time_s": step_l[rank], "tokens": cfg.tokens_per_step, "tokens_per_s": tps_l[rank],
                "mfu": mfu_l[rank], "compute_s": comp_l[rank],
            })
        pause = 0.0
        if self.step % cfg.checkpoint_every == 0 and loss_mode == "" and not self.halted:
            self.last_ckpt = self.step
            self._emit(t, self.node_of(0), "train", "checkpoint",
                       {"rank": 0, "step": self.step, "path": f"/ckpt/{cfg.job}/iter_{self.step:07d}"})
            pause += cfg.checkpoint_pause_s * float(self.vrng.uniform(0.8, 1.2))
        # Evaluation runs half-way between its own intervals, so it never lands on a checkpoint step.
        if cfg.eval_every and self.step % cfg.eval_every == cfg.eval_every // 2:
            pause += cfg.eval_pause_s * float(self.vrng.uniform(0.8, 1.2))
        self._next_step = t + step_time + pause
        self._busy.append((t + pause, self._next_step))  # the next step's compute and collectives
        self.step_started = t + pause  # where the ranks' Flight Recorders place the step's collectives

    def _do_net(self, t: float) -> None:
        t0 = t - self.cfg.net_interval_s
        self._busy = [b for b in self._busy if b[1] > t0 - 60.0]
        busy = 0.0 if self.state != "running" or self.halted else busy_share(self._busy, t0, t)
        self.net_faults = [f for f in self.net_faults if f.t1 > t - 2 * self.cfg.net_interval_s]
        for node in self.slots:
            data = self.nets[node].sample(t, busy, self.cfg.rail_bytes_s, self.nrng, self.net_faults)
            self._emit(t, node, "net", "sample", data)
