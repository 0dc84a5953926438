"""Per-node NVML state and the ``gpu``/``sample`` payload a node agent would publish.

Values are an H100-SXM node under steady LLM training, with the variance a real fleet shows:
near-full utilisation, ~75 GB used; temperatures spread across nodes (rack position, ±4 °C) and
across the GPUs of a node (±2.5 °C); power swinging 480-700 W, and a GPU that reaches its cap runs
at reduced clocks with ``sw_power_cap`` set; boost clocks wander 1,800-1,980 MHz with load. Counters (ECC, row remapping, retired pages,
PCIe replay, NVLink errors) are cumulative: faults raise them, a node swap starts from zero.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MEM_TOTAL_MB = 81_559
POWER_LIMIT_W = 700.0
SM_CLOCK_MAX = 1980
MEM_CLOCK = 2619

COUNTERS = (
    "ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_aggregate",
    "remap_correctable", "remap_uncorrectable", "remap_pending", "remap_failure",
    "retired_pages_sbe", "retired_pages_dbe", "retired_pending", "pcie_replay", "nvlink_errors",
)

# NVML's nvmlDeviceGetGpuRecoveryAction codes (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P,
# 4 drain and reset), so consumers can read the same integer a real driver reports.
RECOVERY_NONE, RECOVERY_GPU_RESET, RECOVERY_NODE_REBOOT = 0, 1, 2


def pci_bus_id(gpu: int) -> str:
    """The PCI address of GPU ``gpu`` on an 8-GPU HGX board (kernel lines name GPUs this way)."""
    buses = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
    bus = buses[gpu] if gpu < len(buses) else 0x100 + gpu
    return f"0000:{bus:02x}:00"


def nic_pci(port: int = 0) -> str:
    return f"0000:{0x5E + port * 0x20:02x}:00.0"


@dataclass
class GpuMods:
    """What active faults do to one GPU right now (filled by the cluster each tick)."""

    lost: bool = False  # NVML handle gone: every value null
    heat_c: float = 0.0  # added temperature
    clock_factor: float = 1.0  # SM clock multiplier
    util_factor: float = 1.0
    power_factor: float = 1.0  # power drawn at the same load (a sagging GPU, simulator.drifts)
    throttle: tuple[str, ...] = ()
    idle: bool = False  # the trainer died: no kernels running
    spin: bool = False  # the job hangs: NCCL kernels spin (100 % busy, low power, full clocks)
    recovery_action: int = RECOVERY_NONE


_NO_MODS = GpuMods()


@dataclass
class NodeGpus:
    """One node's GPUs: fixed identity (uuid, per-GPU offsets) plus cumulative counters."""

    node: str
    gpus: int
    seed: int
    counters: list[dict[str, int]] = field(init=False)
    uuids: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.counters = [{c: 0 for c in COUNTERS} for _ in range(self.gpus)]
        self.uuids = []
        for g in range(self.gpus):
            h = hashlib.blake2b(f"{self.seed}/{self.node}/{g}".encode(), digest_size=16).hexdigest()
            self.uuids.append(f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}")
        # A little silicon lottery: each GPU runs a bit hotter or cooler than its neighbours.
        offsets = np.random.default_rng([self.seed, int(hashlib.blake2b(self.node.encode(), digest_size=4).hexdigest(), 16)])
        node_offset = offsets.normal(0, 4.0)  # rack position, airflow: whole nodes run warmer or cooler
        self.temp_base_arr = 64.0 + node_offset + offsets.normal(0, 2.5, self.gpus)
        self._static: list[dict[str, Any] | None] = [None] * self.gpus

    def bump(self, gpu: int, name: str, delta: int) -> None:
        if name not in COUNTERS:
            raise ValueError(f"unknown counter {name!r}")
        self.counters[gpu][name] += delta
        self._static[gpu] = None

    def _static_row(self, g: int) -> dict[str, Any]:
        """The part of a GPU's row that changes only when a counter does (cached: it is most of it)."""
        row = self._static[g]
        if row is None:
            c = self.counters[g]
            row = {"index": g, "uuid": self.uuids[g], "util": None, "mem_util": None, "mem_used_mb": None,
                   "mem_total_mb": MEM_TOTAL_MB, "temp_c": None, "power_w": None, "power_limit_w": POWER_LIMIT_W,
                   "sm_clock_mhz": None, "mem_clock_mhz": MEM_CLOCK, "sm_clock_max_mhz": SM_CLOCK_MAX,
                   "throttle": None, **c, "remap_pending": bool(c["remap_pending"]),
                   "remap_failure": bool(c["remap_failure"]), "recovery_action": RECOVERY_NONE}
            self._static[g] = row
        return row

    def rows(self, values: list[list], mods: dict[int, GpuMods], capped=None) -> list[dict[str, Any]]:
        """Build the ``gpus`` list from per-GPU values (util, mem_util, mem, temp, power, clock)."""
        out = []
        for g in range(self.gpus):
            m = mods.get(g, _NO_MODS)
            if m.lost:
                out.append({"index": g, "uuid": self.uuids[g], **_LOST})
                continue
            row = dict(self._static_row(g))
            v = values[g]
            row["util"], row["mem_util"], row["mem_used_mb"], row["temp_c"], row["power_w"], row["sm_clock_mhz"] = v
            row["throttle"] = list(m.throttle) if m.throttle else (["gpu_idle"] if m.idle else
                                                                   ["sw_power_cap"] if capped is not None and capped[g] else [])
            if m.recovery_action:
                row["recovery_action"] = m.recovery_action
            out.append(row)
        return out


def sample_nodes(nodes: list[NodeGpus], noise: np.ndarray, mods: list[dict[int, GpuMods]]) -> list[list[dict[str, Any]]]:
    """Every node's ``gpus`` list for one tick. ``noise`` is (nodes, gpus, 4) standard normal,
    drawn by the caller in a fixed amount per tick whatever the faults (determinism); the maths
    runs once over the whole cluster because per-node numpy calls dominate otherwise."""
    n, g = noise.shape[0], noise.shape[1]
    util_f = np.ones((n, g))
    clock_f = np.ones((n, g))
    power_f = np.ones((n, g))
    heat = np.zeros((n, g))
    idle = np.zeros((n, g), dtype=bool)
    spin = np.zeros((n, g), dtype=bool)
    for i, node_mods in enumerate(mods):
        for j, m in node_mods.items():
            util_f[i, j], clock_f[i, j], heat[i, j], idle[i, j] = m.util_factor, m.clock_factor, m.heat_c, m.idle
            spin[i, j], power_f[i, j] = m.spin, m.power_factor
    base = np.stack([node.temp_base_arr for node in nodes])
    n0, n1, n2, n3 = noise[..., 0], noise[..., 1], noise[..., 2], noise[..., 3]
    util = np.where(idle, 0.0, np.where(spin, 100.0, np.clip((98.0 + n0 * 1.5) * util_f, 0.0, 100.0)))
    mem_used = np.where(idle, 512.0 + np.abs(n1) * 20, 76_800.0 + n1 * 300)
    # Power swings with the kernels running (GEMM vs attention vs communication phases); at the cap
    # the GPU sheds clocks (sw_power_cap), which is health, not a fault.
    raw_power = (600.0 + n2 * 45) * (0.55 + 0.45 * util_f) * power_f
    capped = ~idle & ~spin & (raw_power >= POWER_LIMIT_W - 2.0)
    power = np.where(idle, 72.0 + n2 * 3, np.where(spin, 240.0 + n2 * 10, np.minimum(POWER_LIMIT_W - 1.0, raw_power)))
    temp = np.where(idle, base - 25.0 + n3, np.where(spin, base - 12.0 + n3, base + n3 * 0.8 + heat + n2 * 1.2))
    boost = np.minimum(SM_CLOCK_MAX, SM_CLOCK_MAX - 15.0 * np.floor(np.abs(n0 + n2) * 3.0))
    boost = np.where(capped, boost - 180.0, boost)
    clock = np.where(idle, 345.0, np.where(spin, float(SM_CLOCK_MAX), np.floor(boost * clock_f)))
    values = np.stack([np.round(util, 1), np.round(util * 0.45, 1), np.round(mem_used, 0), np.round(temp, 1),
                       np.round(power, 1), clock], axis=-1).tolist()
    for row in values:
        for v in row:
            v[5] = int(v[5])
    return [node.rows(values[i], mods[i], capped[i]) for i, node in enumerate(nodes)]


_VALUE_KEYS = (
    "util", "mem_util", "mem_used_mb", "mem_total_mb", "temp_c", "power_w", "power_limit_w",
    "sm_clock_mhz", "mem_clock_mhz", "sm_clock_max_mhz", *COUNTERS, "recovery_action",
)

# A lost GPU: the driver answers nothing, so every value (and the throttle list) is null.
_LOST = {**{k: None for k in _VALUE_KEYS}, "throttle": None}
