"""Per-node NVML state and the ``gpu``/``sample`` payload a node agent would publish.

Values are an H100-SXM node under steady LLM training: near-full utilisation, ~75 GB used,
60-70 °C, 550-680 W, SM clocks at the 1980 MHz boost. Counters (ECC, row remapping, retired pages,
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
    throttle: tuple[str, ...] = ()
    idle: bool = False  # the trainer died: no kernels running
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
        self.temp_base = (62.0 + offsets.normal(0, 2.5, self.gpus)).tolist()

    def bump(self, gpu: int, name: str, delta: int) -> None:
        if name not in COUNTERS:
            raise ValueError(f"unknown counter {name!r}")
        self.counters[gpu][name] += delta

    def sample(self, noise: np.ndarray, mods: dict[int, GpuMods] | None = None) -> list[dict[str, Any]]:
        """One ``gpus`` list; ``noise`` is a (gpus, 4) standard-normal draw (kept outside so the
        caller draws a fixed amount of randomness per tick, whatever the faults: determinism)."""
        out = []
        for g in range(self.gpus):
            m = (mods or {}).get(g, _NO_MODS)
            n0, n1, n2, n3 = noise[g]
            row: dict[str, Any] = {"index": g, "uuid": self.uuids[g]}
            if m.lost:
                row.update({k: None for k in _VALUE_KEYS})
                row["throttle"] = None
                out.append(row)
                continue
            if m.idle:
                util, mem_used, power = 0.0, 512.0 + abs(n1) * 20, 72.0 + n2 * 3
                temp = self.temp_base[g] - 25.0 + n3
            else:
                util = min(100.0, max(0.0, (98.0 + n0 * 1.5) * m.util_factor))
                mem_used = 76_800.0 + n1 * 300
                power = min(POWER_LIMIT_W, (610.0 + n2 * 25) * (0.55 + 0.45 * m.util_factor))
                temp = self.temp_base[g] + n3 * 0.8 + m.heat_c
            clock = int(SM_CLOCK_MAX * m.clock_factor) if not m.idle else 345
            c = self.counters[g]
            row.update({
                "util": round(util, 1),
                "mem_util": round(util * 0.45, 1),
                "mem_used_mb": round(mem_used, 0),
                "mem_total_mb": MEM_TOTAL_MB,
                "temp_c": round(temp, 1),
                "power_w": round(power, 1),
                "power_limit_w": POWER_LIMIT_W,
                "sm_clock_mhz": clock,
                "mem_clock_mhz": MEM_CLOCK,
                "sm_clock_max_mhz": SM_CLOCK_MAX,
                "throttle": list(m.throttle) if m.throttle else (["gpu_idle"] if m.idle else []),
                **c,
                "remap_pending": bool(c["remap_pending"]),
                "remap_failure": bool(c["remap_failure"]),
                "recovery_action": m.recovery_action,
            })
            out.append(row)
        return out


_VALUE_KEYS = (
    "util", "mem_util", "mem_used_mb", "mem_total_mb", "temp_c", "power_w", "power_limit_w",
    "sm_clock_mhz", "mem_clock_mhz", "sm_clock_max_mhz", *COUNTERS, "recovery_action",
)
