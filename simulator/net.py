"""Simulated RDMA ports: the `net`/`sample` a node agent would publish, built by the agent's own code.

Every node has one InfiniBand HDR port per GPU (``mlx5_0`` … ``mlx5_{G-1}``, rail-optimised, IPoIB
netdevs ``ib0`` …). The cumulative counters are kept as the kernel keeps them (4-byte data words,
narrow saturating error counters) and turned into the payload by
:func:`collectors.net_counters.port_payload`, the agent's code, so the simulator carries every
quirk of the real collector (words → bytes, nulls on the first read of a new machine).

Traffic follows the job: while it steps, each rail moves ``rail_bytes_s`` (± a fixed per-port
share and a few percent of noise per read), in proportion to the part of the interval spent
stepping; checkpoint and evaluation pauses, a hang or a crash move nothing. Background errors
are rare Poisson counts (a symbol error an hour per port). Faults act through :class:`NetFault`
records: a port down between two times (each down is one ``link_downed``), error counters at a
rate (ramping up for a degrading link), and a rail's traffic scaled (to zero for a black-holing
rail, whose share the node's other rails take over).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from faultlens.collectors.net_counters import HW_COUNTERS, PMA_COUNTERS, PortSnapshot, port_payload

RATE_GBPS = 200.0
MTU = 4096
# Counters an InfiniBand port of mlx5 has (the RoCE congestion counters are absent: null).
_IB_ABSENT = frozenset({"np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored", "np_ecn_marked_roce_packets",
                        "roce_adp_retrans", "roce_slow_restart"})
_ABSENT = {n: None for n in HW_COUNTERS if n in _IB_ABSENT}  # in a fixed order: a set's varies by process
_TRANSPORT = frozenset({"local_ack_timeout_err", "out_of_sequence", "packet_seq_err", "implied_nak_seq_err",
                        "rnr_nak_retry_err", "port_xmit_discards"})
# Background error rates per port per second on a healthy HDR link.
BACKGROUND = {"symbol_error": 1 / 3600, "port_rcv_errors": 1 / 7200, "local_ack_timeout_err": 1 / 20000}
_SATURATE = {"symbol_error": 0xFFFF, "port_rcv_errors": 0xFFFF, "link_error_recovery": 0xFF, "link_downed": 0xFF}


@dataclass
class NetFault:
    """What a fault does to one port between ``t0`` and ``t1``."""

    node: str
    port: int  # 0-based: mlx5_<port>, port 1
    t0: float
    t1: float
    episode: int = -1
    errors: dict[str, float] = field(default_factory=dict)  # counter → increments per second at full strength
    traffic: float = 1.0  # this rail's traffic multiplier at full strength
    ramp_s: float = 0.0  # strength grows 0 → 1 over this long (a degrading link)

    def active(self, t0: float, t1: float) -> bool:
        return self.t0 < t1 and t0 < self.t1

    def strength(self, t: float) -> float:
        if self.ramp_s <= 0:
            return 1.0
        return max(0.0, min(1.0, (t - self.t0) / self.ramp_s))


def busy_share(steps: list[tuple[float, float]], t0: float, t1: float) -> float:
    """How much of a rail's stepping rate (t0, t1] carried, given the job's step intervals: pipeline
    and tensor traffic all through a step (30 %), the gradient all-reduce in its last 40 % (70 %);
    pauses carry nothing. A step averages 1; a read that catches only the all-reduce sees 1.75."""
    if t1 <= t0:
        return 0.0

    def overlap(a: float, b: float) -> float:
        return max(0.0, min(t1, b) - max(t0, a))

    return sum(0.3 * overlap(a, b) + 1.75 * overlap(a + 0.6 * (b - a), b) for a, b in steps) / (t1 - t0)


class NodeNet:
    """One node's ports: cumulative counters, link state, and the last snapshot the agent read."""

    def __init__(self, node: str, ports: int, seed: int, fresh: bool = False):
        self.node = node
        h = int(hashlib.blake2b(f"{seed}/{node}/net".encode(), digest_size=4).hexdigest(), 16)
        rng = np.random.default_rng([seed, h])
        self.share = 1.0 + rng.normal(0, 0.04, ports)  # per-rail variation (channels are not spread evenly)
        # A machine that has been up for days has large totals; a fresh spare starts small.
        scale = 1e6 if fresh else 1e12
        self.counters: list[dict[str, int]] = []
        for _ in range(ports):
            words = int(rng.uniform(0.5, 1.0) * scale * 25)
            c = {name: 0 for name in PMA_COUNTERS + HW_COUNTERS if name not in _IB_ABSENT}
            c.update(port_rcv_data=words, port_xmit_data=words + int(rng.integers(0, 1 << 20)),
                     port_rcv_packets=words // (MTU // 4), port_xmit_packets=words // (MTU // 4),
                     port_xmit_wait=int(rng.uniform(1e8, 2e9)) if not fresh else 0,
                     symbol_error=int(rng.integers(0, 3)), link_downed=int(rng.integers(0, 2)))
            self.counters.append(c)
        self.down: list[tuple[float, float]] = [(-1.0, -1.0)] * ports  # current / last down interval per port
        self.prev: list[PortSnapshot] | None = None
        self.prev_ts: float | None = None

    def link_down(self, port: int, t0: float, t1: float) -> None:
        """The port's link goes down at ``t0`` and trains up again at ``t1`` (one link_downed)."""
        self.down[port] = (t0, t1)
        self._bump(port, "link_downed", 1)

    def is_down(self, port: int, t: float) -> bool:
        a, b = self.down[port]
        return a <= t < b

    def _bump(self, port: int, name: str, by: int) -> None:
        c = self.counters[port]
        cap = _SATURATE.get(name)
        c[name] = min(cap, c[name] + by) if cap else c[name] + by

    def sample(self, ts: float, busy: float, rail_bytes_s: float, rng: np.random.Generator,
               faults: list[NetFault]) -> dict[str, Any]:
        """Advance the counters over (previous read, ``ts``] and return the payload. ``busy`` is the
        share of the interval the job spent stepping; ``rng`` is the simulator's network generator."""
        ports = len(self.counters)
        dt = 0.0 if self.prev_ts is None else ts - self.prev_ts
        noise = rng.standard_normal(ports)
        counts = rng.poisson(np.array(list(BACKGROUND.values())) * dt, (ports, len(BACKGROUND)))
        factor = np.ones(ports)
        extra: list[dict[str, float]] = [{} for _ in range(ports)]
        t_prev = ts - dt
        for f in faults:
            if f.node != self.node or not f.active(t_prev, ts) or not 0 <= f.port < ports:
                continue
            s = f.strength(ts)
            overlap = min(ts, f.t1) - max(t_prev, f.t0)
            factor[f.port] *= 1.0 - (1.0 - f.traffic) * s
            for name, rate in f.errors.items():
                extra[f.port][name] = extra[f.port].get(name, 0.0) + rate * s * max(0.0, overlap)
        # A rail that carries less leaves its share to the node's other rails (NCCL channels move).
        lost = float(np.sum(self.share * (1.0 - factor)))
        healthy = (factor >= 0.999)
        if lost > 0 and healthy.any():
            factor = np.where(healthy, factor + lost / float(np.sum(self.share[healthy])), factor)
        snaps: list[PortSnapshot] = []
        for p in range(ports):
            down = self.is_down(p, ts)
            if dt > 0:
                moved = 0.0 if down else rail_bytes_s * busy * self.share[p] * factor[p] * (1.0 + 0.03 * noise[p]) * dt
                words = max(0, int(moved / 4))
                c = self.counters[p]
                c["port_xmit_data"] += words
                c["port_rcv_data"] += int(words * 0.995)
                c["port_xmit_packets"] += words // (MTU // 4)
                c["port_rcv_packets"] += int(words * 0.995) // (MTU // 4)
                c["port_xmit_wait"] += int(2e4 * busy * dt * (1.0 + 0.1 * abs(noise[p])))
                for i, name in enumerate(BACKGROUND):
                    if counts[p, i]:
                        self._bump(p, name, int(counts[p, i]))
                for name, n in extra[p].items():
                    if name in _TRANSPORT:
                        n *= min(1.0, busy)  # retries and sequence errors need traffic; symbol errors do not
                    if n > 0:
                        self._bump(p, name, int(rng.poisson(n)))
            snaps.append(PortSnapshot(
                device=f"mlx5_{p}", port=1, link_layer="InfiniBand", state="DOWN" if down else "ACTIVE",
                phys_state="Polling" if down else "LinkUp", rate_gbps=RATE_GBPS, netdev=f"ib{p}",
                counters={**self.counters[p], **_ABSENT}))
        prev = self.prev
        payload = {"interval_s": round(dt, 3),
                   "ports": [port_payload(prev[p] if prev else None, snaps[p], dt or None) for p in range(ports)]}
        self.prev, self.prev_ts = snaps, ts
        return payload
