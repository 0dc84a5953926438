"""The outside check's job, as a third party would lay it out from docs/events.md alone.

16 machines x 4 GPUs under two leaf InfiniBand switches (8 machines each), tensor parallel 4 inside
a machine, pipeline 4 and data parallel 4 across machines, a 2 s step, and ranks numbered tensor
rank first (rank = tp * 16 + pp * 4 + dp), so no rank order the simulator uses is assumed: every
rank's coordinates are written out in the topology, as docs/design.md §2 asks.

Only the documented envelope and payload keys are written (no faultlens import): the trace is a
Parquet file of envelopes (`v`, `id`, `ts`, `job`, `node`, `source`, `kind`, `data`), `data` the
payload's JSON text, as a `faultlens simulate` trace holds them.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass, field

TP, PP, DP = 4, 4, 4
GPUS = 4
STEP_S = 2.0
COMPUTE_S = 1.55            # the rank's own compute in a healthy 2 s step; the rest is collectives
BOOTED_S = 9 * 86400.0      # the machines booted 9 days before the trace: kernel uptimes are large
SWITCHES = ("0x98039b0300a1b2c0", "0x98039b0300a1b2c1")


def machine_names(prefix: str, count: int) -> list[str]:
    """`<prefix>-r<rack>-<slot>`, four machines a rack."""
    return [f"{prefix}-r{i // 4 + 1}-{i % 4 + 1:02d}" for i in range(count)]


@dataclass
class Job:
    name: str
    nodes: list[str]
    tp: int = TP
    pp: int = PP
    dp: int = DP
    ranks: list[dict] = field(default_factory=list)
    machines: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ranks:
            for tp in range(self.tp):
                for pp in range(self.pp):
                    for dp in range(self.dp):
                        node = self.nodes[pp * self.dp + dp]
                        rank = tp * self.pp * self.dp + pp * self.dp + dp
                        self.ranks.append({"rank": rank, "node": node, "tp": tp, "pp": pp, "dp": dp})
            self.ranks.sort(key=lambda r: r["rank"])
        half = len(self.nodes) // 2 or 1
        for i, node in enumerate(self.nodes):
            self.machines[node] = {"rack": f"rack-{i // 4 + 1}",
                                   "ib_switch": SWITCHES[min(i // half, 1)],
                                   "ib_port": i % half + 1}

    def ranks_of(self, node: str) -> list[int]:
        return [r["rank"] for r in self.ranks if r["node"] == node]

    def node_of(self, rank: int) -> str:
        return self.ranks[rank]["node"]

    def topology(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "ranks": self.ranks,
                "gpus_per_node": GPUS, "machines": self.machines}


class Trace:
    """Envelopes in the making; `rows()` gives them in event-time order, topology first."""

    def __init__(self, seed: int) -> None:
        self.events: list[dict] = []
        self.rng = random.Random(seed)

    def emit(self, ts: float, job: str, node: str, source: str, kind: str, data: dict) -> None:
        text = json.dumps(data, separators=(",", ":"), allow_nan=False)
        ident = hashlib.sha1(f"{job}|{node}|{source}|{kind}|{ts:.6f}|{text}".encode()).hexdigest()[:32]
        self.events.append({"v": 1, "id": ident, "ts": round(ts, 6), "job": job, "node": node,
                            "source": source, "kind": kind, "data": text})

    def kernel_line(self, ts: float, job: str, node: str, text: str) -> None:
        self.emit(ts, job, node, "kernel", "line", {"line": f"[{BOOTED_S + ts % 86400:.6f}] {text}"})

    def log_line(self, ts: float, job: str, node: str, text: str) -> None:
        self.emit(ts, job, node, "nccl", "line", {"line": text})

    def rows(self) -> list[dict]:
        order = {("job", "topology"): 0}
        return sorted(self.events, key=lambda e: (e["ts"], order.get((e["source"], e["kind"]), 1)))


def gpu_entry(rng: random.Random, node: str, index: int, slow: float = 1.0) -> dict:
    """One GPU of a `gpu`/`sample`: every documented key, units as nvidia-smi shows them."""
    uuid = hashlib.md5(f"{node}/{index}".encode()).hexdigest()
    return {
        "index": index, "uuid": f"GPU-{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:32]}",
        "util": round(min(100.0, rng.gauss(97.0, 1.0)), 1), "mem_util": round(rng.gauss(41.0, 2.0), 1),
        "mem_used_mb": 71230.0 + index, "mem_total_mb": 81559, "temp_c": round(rng.gauss(61.0, 1.5), 1),
        "power_w": round(rng.gauss(590.0, 15.0), 1), "power_limit_w": 700.0,
        "sm_clock_mhz": 1980 if rng.random() < 0.7 else 1965, "mem_clock_mhz": 2619,
        "sm_clock_max_mhz": 1980, "throttle": [],
        "ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0, "ecc_sbe_aggregate": 2, "ecc_dbe_aggregate": 0,
        "remap_correctable": 0, "remap_uncorrectable": 0, "remap_pending": False, "remap_failure": False,
        "retired_pages_sbe": 0, "retired_pages_dbe": 0, "retired_pending": 0, "pcie_replay": 0,
        "nvlink_errors": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}, "recovery_action": 0,
    }


def net_port(state: str = "ACTIVE", downed: int = 0, interval: float = 10.0) -> dict:
    """The node's one training-fabric port (`mlx5_0` port 1, an HDR InfiniBand link)."""
    names = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "port_xmit_discards")
    deltas: dict[str, int | None] = {name: 0 for name in names}   # counts: integers, as docs say now
    deltas["link_downed"] = downed
    moving = state == "ACTIVE"
    deltas["rx_bytes"] = 21_000_000_000 if moving else 0
    deltas["tx_bytes"] = 21_000_000_000 if moving else 0
    rates = {name: (value / interval if value is not None else None) for name, value in deltas.items()}
    return {"device": "mlx5_0", "port": 1, "link_layer": "InfiniBand", "state": state,
            "phys_state": "LinkUp" if moving else "Polling", "rate_gbps": 200, "netdev": "ibp193s0",
            "rates": rates, "deltas": deltas}


def host_sample(rng: random.Random) -> dict:
    """The node's `host`/`sample`: a CPU a third busy, memory and disk well within bounds."""
    return {"cpu_util": round(rng.gauss(0.35, 0.03), 3), "mem_used_frac": 0.41, "disk_free_frac": 0.62,
            "load1": round(rng.gauss(48.0, 2.0), 1)}


def loss_at(step: int, rng: random.Random) -> float:
    """A run resumed mid-way (step 12,000 on): slowly falling, per-batch noise of a few hundredths."""
    return round(2.05 + 0.9 * math.exp(-step / 9000.0) + rng.gauss(0.0, 0.012), 5)
