"""Builders of realistic parsed events (docs/events.md) for the diagnosis engine's unit tests."""

from __future__ import annotations

import itertools

from faultlens.events.envelope import Envelope
from faultlens.events.topology import Topology

T0 = 1767225600.0
JOB = "job-t"
_ids = itertools.count()


def ev(ts: float, node: str, source: str, kind: str, job: str = JOB, **data) -> Envelope:
    return Envelope(ts=T0 + ts, job=job, node=node, source=source, kind=kind, data=data, id=f"e{next(_ids)}")


def nodes(n: int) -> list[str]:
    return [f"n{i:03d}" for i in range(n)]


def topology(n: int = 4, gpus: int = 2, tp: int = 2, pp: int = 2, job: str = JOB, ts: float = 0.0) -> Envelope:
    dp = n * gpus // (tp * pp)
    return Topology.grid(nodes(n), gpus, tp, pp, dp).to_event(job, T0 + ts, event_id=f"topo{next(_ids)}")


def gpu(index: int = 0, **over) -> dict:
    g = {"index": index, "uuid": f"GPU-{index}", "util": 97, "temp_c": 65, "power_w": 600, "power_limit_w": 700,
         "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "throttle": [], "ecc_dbe_volatile": 0,
         "ecc_dbe_aggregate": 0, "remap_uncorrectable": 0, "remap_pending": False, "remap_failure": False,
         "retired_pages_sbe": 0, "retired_pages_dbe": 0, "retired_pending": False, "pcie_replay": 0}
    g.update(over)
    return g


def sample(ts: float, node: str, gpus: list[dict] | None = None, job: str = JOB) -> Envelope:
    return ev(ts, node, "gpu", "sample", job=job, gpus=gpus or [gpu(0), gpu(1)], interval_s=1.0)


def xid(ts: float, node: str, code: int, fault: str, action: str, pci: str = "0000:3b:00", source: str = "kernel") -> Envelope:
    line = f"NVRM: Xid (PCI:{pci}): {code}, pid=1234, name=python, Ch 00000010"
    if source == "gpu":
        return ev(ts, node, "gpu", "xid", gpu=0, xid=code, fault=fault, action=action, severity="error")
    return ev(ts, node, "kernel", "xid", xid=code, pci=pci, pid=1234, process="python", text=line, line=line,
              fault=fault, action=action, severity="error", mnemonic="")


def step(ts: float, node: str, rank: int, n: int, loss=2.0, grad_norm=1.0, step_time_s=10.0, compute_s=None, job: str = JOB) -> Envelope:
    data = {"rank": rank, "step": n, "loss": loss, "grad_norm": grad_norm, "step_time_s": step_time_s,
            "tokens": 4096, "tokens_per_s": 409.6, "mfu": 0.4}
    if compute_s is not None:
        data["compute_s"] = compute_s
    return ev(ts, node, "train", "step", job=job, **data)


def beat(ts: float, node: str, seq: int = 0, job: str = JOB, pids: list[int] | None = None, **extra) -> Envelope:
    """A beat listing ``pids`` (one training process by default); ``extra``: more data (``stopping``)."""
    return ev(ts, node, "heartbeat", "beat", job=job, seq=seq, pids=[1] if pids is None else pids,
              sources={"nvml": "ok"}, **extra)
