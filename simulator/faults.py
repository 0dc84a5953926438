"""One injector per fault class: what a real cluster emits when that fault happens.

Each injector runs at the fault's onset (``sim.now``), schedules the raw log lines, counter
changes, metric effects and job stops the fault causes, and returns the :class:`Episode` whose
label is the ground truth. Sympathetic evidence (watchdog timeouts on ranks that only waited,
Xid 43 after Xid 13) is emitted but not labelled as a separate fault.
"""

from __future__ import annotations

from typing import Any, Callable

from faultlens.events.topology import Topology
from faultlens.simulator import lines
from faultlens.simulator.effects import Episode
from faultlens.simulator.metrics import nic_pci, pci_bus_id
from faultlens.simulator.net import NetFault
from faultlens.simulator.plan import PlannedFault

# The first argument is the cluster (simulator.cluster.SimulatedCluster), which imports its injectors
# from here: named only in words, so the two modules make no import cycle (tests/test_layers.py).
Injector = Callable[[Any, PlannedFault], Episode]


# --- helpers --------------------------------------------------------------------------------
def _place(sim, p: PlannedFault) -> tuple[str, int, int]:
    """(node, rank, gpu) for a fault: from the plan where given, else drawn from the generator."""
    if p.rank is not None:
        if not 0 <= p.rank < sim.world:
            raise ValueError(f"{p.fault}: rank {p.rank} outside 0..{sim.world - 1}")
        rank = p.rank
    else:
        slot = p.slot if p.slot is not None else int(sim.rng.integers(len(sim.slots)))
        if not 0 <= slot < len(sim.slots):
            raise ValueError(f"{p.fault}: node slot {slot} outside 0..{len(sim.slots) - 1}")
        gpu = p.gpu if p.gpu is not None else int(sim.rng.integers(sim.cfg.gpus))
        rank = slot * sim.cfg.gpus + gpu
    return sim.node_of(rank), rank, sim.local(rank)


def _variant(sim, p: PlannedFault, choices: tuple[str, ...], weights: tuple[float, ...] | None = None) -> str:
    if p.detail:
        if p.detail not in choices:
            raise ValueError(f"{p.fault}: unknown variant {p.detail!r} (one of {', '.join(choices)})")
        return p.detail
    return str(sim.rng.choice(choices, p=weights))


def _timeouts(sim, ts: float, ranks, seq: int, ep: int, op: str = "ALLREDUCE") -> None:
    """The ProcessGroupNCCL watchdog on every rank that waited on a collective that never finished."""
    timeout = sim.cfg.nccl_timeout_ms
    for i, r in enumerate(ranks):
        t = ts + 0.002 * (i % 500)
        elapsed = timeout + 60 + (i % 97)
        sim.rank_event_at(t, r, "nccl", "line", ep, lambda r=r, t=t, e=elapsed: {
            "line": lines.watchdog_timeout(r, t, sim.pid(r), seq, op, timeout, e)})
        sim.rank_event_at(t, r, "nccl", "line", ep, lambda r=r, t=t: {
            "line": lines.watchdog_exception(r, t, sim.pid(r), seq, seq, seq - 1)})


def _crash_then_timeouts(sim, ep: Episode, culprit: int) -> None:
    """A rank died or stalled mid-collective: the others block in it until the NCCL timeout."""
    t, seq = sim.now, sim.nccl_seq()
    others = [r for r in range(sim.world) if r != culprit]
    sim.call_at(t, lambda: sim.stop("hung", {culprit}), ep.id)
    t_out = t + sim.cfg.nccl_timeout_ms / 1000.0
    _timeouts(sim, t_out, others, seq + 1, ep.id)
    sim.call_at(t_out + 2.0, lambda: sim.stop("down"), ep.id)


# --- GPU hardware ---------------------------------------------------------------------------
def gpu_lost(sim, p: PlannedFault) -> Episode:
    node, rank, gpu = _place(sim, p)
    ep = sim.new_episode(p, nodes=[node], ranks=[rank], swap=[node], stops_job=True, detail=f"xid79 gpu {gpu}")
    pci, t = pci_bus_id(gpu), sim.now
    sim.kernel_line(t, node, lines.xid(pci, 79, sim.pid(rank)), ep.id)
    sim.kernel_line(t + 0.001, node, lines.gpu_fell_off_bus(pci), ep.id)
    sim.kernel_line(t + 0.002, node, lines.gpu_crash_dump(), ep.id)
    sim.effect(kind="lost", t0=t, t1=ep.end, episode=ep.id, node=node, gpus=(gpu,))
    _crash_then_timeouts(sim, ep, rank)
    return ep


# variant: (xid lines, counter bumps, needs a GPU reset). Xid 94 (a *contained* ECC error) is
# RESTART_APP in NVIDIA's catalogue, i.e. app_fault in docs/design.md §3, so it is not a variant here.
_MEMORY = {
    "xid48": ((48,), {"ecc_dbe_volatile": 1, "ecc_dbe_aggregate": 1, "retired_pages_dbe": 1, "retired_pending": 1}, True),
    "xid95": ((95,), {"ecc_dbe_volatile": 2, "ecc_dbe_aggregate": 2, "remap_uncorrectable": 1, "remap_pending": 1}, True),
    "xid64": ((63, 64), {"remap_uncorrectable": 1, "remap_failure": 1}, True),
}


def gpu_memory(sim, p: PlannedFault) -> Episode:
    node, rank, gpu = _place(sim, p)
    variant = _variant(sim, p, tuple(_MEMORY))
    xids, bumps, reset = _MEMORY[variant]
    ep = sim.new_episode(p, nodes=[node], ranks=[rank], swap=[node], detail=f"{variant} gpu {gpu}")
    for i, code in enumerate(xids):
        sim.kernel_line(sim.now + 0.5 * i, node, lines.xid(pci_bus_id(gpu), code, sim.pid(rank)), ep.id)
    for name, delta in bumps.items():
        sim.gpus[node].bump(gpu, name, delta)
    if reset:
        sim.effect(kind="reset", t0=sim.now, t1=ep.end, episode=ep.id, node=node, gpus=(gpu,))
    return ep


def nvlink(sim, p: PlannedFault) -> Episode:
    node, rank, gpu = _place(sim, p)
    code = int(_variant(sim, p, ("74", "145", "149")))
    ep = sim.new_episode(p, nodes=[node], ranks=[rank], swap=[node], detail=f"xid{code} gpu {gpu}")
    for i in range(3):
        sim.kernel_line(sim.now + 2.0 * i, node, lines.xid(pci_bus_id(gpu), code, sim.pid(rank)), ep.id)
    sim.gpus[node].bump(gpu, "nvlink_errors", int(sim.rng.integers(40, 400)))
    return ep


def gpu_thermal(sim, p: PlannedFault) -> Episode:
    node, _, _ = _place(sim, p)
    ranks = sim.ranks_of(node)
    ep = sim.new_episode(p, nodes=[node], ranks=ranks, swap=[node], detail="cooling failure, all GPUs of the node")
    sim.effect(kind="thermal", t0=sim.now, t1=ep.end, episode=ep.id, node=node, ramp_s=60.0)
    sim.effect(kind="compute", t0=sim.now, t1=ep.end, episode=ep.id, ranks=frozenset(ranks), factor=1.4, ramp_s=60.0)
    return ep


def gpu_reset_required(sim, p: PlannedFault) -> Episode:
    node, rank, gpu = _place(sim, p)
    ep = sim.new_episode(p, nodes=[node], ranks=[rank], swap=[node], detail=f"gsp gpu {gpu}")
    for i, code in enumerate((119, 119, 120)):
        sim.kernel_line(sim.now + 6.0 * i, node, lines.xid(pci_bus_id(gpu), code, sim.pid(rank)), ep.id)
    sim.effect(kind="reset", t0=sim.now, t1=ep.end, episode=ep.id, node=node, gpus=(gpu,))
    return ep


def app_fault(sim, p: PlannedFault) -> Episode:
    node, rank, gpu = _place(sim, p)
    code = int(_variant(sim, p, ("13", "31")))
    ep = sim.new_episode(p, nodes=[node], ranks=[rank], stops_job=True, detail=f"xid{code} burst then xid43, gpu {gpu}")
    pci, n = pci_bus_id(gpu), int(sim.rng.integers(6, 13))
    for i in range(n):
        sim.kernel_line(sim.now + 0.25 * i, node, lines.xid(pci, code, sim.pid(rank)), ep.id)
    sim.kernel_line(sim.now + 0.25 * n + 1.0, node, lines.xid(pci, 43, sim.pid(rank)), ep.id)
    sim.call_at(sim.now + 0.25 * n + 2.0, lambda: sim.stop("down"), ep.id)
    return ep


# --- host and network ----------------------------------------------------------------------
def flap(sim, node: str, t: float, up_after: float, ep: int = -1) -> None:
    pci = nic_pci(0)
    sim.kernel_line(t, node, lines.mlx5_module_event(pci, "Cable unplugged"), ep)
    sim.kernel_line(t + 0.01, node, lines.mlx5_link(pci, "ib0", up=False), ep)
    sim.kernel_line(t + up_after, node, lines.mlx5_module_event(pci, "Cable plugged"), ep)
    sim.kernel_line(t + up_after + 0.01, node, lines.mlx5_link(pci, "ib0", up=True), ep)
    # The port counters see the same flap: link_downed +1, the port DOWN until it trains up again.
    sim.call_at(t + 0.01, lambda: sim.net_down(node, 0, t + 0.01, t + up_after), ep)


# kernel_flap: cable / module flaps that mlx5 logs (the default). The others show in the port
# counters only: counter_flap (sub-second IB link bounces: link_downed counts them, the kernel prints
# nothing for IB port events at its default level), error_burst (a marginal transceiver: symbol and
# receive errors for a minute and a half, the link stays up), degrading (errors climbing over 9
# minutes while the rail's traffic sags to 30 %), rail_drop (a link that black-holes: the rail's
# traffic falls to nothing while its transport retries time out; the node's other rails take its share).
NIC_VARIANTS = ("kernel_flap", "counter_flap", "error_burst", "degrading", "rail_drop")
DEGRADING_S = 540.0  # within the scorer's 600 s window after the onset


def nic(sim, p: PlannedFault) -> Episode:
    node, _, _ = _place(sim, p)
    variant = _variant(sim, p, NIC_VARIANTS) if p.detail else "kernel_flap"
    # Drawn for every variant, so the main generator's sequence (and every later fault) stays the same.
    flaps = 2 + int(sim.rng.integers(0, 2))
    ups = [float(sim.rng.uniform(3, 12)) for _ in range(flaps)]
    if variant == "kernel_flap":
        ep = sim.new_episode(p, nodes=[node], ranks=[], swap=[node], detail=f"{flaps} mlx5 link flaps on ib0")
        for i in range(flaps):
            flap(sim, node, sim.now + 35.0 * i, ups[i], ep.id)
        return ep
    port = int(sim.nrng.integers(sim.cfg.gpus))
    where = f"mlx5_{port} port 1"
    t = sim.now
    if variant == "counter_flap":
        ep = sim.new_episode(p, nodes=[node], ranks=[], swap=[node], detail=f"counter_flap: {flaps} link bounces on {where}")
        for i in range(flaps):
            ti = t + 35.0 * i
            sim.call_at(ti, lambda ti=ti: sim.net_down(node, port, ti, ti + 0.4), ep.id)
        return ep
    if variant == "error_burst":
        ep = sim.new_episode(p, nodes=[node], ranks=[], swap=[node], detail=f"error_burst: symbol / receive errors on {where}")
        sim.net_fault(NetFault(node, port, t, t + 90.0, ep.id, errors={
            "symbol_error": float(sim.nrng.uniform(25, 60)), "port_rcv_errors": float(sim.nrng.uniform(5, 15))}))
        return ep
    if variant == "degrading":
        ep = sim.new_episode(p, nodes=[node], ranks=[], swap=[node],
                             detail=f"degrading: errors climb and traffic sags over {DEGRADING_S:.0f}s on {where}")
        ep.end = t + DEGRADING_S
        sim.net_fault(NetFault(node, port, t, ep.end, ep.id, errors={
            "symbol_error": 6.0, "port_rcv_errors": 1.5, "link_error_recovery": 0.004}, traffic=0.3, ramp_s=DEGRADING_S))
        return ep
    ep = sim.new_episode(p, nodes=[node], ranks=[], swap=[node], detail=f"rail_drop: {where} black-holes, its traffic stops")
    sim.net_fault(NetFault(node, port, t, ep.end, ep.id, traffic=0.0, errors={
        "local_ack_timeout_err": float(sim.nrng.uniform(0.3, 1.0)), "out_of_sequence": float(sim.nrng.uniform(1, 4))}))
    return ep


def kernel(sim, p: PlannedFault) -> Episode:
    node, rank, _ = _place(sim, p)
    variant = _variant(sim, p, ("soft_lockup", "hung_task", "panic"), (0.45, 0.45, 0.10))
    ep = sim.new_episode(p, nodes=[node], ranks=[], swap=[node], detail=variant)
    pid, t = sim.pid(rank), sim.now
    if variant == "soft_lockup":
        cpu = int(sim.rng.integers(0, 192))
        for i in range(3):
            sim.kernel_line(t + 28.0 * i, node, lines.soft_lockup(cpu, 22 + 28 * i, pid), ep.id)
    elif variant == "hung_task":
        for i, text in enumerate(lines.hung_task(pid)):
            sim.kernel_line(t + 0.001 * i, node, text, ep.id)
    else:
        for i, text in enumerate(lines.kernel_panic()):
            sim.kernel_line(t + 0.001 * i, node, text, ep.id)
        sim.effect(kind="silent", t0=t + 1.0, t1=ep.end, episode=ep.id, node=node)
    return ep


def host_oom(sim, p: PlannedFault) -> Episode:
    node, rank, _ = _place(sim, p)
    ep = sim.new_episode(p, nodes=[node], ranks=[rank], stops_job=True, detail="trainer killed by the OOM killer")
    t, pid = sim.now, sim.pid(rank)
    sim.kernel_line(t, node, lines.oom_invoked(), ep.id)
    sim.kernel_line(t + 0.01, node, lines.oom_killed(pid), ep.id)
    sim.trainer_line(t + 1.5, node, lines.torchrun_worker_failed(t + 1.5, sim.local(rank), pid, -9), ep.id)
    sim.call_at(t + 2.0, lambda: sim.stop("down"), ep.id)
    return ep


def node_silent(sim, p: PlannedFault) -> Episode:
    node, _, _ = _place(sim, p)
    ep = sim.new_episode(p, nodes=[node], ranks=[], swap=[node], detail="node stopped emitting (power / network loss)")
    sim.effect(kind="silent", t0=sim.now, t1=ep.end, episode=ep.id, node=node)
    return ep


# --- trainer / NCCL --------------------------------------------------------------------------
def cuda_error(sim, p: PlannedFault) -> Episode:
    node, rank, _ = _place(sim, p)
    ep = sim.new_episode(p, nodes=[node], ranks=[rank], stops_job=True, detail="illegal memory access")
    for i, text in enumerate(lines.cuda_error(rank, sim.now, sim.pid(rank))):
        sim.trainer_line(sim.now + 0.001 * i, node, text, ep.id)
    _crash_then_timeouts(sim, ep, rank)
    return ep


def nccl_error(sim, p: PlannedFault) -> Episode:
    node, rank, local = _place(sim, p)
    variant = _variant(sim, p, ("ib_completion", "connection_reset"))
    ep = sim.new_episode(p, nodes=[node], ranks=[rank], stops_job=True, detail=variant)
    t, pid, seq = sim.now, sim.pid(rank), sim.nccl_seq()
    peer = sim.node_of((rank + sim.cfg.gpus) % sim.world)
    if variant == "ib_completion":
        first = lines.nccl_ib_completion_error(node, pid, pid + 54, local, f"10.0.{rank // 256}.{rank % 256}", 45_678)
    else:
        first = lines.nccl_connection_reset(node, pid, pid + 54, local, peer, 58_392)
    sim.trainer_line(t, node, first, ep.id)
    for i, text in enumerate(lines.nccl_remote_error(rank)):
        sim.trainer_line(t + 0.5 + 0.001 * i, node, text, ep.id)
    # The failing rank is the one behind: its last completed op is older than everyone else's.
    sim.trainer_line(t + 0.6, node, lines.watchdog_exception(rank, t + 0.6, pid, seq, seq, seq - 1), ep.id)
    others = [r for r in range(sim.world) if r != rank]
    sim.call_at(t, lambda: sim.stop("hung", {rank}), ep.id)
    t_out = t + sim.cfg.nccl_timeout_ms / 1000.0
    _timeouts(sim, t_out, others, seq + 1, ep.id)
    sim.call_at(t_out + 2.0, lambda: sim.stop("down"), ep.id)
    return ep


def user_code(sim, p: PlannedFault) -> Episode:
    node, rank, _ = _place(sim, p)
    ep = sim.new_episode(p, nodes=[node], ranks=[rank], stops_job=True, detail="KeyError in the data loader")
    for i, text in enumerate(lines.user_code_traceback(rank)):
        sim.trainer_line(sim.now + 0.001 * i, node, text, ep.id)
    t = sim.now + 1.0
    sim.trainer_line(t, node, lines.torchrun_worker_failed(t, sim.local(rank), sim.pid(rank), 1), ep.id)
    sim.call_at(t + 0.5, lambda: sim.stop("down"), ep.id)
    return ep


def nan_loss(sim, p: PlannedFault) -> Episode:
    ep = sim.new_episode(p, nodes=[], ranks=[], stops_job=True, detail="loss became nan on every rank")
    span = 3 * sim.cfg.step_time_s
    sim.effect(kind="loss", t0=sim.now, t1=sim.now + span, episode=ep.id, mode="nan")
    sim.call_at(sim.now + 1.0, lambda: sim.trainer_line(sim.now, sim.node_of(0), lines.nan_warning(0, sim.step + 1), ep.id), ep.id)
    sim.call_at(sim.now + span, lambda: sim.stop("down"), ep.id)
    return ep


def loss_spike(sim, p: PlannedFault) -> Episode:
    ep = sim.new_episode(p, nodes=[], ranks=[], stops_job=True, detail="loss and grad norm ×8 for two steps")
    # Two steps, however long until the first: over a fixed 20 s the spike could fall in a
    # checkpoint or evaluation pause, labelled with no spiked step to see (the README demo missed it).
    sim.effect(kind="loss", t0=sim.now, t1=ep.end, episode=ep.id, mode="spike", steps=2)
    return ep


# --- implicit faults: hang and fail-slow ----------------------------------------------------
# job_hang variants. host_stall (the default): the culprit is blocked on the host (its data loader)
# and never enters the all_gather its TP peers wait in: the Flight Recorder names it, as on real
# captures. in_collective: the culprit entered the all_gather with its peers and hangs inside it
# (every member joined, the collective never completes): the recorder cannot tell who is stuck,
# the stacks' group is all the evidence says (the paper's example, and an over-eviction).
HANG_VARIANTS = ("host_stall", "in_collective")


def hang_states(topo: Topology, culprit: int, variant: str = "in_collective") -> dict[int, str]:
    """docs/design.md §5: the culprit's TP group in all_gather, their pipeline peers in p2p, the rest
    in grad sync; with ``host_stall`` the culprit itself waits for its data loader instead."""
    stuck = set(topo.group_ranks("tp", topo.group_id(culprit, "tp")))
    stage = topo.by_rank[culprit].pp
    states = {p.rank: "grad_sync" for p in topo.ranks}
    for r in stuck:
        for peer in topo.group_ranks("pp", topo.group_id(r, "pp")):
            states[peer] = "irecv" if topo.by_rank[peer].pp > stage else "isend"
    for r in stuck:
        states[r] = "all_gather"
    if variant == "host_stall":
        states[culprit] = "data_wait"
    return states


def job_hang(sim, p: PlannedFault) -> Episode:
    node, rank, _ = _place(sim, p)
    # No draw for the default variant: the main generator's sequence (every later fault) stays the same.
    variant = _variant(sim, p, HANG_VARIANTS) if p.detail else "host_stall"
    if p.rank is None and p.slot is None:  # the paper's example: a last-stage machine
        last = [r for r in range(sim.world) if sim.topology.by_rank[r].pp == sim.pp - 1]
        rank = int(sim.rng.choice(last))
        node = sim.node_of(rank)
    gid = sim.topology.group_id(rank, "pp")
    detail = ("rank blocked in its data loader, never entered the all_gather its TP peers wait in; no progress, "
              "no log output" if variant == "host_stall" else
              "rank stuck inside all_gather_into_tensor with its TP peers; no progress, no log output")
    ep = sim.new_episode(p, nodes=[node], ranks=[rank], swap=[node], stops_job=True, group=f"pp:{gid}",
                         detail=detail)
    ep.extra["stack_states"] = hang_states(sim.topology, rank, variant)
    # Synchronous training: every rank stops at the same step. The culprit's GPU runs nothing while
    # every other GPU spins in the NCCL kernel waiting for it. Stacks come only when asked for.
    sim.call_at(sim.now, lambda: sim.stop("hung"), ep.id)
    sim.effect(kind="idle", t0=sim.now, t1=ep.end, episode=ep.id, node=node, gpus=(sim.local(rank),))
    return ep


def fail_slow(sim, p: PlannedFault) -> Episode:
    node, _, _ = _place(sim, p)
    ranks = sim.ranks_of(node)
    factor = float(sim.rng.uniform(1.3, 1.6))
    ep = sim.new_episode(p, nodes=[node], ranks=ranks, swap=[node], detail=f"node runs slow (compute ×{factor:.2f})")
    sim.effect(kind="slow", t0=sim.now, t1=ep.end, episode=ep.id, node=node, factor=factor, ramp_s=20.0)
    sim.effect(kind="compute", t0=sim.now, t1=ep.end, episode=ep.id, ranks=frozenset(ranks), factor=factor, ramp_s=20.0)
    # What a capture request finds while the episode lasts (stacks come only when asked for).
    ep.extra["stack_states"] = {r: ("compute" if r in ranks else "grad_sync") for r in range(sim.world)}
    return ep


INJECTORS: dict[str, Injector] = {
    f.__name__: f for f in (
        gpu_lost, gpu_memory, nvlink, gpu_thermal, gpu_reset_required, nic, kernel, host_oom,
        cuda_error, nccl_error, user_code, nan_loss, loss_spike, job_hang, fail_slow, node_silent,
        app_fault,
    )
}
