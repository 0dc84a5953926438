"""NIC / InfiniBand rule: a port that goes down twice within five minutes is broken.

One flap (down, then up) is tolerated: links renegotiate, cables get reseated. The second alert
on the same node within the window is the finding; mlx5 health errors count as alerts too. The
lines of one flap (module event "cable unplugged", then "link down") are one alert: a new alert
needs the link to have come back up, or ``debounce_s`` of quiet.
"""

from __future__ import annotations

from collections import deque

from diagnosis.rules.base import Finding, line_of
from streams.events import Envelope

NIC_WINDOW_S = 300.0
NIC_ALERTS = 2
DEBOUNCE_S = 30.0


class NicRule:
    sources = frozenset({"kernel"})

    def __init__(self, window_s: float = NIC_WINDOW_S, alerts: int = NIC_ALERTS, debounce_s: float = DEBOUNCE_S) -> None:
        self.window_s = window_s
        self.alerts = alerts
        self.debounce_s = debounce_s
        self._seen: dict[tuple[str, str], deque] = {}
        self._came_up: set[tuple[str, str]] = set()

    def observe(self, event: Envelope) -> list[Finding]:
        key = (event.job, event.node)
        if event.kind == "link_up":
            self._came_up.add(key)
            return []
        if event.kind not in ("link_down", "nic_error"):
            return []
        device = str(event.data.get("device") or "?")
        port = event.data.get("port")
        q = self._seen.setdefault(key, deque())
        if q and key not in self._came_up and event.ts - q[-1][0] < self.debounce_s:
            return []  # another line of the same flap
        self._came_up.discard(key)
        q.append((event.ts, event.id, f"{device}" + (f" port {port}" if port is not None else "")))
        while q and event.ts - q[0][0] > self.window_s:
            q.popleft()
        if len(q) < self.alerts:
            return []
        where = sorted({w for _, _, w in q})
        return [Finding(
            job=event.job, ts=event.ts, onset=q[0][0], fault="nic", action="evict", nodes=(event.node,),
            entity="nic", evidence=tuple(i for _, i, _ in q)[-16:],
            detail=f"{len(q)} NIC alerts in {self.window_s:.0f}s on {', '.join(where)}: {line_of(event)}",
        )]

    def tick(self, now: float) -> list[Finding]:
        return []
