"""Benign noise (no label): what a healthy cluster also logs, so the detectors see it and must
stay quiet. NCCL's INFO lines at communicator init, and every few minutes an Xid 63 / 92 (a
correctable ECC event, recorded only) or a single NIC flap on a node with no episode.

The cluster (simulator.cluster) schedules both; like the fault injectors (simulator.faults) they
take it as their first argument and draw from its generator in the order the seed fixes.
"""

from __future__ import annotations

from faultlens.simulator import lines
from faultlens.simulator.faults import flap
from faultlens.simulator.metrics import pci_bus_id

NOISE_EVERY_S = 300.0


def nccl_init(sim, t: float) -> None:
    """NCCL INFO lines local rank 0 of each node prints at communicator init: harmless."""
    for node in sim.slots:
        r = sim.ranks_of(node)[0]
        sim.trainer_line(t, node, lines.nccl_ib_using(node, sim.pid(r), 0))
        sim.trainer_line(t + 0.01, node, lines.nccl_init_complete(node, sim.pid(r), 0, r, sim.world))


def noise_tick(sim) -> None:
    """Every few minutes: an Xid 63/92 IGNORE line or a single NIC flap on a node with no episode."""
    busy = {n for ep in sim.episodes.values() if not ep.ended for n in ep.nodes}
    free = [n for n in sim.slots if n not in busy and sim.last_flap.get(n, -1e18) < sim.now - 900.0]
    if free:
        node = free[int(sim.rng.integers(len(free)))]
        what = sim.rng.choice(("xid63", "xid92", "flap"))
        if what == "flap":
            sim.last_flap[node] = sim.now
            flap(sim, node, sim.now, float(sim.rng.uniform(2, 8)))
        else:
            gpu = int(sim.rng.integers(sim.cfg.gpus))
            sim.kernel_line(sim.now, node, lines.xid(pci_bus_id(gpu), int(what[3:]), None))
            if what == "xid63":
                sim.gpus[node].bump(gpu, "remap_correctable", 1)
            else:
                sim.gpus[node].bump(gpu, "ecc_sbe_volatile", int(sim.rng.integers(20, 200)))
    sim.call_at(sim.now + NOISE_EVERY_S * float(sim.rng.uniform(0.5, 1.5)), lambda: noise_tick(sim))
