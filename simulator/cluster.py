"""The time-stepping simulated cluster: ``advance(until_ts) -> list[Envelope]``, ``apply(command)``.

One training job on N nodes × G GPUs. Each call to :meth:`SimulatedCluster.advance` runs the
clock forward and returns every event in that window in time order: NVML samples per node per
interval, heartbeats, per-rank step telemetry, and whatever the fault episodes emit (raw kernel
and trainer log lines, stack dumps, restarts and new topologies). Everything is drawn from one
seeded generator in a fixed order and event ids derive from (job, seed, counter), so the same
seed and the same ``advance`` calls give the same events byte for byte.

With ``auto_recover`` (the default) each episode ends as if remediated: its nodes are swapped for
spares (``s000``, ...), counters start from zero and the job restarts. Without it the cluster
waits for :meth:`apply` (evict / restart / reattempt / rollback / capture_stacks) like a real job.
What the job gives off on every tick (samples, beats, steps, NIC counters) is
:mod:`simulator.telemetry`; what its ranks answer to a capture_stacks request,
:mod:`simulator.stack_answers`.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import heapq
import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from faultlens.events.command import Command
from faultlens.events.envelope import Envelope
from faultlens.events.topology import Topology
from faultlens.events.trace import trace_order
from faultlens.simulator import lines
from faultlens.simulator.config import SimConfig
from faultlens.simulator.effects import Effect, Episode
from faultlens.simulator.faults import INJECTORS
from faultlens.simulator.metrics import NodeGpus
from faultlens.simulator.net import NetFault, NodeNet
from faultlens.simulator.noise import nccl_init, noise_tick
from faultlens.simulator.plan import EPISODE_S, FaultPlan, PlannedFault
from faultlens.simulator.stack_answers import StackAnswers
from faultlens.simulator.telemetry import FIRST_STEP, PeriodicTelemetry

COLLECTIVES_PER_STEP = 24  # NCCL SeqNum advances this much per training step


class SimulatedCluster(PeriodicTelemetry, StackAnswers):
    def __init__(self, config: SimConfig, plan: FaultPlan | None = None, *, auto_recover: bool = True):
        self.cfg = config
        self.auto_recover = auto_recover
        layout = config.layout()
        if config.nccl_timeout_ms / 1000.0 + 10.0 > min(EPISODE_S[c] for c in ("gpu_lost", "cuda_error", "nccl_error")):
            raise ValueError(f"nccl_timeout_ms={config.nccl_timeout_ms} is too long: the sympathetic timeouts would "
                             "fall after the episode's restart")
        self.tp, self.pp, self.dp = layout.tp, layout.pp, layout.dp
        self.world = layout.tp * layout.pp * layout.dp
        self.rng = np.random.default_rng([config.seed, 0x51])
        self.slots = config.node_names()
        self.gpus = {n: NodeGpus(n, config.gpus, config.seed) for n in self.slots}
        self.boot_ts = {n: config.start_ts - 86_400.0 * (1 + i % 7) for i, n in enumerate(self.slots)}
        self.topology = self._grid()
        self.spares = 0
        self.restarts = 0
        self.now = config.start_ts
        self.labels: list[dict[str, Any]] = []
        self.episodes: dict[int, Episode] = {}
        self.effects: list[Effect] = []
        self._silent: list[Effect] = []
        self._heap: list[tuple[float, int, Callable[[], None], int]] = []
        self._seq = 0
        self._ids = 0
        self._out: list[Envelope] = []
        self._id_prefix = f"{config.job}/{config.seed}/".encode()
        self.state = "running"  # running | hung | down
        self.halted: set[int] = set()  # ranks that stopped stepping while the rest go on
        self.step = FIRST_STEP
        self.last_ckpt = FIRST_STEP
        self.proc_first_step = FIRST_STEP  # the training processes' first step: their recorders count from it
        self.step_started = config.start_ts  # when the step in progress began
        self._rank_speed = 1.0 + self.rng.normal(0, 0.01, self.world)
        # Healthy variance draws from its own generator: fault placement stays what the seed gave.
        self.vrng = np.random.default_rng([config.seed, 0x7A])
        broken = int(round(config.stack_fail_share * config.nodes))
        self.stack_broken = set(self.vrng.choice(self.slots, size=broken, replace=False).tolist()) if broken else set()
        self._next_step = config.start_ts + config.step_time_s
        self._n_sample = 0
        self._n_net = 0
        # The network has its own generator, so switching net telemetry on or off moves no other draw.
        self.nrng = np.random.default_rng([config.seed, 0x4E])
        self.nets = {n: NodeNet(n, config.gpus, config.seed) for n in self.slots}
        self.net_faults: list[NetFault] = []
        self._busy: list[tuple[float, float]] = [(config.start_ts, config.start_ts + config.step_time_s)]
        self._n_beat = 0
        self._hb_seq = 0
        self._request = 0
        self.last_flap: dict[str, float] = {}
        self._at(config.start_ts, lambda: self._emit_topology(config.start_ts))
        self._at(config.start_ts + 0.5, lambda: nccl_init(self, self.now))
        if config.noise:
            self._at(config.start_ts + float(self.rng.uniform(60, 300)), lambda: noise_tick(self))
        for planned in (plan.sorted() if plan else []):
            if planned.slot is not None and not 0 <= planned.slot < config.nodes:
                raise ValueError(f"{planned.fault} at t={planned.t:g}: node n{planned.slot:03d} is not in a {config.nodes}-node job")
            if planned.rank is not None and not 0 <= planned.rank < self.world:
                raise ValueError(f"{planned.fault} at t={planned.t:g}: rank {planned.rank} outside 0..{self.world - 1}")
            self._at(config.start_ts + planned.t, functools.partial(self.inject, planned))

    # --- the clock --------------------------------------------------------------------------
    def advance(self, until_ts: float) -> list[Envelope]:
        """Run the clock to ``until_ts``; every event with ts < until_ts not yet returned, in order."""
        # The engine allocates millions of small acyclic dicts; the cyclic collector rescanning
        # them (and the caller's growing buffers) costs ~40 % of the run and frees nothing.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._advance(until_ts)
        finally:
            if was_enabled:
                gc.enable()

    def _advance(self, until_ts: float) -> list[Envelope]:
        out = self._out  # may already hold what apply() emitted since the last call
        cfg = self.cfg
        while True:
            t_heap = self._heap[0][0] if self._heap else math.inf
            t_sample = cfg.start_ts + self._n_sample * cfg.sample_interval_s
            t_beat = cfg.start_ts + self._n_beat * cfg.heartbeat_interval_s
            t_net = cfg.start_ts + self._n_net * cfg.net_interval_s if cfg.net_interval_s > 0 else math.inf
            t_step = self._next_step if self.state == "running" else math.inf
            t = min(t_heap, t_sample, t_beat, t_step, t_net)
            if t >= until_ts:
                break
            self.now = t
            if t_heap == t:
                _, _, action, _ = heapq.heappop(self._heap)
                action()
            elif t_step == t:
                self._do_step(t)
            elif t_sample == t:
                self._do_samples(t)
                self._n_sample += 1
            elif t_net == t:
                self._do_net(t)
                self._n_net += 1
            else:
                self._do_beats(t)
                self._n_beat += 1
        self.now = max(self.now, until_ts)
        self.effects = [e for e in self.effects if e.t1 > self.now]
        self._silent = [e for e in self._silent if e.t1 > self.now]
        out.sort(key=trace_order)  # the order a recording of this trace would have
        self._out = []
        return out

    def _at(self, ts: float, action: Callable[[], None], episode: int = -1) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (ts, self._seq, action, episode))

    # --- emitting ---------------------------------------------------------------------------
    def _emit(self, ts: float, node: str, source: str, kind: str, data: Mapping[str, Any]) -> None:
        if self._silent and any(e.node == node and e.active(ts) for e in self._silent):
            return
        self._ids += 1
        eid = hashlib.blake2b(self._id_prefix + str(self._ids).encode(), digest_size=16).hexdigest()
        self._out.append(Envelope(ts=ts, job=self.cfg.job, node=node, source=source, kind=kind, data=data, id=eid))

    def emit_at(self, ts: float, node: str, source: str, kind: str, data: dict[str, Any], episode: int = -1) -> None:
        self._at(ts, lambda: self._emit(ts, node, source, kind, data), episode)

    def kernel_line(self, ts: float, node: str, text: str, episode: int = -1) -> None:
        self.emit_at(ts, node, "kernel", "line", {"line": lines.dmesg(ts - self.boot_ts[node], text)}, episode)

    def trainer_line(self, ts: float, node: str, text: str, episode: int = -1) -> None:
        self.emit_at(ts, node, "nccl", "line", {"line": text}, episode)

    def call_at(self, ts: float, action: Callable[[], None], episode: int = -1) -> None:
        self._at(ts, action, episode)

    def _emit_topology(self, ts: float) -> None:
        ev = self.topology.to_event(self.cfg.job, ts)
        self._emit(ts, "-", "job", "topology", ev.data)

    # --- places and identities --------------------------------------------------------------
    def _grid(self) -> Topology:
        topo = Topology.grid(self.slots, self.cfg.gpus, self.tp, self.pp, self.dp)
        self._rank_nodes = [p.node for p in topo.ranks]
        return topo

    def node_of(self, rank: int) -> str:
        return self._rank_nodes[rank]

    def ranks_of(self, node: str) -> list[int]:
        i = self.slots.index(node)
        return list(range(i * self.cfg.gpus, (i + 1) * self.cfg.gpus))

    def local(self, rank: int) -> int:
        return rank % self.cfg.gpus

    def pid(self, rank: int) -> int:
        return 20_000 + 64 * self.restarts + self.local(rank)

    def nccl_seq(self) -> int:
        return (self.step - FIRST_STEP + 1) * COLLECTIVES_PER_STEP + 1000

    def request_id(self) -> str:
        self._request += 1
        return f"sim-stacks-{self._request}"

    # --- episodes ---------------------------------------------------------------------------
    def inject(self, planned: PlannedFault, injector: Callable[..., Episode] | None = None) -> None:
        """Start an episode now, with its class's injector (simulator.faults) unless another is
        given (the slow drifts of simulator.drifts label their own classes' faults)."""
        ep = (injector or INJECTORS[planned.fault])(self, planned)
        self.episodes[ep.id] = ep
        self.labels.append(ep.label(self.cfg.job))
        if self.auto_recover:
            self._at(ep.end, lambda: self._recover(ep.id), ep.id)

    def _recover(self, ep_id: int) -> None:
        """Auto-recovery at an episode's end. A node-local episode that ends while a job-wide one
        holds the job stopped (hung, down) waits for it: swapping a node means restarting the
        job, and a real restart would end the other fault too, so the trace would lie about it."""
        ep = self.episodes.get(ep_id)
        if ep is not None and not ep.stops_job and (self.state != "running" or self.halted):
            self._at(self.now + 5.0, lambda: self._recover(ep_id), ep_id)
            return
        self.end_episode(ep_id)

    def new_episode(self, planned: PlannedFault, *, nodes: list[str], ranks: list[int], **kw: Any) -> Episode:
        return Episode(id=len(self.episodes) + 1, planned=planned, onset=self.now,
                       end=self.now + EPISODE_S[planned.fault], nodes=nodes, ranks=ranks, **kw)

    def effect(self, **kw: Any) -> Effect:
        e = Effect(**kw)
        self.effects.append(e)
        if e.kind == "silent":
            self._silent.append(e)
        return e

    def end_episode(self, ep_id: int, *, swap: list[str] | None = None, reason: str | None = None,
                    command_id: str = "") -> None:
        """Recovery: cancel what the episode still had to emit, swap its nodes, restart the job."""
        ep = self.episodes.get(ep_id)
        if ep is None or ep.ended:
            return
        ep.ended = True
        now = self.now
        for e in self.effects:
            if e.episode == ep_id and e.t1 > now:
                e.t1 = now
        for f in self.net_faults:
            if f.episode == ep_id and f.t1 > now:
                f.t1 = now
        self._heap = [h for h in self._heap if h[3] != ep_id]
        heapq.heapify(self._heap)
        out = list(dict.fromkeys((swap if swap is not None else ep.swap)))
        nodes_in = [self._swap(n) for n in out if n in self.slots]
        if nodes_in:
            self._emit_topology(now)
        if ep.stops_job or nodes_in:
            self.restart(reason or f"{ep.planned.fault} episode {ep_id} remediated", nodes_out=out,
                         nodes_in=nodes_in, rollback=ep.stops_job, command_id=command_id)

    def _swap(self, node: str) -> str:
        spare = f"s{self.spares:03d}"
        self.spares += 1
        i = self.slots.index(node)
        self.slots[i] = spare
        self.gpus[spare] = NodeGpus(spare, self.cfg.gpus, self.cfg.seed)
        self.nets[spare] = NodeNet(spare, self.cfg.gpus, self.cfg.seed, fresh=True)
        for f in self.net_faults:
            if f.node == node and f.t1 > self.now:
                f.t1 = self.now
        self.boot_ts[spare] = self.now - 600.0
        for e in self.effects:
            if e.node == node and e.t1 > self.now:
                e.t1 = self.now
        self.topology = self._grid()
        return spare

    def restart(self, reason: str, *, nodes_out: Sequence[str] = (), nodes_in: Sequence[str] = (),
                rollback: bool = True, command_id: str = "") -> None:
        """The launcher restarts the job (from the last checkpoint when it had stopped)."""
        self.restarts += 1
        self._emit(self.now, "-", "job", "restart", {"reason": reason, "command_id": command_id,
                                                     "nodes_out": list(nodes_out), "nodes_in": list(nodes_in)})
        self.proc_first_step = self.last_ckpt if rollback else self.step  # new processes, new recorders
        if rollback:
            self.step = self.last_ckpt
            self.state = "running"
            self.halted = set()
            self._next_step = self.now + self.cfg.step_time_s
            self._busy.append((self.now, self._next_step))
            self.step_started = self.now
            self._at(self.now + 1.0, lambda: nccl_init(self, self.now))

    # --- commands ---------------------------------------------------------------------------
    def apply(self, command: Command) -> None:
        """React as the trainer and launcher would; the effects show up in the next advance()."""
        if command.job != self.cfg.job:
            return
        if command.action == "capture_stacks":
            self.stack_round(self.now, self.stack_states(), command.id)
        elif command.action == "evict":
            victims = [n for n in command.nodes if n in self.slots]
            for ep in list(self.episodes.values()):
                if not ep.ended and set(ep.nodes) & set(victims):
                    self.end_episode(ep.id, swap=victims, reason=f"evicted by command {command.id}",
                                     command_id=command.id)
                    victims = [n for n in victims if n in self.slots]
            if victims:
                nodes_in = [self._swap(n) for n in victims]
                self._emit_topology(self.now)
                self.restart(f"evicted by command {command.id}", nodes_out=victims, nodes_in=nodes_in,
                             command_id=command.id)
        elif command.action in ("restart", "reattempt", "rollback"):
            for ep in list(self.episodes.values()):
                if not ep.ended and ep.stops_job:
                    self.end_episode(ep.id, swap=[], reason=f"{command.action} by command {command.id}",
                                     command_id=command.id)
            if self.state != "running" or self.halted:
                self.restart(f"{command.action} by command {command.id}", command_id=command.id)

    def compute_factors(self, t: float) -> dict[int, float]:
        """rank → how much slower than nominal it computes at ``t`` (the active ``compute`` effects)."""
        out: dict[int, float] = {}
        for e in self.effects:
            if e.kind == "compute" and e.active(t):
                for r in e.ranks:
                    out[r] = out.get(r, 1.0) * (1.0 + (e.factor - 1.0) * e.strength(t))
        return out

    def rank_event_at(self, ts: float, rank: int, source: str, kind: str, episode: int,
                      data: Callable[[], dict[str, Any]]) -> None:
        """An event from a rank, placed on whatever node holds the rank when it is emitted (a node
        swapped in the meantime no longer speaks)."""
        self._at(ts, lambda: self._emit(ts, self.node_of(rank), source, kind, data()), episode)

    # --- what episodes change in the telemetry (simulator.telemetry) ------------------------
    def net_fault(self, fault: NetFault) -> NetFault:
        self.net_faults.append(fault)
        return fault

    def net_down(self, node: str, port: int, t0: float, t1: float) -> None:
        """A port's link drops at t0 and comes back at t1 (seen by the port counters)."""
        if node in self.nets and self.cfg.net_interval_s > 0:
            self.nets[node].link_down(port, t0, t1)

    def halt(self, ranks: set[int]) -> None:
        """These ranks stop stepping; the others go on until they block on them."""
        self.halted |= set(ranks)

    def stop(self, state: str, halted: set[int] | None = None) -> None:
        """The job stops stepping: ``down`` (crashed, GPUs idle) or ``hung`` (stuck, GPUs busy)."""
        self.state = state
        if halted is not None:
            self.halted = set(halted)
        self._next_step = math.inf
