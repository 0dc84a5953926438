"""Traces of waves: one event under many machines at once, with one genuine fault inside (issue 55).

Written from docs/events.md (raw kernel lines as the node agent ships them, heartbeats, steps, the
job topology with its machines' rack / NVLink domain / IB switch), not by the simulator:

* ``fabric_reset``: the NVLink fabric manager restarts under the machines of ``wave_nodes``; each
  logs Xid 74 on two GPUs within 30 s (the line of NVIDIA's Xid catalogue, "NVLink: fatal error
  detected on link N");
* ``switch_reboot``: the IB switch of those machines reboots: each machine's fabric port goes down
  within a minute and comes back 40 s later (mlx5 "Link down" / "Link up");
* ``teardown``: the job is torn down: Xid 45 (preemptive cleanup) on every GPU within 20 s;
* ``driver_reload``: the driver is reloaded under the job: the module's load line and a GSP RPC
  timeout (Xid 119) on one GPU of each machine within 30 s.

In each, ``culprit`` logs Xid 79 (fallen off the bus) in the middle of the wave. Labels
(docs/design.md §8): the culprit's ``gpu_lost`` only; nothing else is a fault of a machine.
"""

from __future__ import annotations

import random

from bench.testbed.foreign import T0, Trace, save
from faultlens.events.topology import Topology

SHAPES = ("fabric_reset", "switch_reboot", "teardown", "driver_reload")
WAVE_AT = 120.0
PCI = ("0000:18:00", "0000:2a:00", "0000:3a:00", "0000:5d:00", "0000:9a:00", "0000:ab:00", "0000:ba:00", "0000:db:00")


def machines(nodes: list[str], per_domain: int = 16, first: int = 0) -> dict[str, dict]:
    """Where each machine sits: 8 to a rack, ``per_domain`` to an NVLink domain and to a leaf IB
    switch, by its place in the fleet (``first``: the fleet index of ``nodes[0]``)."""
    return {n: {"rack": f"r{i // 8:02d}", "nvlink_domain": f"nvl-{i // per_domain}",
                "ib_switch": f"0x98039b0300{i // per_domain:06x}", "ib_port": i % per_domain + 1}
            for i, n in enumerate(nodes, start=first)}


def _kmsg(t: float) -> str:
    return f"[{1234567.0 + t:.6f}]"


def build(shape: str, *, nodes: int = 256, wave_nodes: list[str] | None = None, culprit: str | None = "n0137",
          duration: float = 300.0, job: str | None = None, seed: int = 0, per_domain: int = 16,
          first: int = 0) -> Trace:
    """The trace of ``shape`` (events in trace order, labels): ``nodes`` machines of 8 GPUs, the
    fleet's machines ``first`` to ``first + nodes - 1``."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r} (one of {', '.join(SHAPES)})")
    names = [f"n{i:04d}" for i in range(first, first + nodes)]
    trace = Trace(f"wave-{shape}", job or f"wave-{shape}-{nodes}")
    rng = random.Random(f"{shape}#{nodes}#{seed}" + (f"#{first}" if first else ""))
    grid = Topology.grid(names, 8, 8, 1, nodes)
    trace.topology = Topology(grid.tp, grid.pp, grid.dp, grid.ranks,
                              {"gpus_per_node": 8, "machines": machines(names, per_domain, first)})
    trace.events.append(trace.topology.to_event(trace.job, T0, event_id=f"{trace.job}-topology"))
    trace.beat({"every": 5.0, "to": duration, "phase_s": 5.0}, rng)
    trace.step({"every": 10.0, "to": duration, "comm_s": 1.5, "data": {"compute_s": 8.0}, "jitter": {"compute_s": 0.2}}, rng)
    hit = names if wave_nodes is None else wave_nodes
    for node in hit:
        at = WAVE_AT + rng.uniform(0, 30.0)
        if shape == "fabric_reset":
            for g in rng.sample(range(8), 2):
                link = rng.randrange(18)
                trace.add(at + rng.uniform(0, 0.5), node, "kernel", "line", {"line": (
                    f"{_kmsg(at)} NVRM: Xid (PCI:{PCI[g]}): 74, pid={3000 + g}, name=python, NVLink: fatal error "
                    f"detected on link {link}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")})
        elif shape == "switch_reboot":
            at = WAVE_AT + rng.uniform(0, 60.0)
            trace.add(at, node, "kernel", "line", {"line": f"{_kmsg(at)} mlx5_core 0000:5e:00.0 ibp94s0: Link down"})
            trace.add(at + 40.0, node, "kernel", "line", {"line": f"{_kmsg(at + 40)} mlx5_core 0000:5e:00.0 ibp94s0: Link up"})
        elif shape == "teardown":
            at = WAVE_AT + rng.uniform(0, 20.0)
            for g in range(8):
                trace.add(at + g * 0.01, node, "kernel", "line", {"line": (
                    f"{_kmsg(at)} NVRM: Xid (PCI:{PCI[g]}): 45, pid={3000 + g}, name=python, Ch 00000008")})
        else:
            trace.add(at, node, "kernel", "line", {"line": (
                f"{_kmsg(at)} NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023")})
            trace.add(at + 6.0, node, "kernel", "line", {"line": (
                f"{_kmsg(at + 6)} NVRM: Xid (PCI:{PCI[0]}): 119, pid={3000}, name=nvidia-smi, Timeout after 6s of "
                f"waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).")})
    if culprit is not None:
        at = WAVE_AT + 11.0
        trace.add(at, culprit, "kernel", "line", {"line": (
            f"{_kmsg(at)} NVRM: Xid (PCI:{PCI[3]}): 79, pid=3003, name=python, GPU has fallen off the bus.")})
        trace.labels.append({"job": trace.job, "fault": "gpu_lost", "nodes": [culprit], "ranks": [], "onset": T0 + at})
    from faultlens.events.trace import trace_order

    trace.events.sort(key=trace_order)
    return trace


def build_fleet(shape: str, *, jobs: int = 4, per_job: int = 4, culprit: str | None = "n0001", duration: float = 300.0,
                tag: str = "", per_domain: int = 16) -> list[Trace]:
    """``shape`` under ``jobs`` jobs of ``per_job`` machines side by side in the fleet (machines
    n0000 on, 16 to an NVLink domain and a leaf switch by default: four jobs of four share one of
    each), each job too small to make a wave of its own; ``culprit``'s Xid 79 in the job that has it."""
    def names(j: int) -> set[str]:
        return {f"n{i:04d}" for i in range(j * per_job, (j + 1) * per_job)}

    return [build(shape, nodes=per_job, first=j * per_job, culprit=culprit if culprit in names(j) else None,
                  duration=duration, per_domain=per_domain, job=f"fleet-{shape}-j{j}{tag}") for j in range(jobs)]


def write_parquet(shape: str, out_dir, **kwargs):
    """The case as a Parquet trace (``OUT/<job>.parquet``, labels beside it)."""
    from pathlib import Path

    trace = build(shape, **kwargs)
    return save(trace, Path(out_dir) / f"{trace.job}.parquet")


if __name__ == "__main__":
    # python -m bench.testbed.waves OUT_DIR [SHAPE...] [--nodes N]
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("shapes", nargs="*", default=list(SHAPES))
    ap.add_argument("--nodes", type=int, default=256)
    a = ap.parse_args()
    for s in a.shapes:
        print(write_parquet(s, a.out, nodes=a.nodes))
