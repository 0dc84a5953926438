"""NIC port counters (InfiniBand / RoCE) from sysfs, and the `net`/`sample` payload built from two reads.

Pure at the core: :func:`read_snapshot` reads a sysfs root (``/sys``, or a test tree laid out
like one) into a :class:`NetSnapshot`; :func:`sample_data` turns two snapshots into rates and
deltas. Where the kernel writes them:

* ``class/infiniband/<dev>/ports/<port>/{state,phys_state,rate,link_layer}``: ``4: ACTIVE``,
  ``5: LinkUp``, ``200 Gb/sec (4X HDR)``, ``InfiniBand`` / ``Ethernet``;
* ``.../counters/<name>``: the IB PMA counters (``port_rcv_data`` / ``port_xmit_data`` count
  4-byte words: reported as ``rx_bytes`` / ``tx_bytes``);
* ``.../hw_counters/<name>``: the driver's counters (mlx5: congestion notification packets,
  out-of-sequence, retransmission timeouts);
* the port's netdev: ``<dev>/device/net/<netdev>`` (``dev_port`` picks the port on a dual-port
  card), else ``ports/<port>/gid_attrs/ndevs/0`` (RoCE).

Ethernet (RoCE) ports get ``ethtool -S <netdev>`` statistics beside them where the tool is
installed (physical-layer errors, RDMA vport bytes), under the names ethtool prints.

Counters go backwards after a reset (driver reload, ``perfquery -R``) and the 32-bit ones wrap:
a 32-bit counter seen in the upper half that comes back in the lower half wrapped once (unless
that would be more than the link can carry: then a 64-bit counter was reset); any other decrease
is a reset, and that interval's delta is ``null``, never a huge number. (A 32-bit data counter on
an HDR link wraps in under a second, more than once per read: only extended, 64-bit data counters
give true rates there; every ConnectX since ConnectX-3 has them.) The
narrow IB error counters (8 and 16 bits) saturate at all ones (the IB spec's PMA semantics):
a pegged counter's increase is unknown, so ``null`` too. A missing file or device is ``null``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

log = logging.getLogger(__name__)

# counters/ (IB PMA) that we publish; all other files there are left out (multicast, VL15, ...).
PMA_COUNTERS = (
    "symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors", "port_xmit_discards", "port_xmit_constraint_errors",
    "port_rcv_constraint_errors", "local_link_integrity_errors", "excessive_buffer_overrun_errors",
    "port_xmit_wait", "port_rcv_data", "port_xmit_data", "port_rcv_packets", "port_xmit_packets",
)
# hw_counters/ (mlx5): congestion (RoCE ECN / CNP), transport errors and retransmissions.
HW_COUNTERS = (
    "np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored", "np_ecn_marked_roce_packets", "out_of_sequence",
    "out_of_buffer", "packet_seq_err", "local_ack_timeout_err", "implied_nak_seq_err", "rnr_nak_retry_err",
    "req_cqe_error", "resp_cqe_error", "roce_adp_retrans", "roce_slow_restart",
)
# ethtool -S (mlx5e) statistics worth having where sysfs has no equivalent.
ETHTOOL_STATS = (
    "rx_vport_rdma_unicast_bytes", "tx_vport_rdma_unicast_bytes", "rx_vport_rdma_unicast_packets",
    "tx_vport_rdma_unicast_packets", "rx_crc_errors_phy", "rx_symbol_err_phy", "rx_pcs_symbol_err_phy",
    "rx_corrupted_bits_phy", "link_down_events_phy", "rx_discards_phy", "tx_discards_phy", "rx_out_of_buffer",
    "rx_pause_ctrl_phy", "tx_pause_ctrl_phy", "rx_prio3_pause", "tx_prio3_pause",
)
# The data counters count 4-byte words; published in bytes under these names.
WORDS_TO_BYTES = {"port_rcv_data": "rx_bytes", "port_xmit_data": "tx_bytes"}
# IB PMA error counters are narrow and saturate at all ones (IBA 16.1.3.5).
SATURATING_BITS = {
    "symbol_error": 16, "link_error_recovery": 8, "link_downed": 8, "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16, "port_rcv_switch_relay_errors": 16, "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8, "port_rcv_constraint_errors": 8, "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
}
# 32 bits and wrapping: PortXmitWait, the data/packet counters of HCAs without PortCountersExtended
# (judged by value: above 2^32 they are the 64-bit extended ones), and mlx5's q-counters.
WRAP32 = frozenset({
    "port_xmit_wait", "port_rcv_data", "port_xmit_data", "port_rcv_packets", "port_xmit_packets",
    "out_of_sequence", "out_of_buffer", "packet_seq_err", "local_ack_timeout_err", "implied_nak_seq_err",
    "rnr_nak_retry_err", "req_cqe_error", "resp_cqe_error",
})
_2_32 = 1 << 32


@dataclass(frozen=True, slots=True)
class PortSnapshot:
    device: str
    port: int
    link_layer: str | None = None
    state: str | None = None
    phys_state: str | None = None
    rate_gbps: float | None = None
    netdev: str | None = None
    counters: Mapping[str, int | None] = field(default_factory=dict)  # raw values, kernel / ethtool names
    present: bool = True  # False: the device or port was there before and is gone now


@dataclass(frozen=True, slots=True)
class NetSnapshot:
    ts: float  # when it was read (any clock; only differences count)
    ports: tuple[PortSnapshot, ...]

    def by_port(self) -> dict[tuple[str, int], PortSnapshot]:
        return {(p.device, p.port): p for p in self.ports}


# --- reading sysfs ----------------------------------------------------------------------------
def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:  # missing, permission, a device that vanished mid-read
        return None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text, 0) if text.startswith("0x") else int(text)
    except ValueError:
        return None


def parse_state(text: str | None) -> str | None:
    """``4: ACTIVE`` → ``ACTIVE``; ``5: LinkUp`` → ``LinkUp`` (a bare name passes as it is)."""
    if not text:
        return None
    return text.split(":", 1)[1].strip() if ":" in text else text.strip()


_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")


def parse_rate(text: str | None) -> float | None:
    """``200 Gb/sec (4X HDR)`` → 200.0; ``2.5 Gb/sec (1X SDR)`` → 2.5; anything else → None."""
    m = _RATE.match(text or "")
    return float(m.group(1)) if m else None


def _netdev(dev_dir: Path, port: int) -> str | None:
    nets = dev_dir / "device" / "net"
    try:
        names = sorted(p.name for p in nets.iterdir())
    except OSError:
        names = []
    if len(names) == 1:
        return names[0]
    for name in names:
        # dev_port is the 0-based physical port of the netdev on a multi-port card.
        if _int(_read(nets / name / "dev_port")) == port - 1:
            return name
    ndev = _read(dev_dir / "ports" / str(port) / "gid_attrs" / "ndevs" / "0")
    return ndev or (names[0] if names else None)


def read_port(dev_dir: Path, port: int, ethtool: Callable[[str], Mapping[str, int] | None] | None = None) -> PortSnapshot:
    pdir = dev_dir / "ports" / str(port)
    counters: dict[str, int | None] = {}
    for name in PMA_COUNTERS:
        counters[name] = _int(_read(pdir / "counters" / name))
    for name in HW_COUNTERS:
        counters[name] = _int(_read(pdir / "hw_counters" / name))
    link_layer = _read(pdir / "link_layer")
    netdev = _netdev(dev_dir, port)
    if ethtool is not None and netdev and link_layer == "Ethernet":
        stats = ethtool(netdev) or {}
        for name in ETHTOOL_STATS:
            if name in stats:
                counters[name] = stats[name]
    return PortSnapshot(device=dev_dir.name, port=port, link_layer=link_layer, state=parse_state(_read(pdir / "state")),
                        phys_state=parse_state(_read(pdir / "phys_state")), rate_gbps=parse_rate(_read(pdir / "rate")),
                        netdev=netdev, counters=counters)


def rdma_root(sysfs_root: Path | str) -> Path:
    return Path(sysfs_root) / "class" / "infiniband"


def read_snapshot(sysfs_root: Path | str, ts: float,
                  ethtool: Callable[[str], Mapping[str, int] | None] | None = None) -> NetSnapshot:
    """Every port of every RDMA device under ``sysfs_root``; no devices → no ports (never an error)."""
    ports: list[PortSnapshot] = []
    try:
        devices = sorted(rdma_root(sysfs_root).iterdir())
    except OSError:
        devices = []
    for dev_dir in devices:
        try:
            numbers = sorted(int(p.name) for p in (dev_dir / "ports").iterdir() if p.name.isdigit())
        except OSError:
            continue  # the device went away between the listing and now
        for port in numbers:
            ports.append(read_port(dev_dir, port, ethtool))
    return NetSnapshot(ts=ts, ports=tuple(ports))


def with_missing(prev: NetSnapshot | None, cur: NetSnapshot) -> NetSnapshot:
    """``cur`` plus every port ``prev`` had that is gone now (``present=False``, all null)."""
    if prev is None:
        return cur
    now = cur.by_port()
    gone = tuple(PortSnapshot(device=p.device, port=p.port, present=False, counters={k: None for k in p.counters})
                 for key, p in prev.by_port().items() if key not in now)
    return NetSnapshot(ts=cur.ts, ports=cur.ports + gone) if gone else cur


# --- ethtool -S -----------------------------------------------------------------------------
def parse_ethtool_stats(text: str) -> dict[str, int]:
    """``ethtool -S`` output (``NIC statistics:`` then ``     name: value`` lines) → {name: value}.
    Lines that are not ``name: integer`` are skipped (per-queue headers, garbage)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, value = line.strip().partition(":")
        if not sep or not name or " " in name:
            continue
        value = value.strip()
        if value.isdigit():
            out[name] = int(value)
    return out


# --- two snapshots → the payload --------------------------------------------------------------
def counter_delta(name: str, prev: int | None, cur: int | None, max_delta: float | None = None) -> int | None:
    """Increments between two reads; None when unknown (missing, reset, saturated). A wrap that
    would mean more than ``max_delta`` (what the link can carry in the interval) was a reset."""
    if prev is None or cur is None or prev < 0 or cur < 0:
        return None
    bits = SATURATING_BITS.get(name)
    if bits is not None and cur >= (1 << bits) - 1:
        return None  # pegged at all ones: how many more happened is unknown
    if cur >= prev:
        if name in WRAP32 and cur == _2_32 - 1:
            return None  # a 32-bit PMA counter that saturated instead of wrapping
        return cur - prev
    if name in WRAP32 and prev < _2_32 and prev >= _2_32 // 2 and cur < _2_32 // 2:
        wrapped = cur + _2_32 - prev  # wrapped once
        return None if max_delta is not None and wrapped > max_delta else wrapped
    return None  # went backwards: reset


def port_payload(prev: PortSnapshot | None, cur: PortSnapshot, interval_s: float | None) -> dict[str, Any]:
    """One entry of ``ports`` (docs/events.md, source ``net``)."""
    rates: dict[str, float | None] = {}
    deltas: dict[str, int | None] = {}
    old = prev.counters if prev is not None and prev.present else {}
    interval = interval_s if interval_s is not None and interval_s > 0 else None  # None: rates unknown
    # What the link can move in the interval (+10 %), to tell a 32-bit wrap from a 64-bit reset.
    link_bytes = cur.rate_gbps * 1e9 / 8 * interval * 1.1 if interval is not None and cur.rate_gbps else None
    limits = {} if link_bytes is None else {"port_rcv_data": link_bytes / 4, "port_xmit_data": link_bytes / 4,
                                            "port_rcv_packets": link_bytes / 64, "port_xmit_packets": link_bytes / 64}
    for name, value in cur.counters.items():
        before = old.get(name)
        # Fast path: most counters of a healthy port stay 0 (and 15 is the lowest saturation point).
        delta = 0 if value is not None and value < 15 and value == before else \
            counter_delta(name, before, value, limits.get(name))
        out_name = name
        if name in WORDS_TO_BYTES:
            out_name = WORDS_TO_BYTES[name]
            delta = None if delta is None else 4 * delta
        deltas[out_name] = delta
        rates[out_name] = None if delta is None or interval is None else 0.0 if delta == 0 else round(delta / interval, 3)
    return {"device": cur.device, "port": cur.port, "link_layer": cur.link_layer, "state": cur.state,
            "phys_state": cur.phys_state, "rate_gbps": cur.rate_gbps, "netdev": cur.netdev,
            "rates": rates, "deltas": deltas}


def sample_data(prev: NetSnapshot | None, cur: NetSnapshot) -> dict[str, Any]:
    """The `net`/`sample` ``data``: every port of ``cur`` (and the ones gone since ``prev``)."""
    cur = with_missing(prev, cur)
    interval = None if prev is None else cur.ts - prev.ts
    before = prev.by_port() if prev is not None else {}
    ports = [port_payload(before.get((p.device, p.port)), p, interval) for p in cur.ports]
    return {"interval_s": round(interval, 3) if interval is not None and interval > 0 else 0.0, "ports": ports}
