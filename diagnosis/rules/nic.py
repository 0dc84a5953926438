"""NIC / InfiniBand rule: a training-fabric port that goes down twice within five minutes is broken.

One flap (down, then up) is tolerated: links renegotiate, cables get reseated (its finding is
sympathetic, blamed on nobody, and only counts towards a wave: a switch under many machines). The second alert
on the same node within the window is the finding; mlx5 health errors and NETDEV WATCHDOG
transmit timeouts count as alerts too. The lines of one flap (module event "cable unplugged",
then "link down") are one alert: a new alert needs the link to have come back up, or
``debounce_s`` of quiet.

Only the training fabric (RDMA NICs: mlx4/mlx5, InfiniBand, RoCE drivers, or devices named like
them) leads to eviction. A management or storage NIC (``e1000e … eno1``) going down does not
stop the collectives; it is an ``alert`` for a person, never an eviction. Which NICs are the
fabric is configurable (``fabric_drivers`` / ``fabric_devices``).
"""

from __future__ import annotations

import re
from collections import deque

from faultlens.diagnosis.rules.base import Finding, line_of
from faultlens.events.envelope import Envelope
from faultlens.events.payloads import typed
from faultlens.events.payloads_log import LinkState, NicLine

NIC_WINDOW_S = 300.0
NIC_ALERTS = 2
DEBOUNCE_S = 30.0
# Drivers of RDMA NICs (InfiniBand and RoCE) that carry NCCL's traffic.
FABRIC_DRIVERS = ("mlx4_", "mlx5_", "ib_", "infiniband", "bnxt_re", "irdma", "efa", "rdma")
# Device names of the fabric when the line names no driver: ib0, ibp12s0, mlx5_3, roce0, rdma1.
FABRIC_DEVICES = r"^(?:ib\d|ibp|mlx\d_|roce|rdma)"
# The entity of the verdict on a node's training-fabric NIC: the port counters' flap eviction
# (rules/net_counters.py) takes it too, so one port's flaps, logged and counted, are one diagnosis.
FABRIC_ENTITY = "nic"


class NicRule:
    sources = frozenset({"kernel"})

    def __init__(self, window_s: float = NIC_WINDOW_S, alerts: int = NIC_ALERTS, debounce_s: float = DEBOUNCE_S,
                 fabric_drivers: tuple[str, ...] = FABRIC_DRIVERS, fabric_devices: str = FABRIC_DEVICES) -> None:
        self.window_s = window_s
        self.alerts = alerts
        self.debounce_s = debounce_s
        self.fabric_drivers = tuple(d.lower() for d in fabric_drivers)
        self.fabric_devices = re.compile(fabric_devices)
        self._seen: dict[tuple[str, str, bool], deque] = {}
        self._came_up: set[tuple[str, str, bool]] = set()

    def is_fabric(self, driver: object, device: object) -> bool:
        """A NIC of the training fabric, by its driver where the line names one, else by its name."""
        name = str(driver or "").lower()
        if name:
            return name.startswith(self.fabric_drivers)
        return bool(self.fabric_devices.match(str(device or "")))

    def observe(self, event: Envelope) -> list[Finding]:
        if event.kind not in ("link_up", "link_down", "nic_error"):
            return []
        nic = typed(event, (LinkState, NicLine))
        fabric = self.is_fabric(nic.driver, nic.device)
        key = (event.job, event.node, fabric)
        if event.kind == "link_up":
            self._came_up.add(key)
            return []
        device = str(nic.device or "?")
        port = nic.port
        q = self._seen.setdefault(key, deque())
        if q and key not in self._came_up and event.ts - q[-1][0] < self.debounce_s:
            return []  # another line of the same flap
        self._came_up.discard(key)
        q.append((event.ts, event.id, f"{device}" + (f" port {port}" if port is not None else "")))
        while q and event.ts - q[0][0] > self.window_s:
            q.popleft()
        if len(q) < self.alerts:
            # Tolerated, so blamed on nobody (sympathetic: never a diagnosis of its own), but said:
            # the same flap on many machines at once is a switch or a fabric (diagnosis/engine/waves.py).
            return [Finding(job=event.job, ts=event.ts, fault="nic", action="alert", nodes=(event.node,),
                            entity="nic:flap", evidence=(event.id,), sympathetic=True,
                            detail=f"one flap of {q[-1][2]} tolerated: {line_of(event)}")]
        where = ", ".join(sorted({w for _, _, w in q}))
        if fabric:
            action, what = "evict", f"{len(q)} NIC alerts in {self.window_s:.0f}s on {where}"
        else:
            action, what = "alert", f"{len(q)} alerts in {self.window_s:.0f}s on {where}, not a training-fabric NIC (no eviction)"
        return [Finding(
            job=event.job, ts=event.ts, onset=q[0][0], fault="nic", action=action, nodes=(event.node,),
            entity=FABRIC_ENTITY if fabric else "nic:other", evidence=tuple(i for _, i, _ in q)[-16:],
            detail=f"{what}: {line_of(event)}",
        )]

    def tick(self, now: float) -> list[Finding]:
        return []
