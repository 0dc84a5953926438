"""The `heartbeat`/`beat` event (docs/events.md): built here, on the bus's side, because two
publishers send it: the node agent (collectors/heartbeat.py) and `faultlens run` beating for its
node when no agent runs there (trainer_hooks/run_heartbeat.py), and the trainer side may not
import the agent."""

from __future__ import annotations

import time
from typing import Any, Mapping

from faultlens.events.envelope import Envelope


def beat_event(*, job: str, node: str, seq: int, pids: list[int], sources: Mapping[str, str],
               ts: float | None = None, unranked_pids: list[int] | None = None,
               health: Mapping[str, Any] | None = None, stopping: bool = False) -> Envelope:
    data = {"seq": seq, "pids": sorted(pids), "sources": dict(sources)}
    if stopping:
        data["stopping"] = True
    if unranked_pids is not None:
        data["unranked_pids"] = sorted(unranked_pids)
    if health is not None:
        data["health"] = dict(health)
    return Envelope(
        ts=time.time() if ts is None else ts,
        job=job,
        node=node,
        source="heartbeat",
        kind="beat",
        data=data,
    )
