"""The node agent's word about itself: what it sees, what it keeps, and what it cannot see.

:func:`blind_spots` is pure: from the numbers the sources keep (collected by
:meth:`collectors.agent.Agent.health`) it names what the agent is blind to right now. The
heartbeat carries both (`heartbeat`/`beat` ``data.health``, docs/agent.md), the diagnosis side
turns a non-empty ``blind`` into an ``agent_blind`` alert (diagnosis/rules/agent_health.py), and
:func:`gauges` flattens them for Prometheus. A GPU stuck in a call is not a blind spot here: it is
its own `gpu`/`unresponsive` event and diagnosis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

# A follower that has not polled for this long is stuck (it polls every 0.2 s).
FOLLOWER_STALL_S = 30.0


@dataclass(frozen=True, slots=True)
class BlindSpot:
    what: str  # "nvml", a log source's name ("kernel", "trainer"), "spool", "publisher"
    why: str

    def to_dict(self) -> dict[str, str]:
        return {"what": self.what, "why": self.why}


def nvml_stall_s(interval_s: float, deadline_s: float) -> float:
    """How far behind the sampler may fall before NVML counts as unseen: a few intervals plus the
    time a stuck call and its handle probe may take."""
    return 3 * interval_s + 2 * deadline_s


def _down(status: str) -> bool:
    """A source not running now: failed and waiting to restart, exited, or stopped. One that failed
    and runs again (``... restarted``) sees again, whatever its status still remembers."""
    return (status.startswith("error") and "restarted" not in status) or status in ("exited", "stopped")


def blind_spots(health: Mapping[str, Any], statuses: Mapping[str, str], *, interval_s: float) -> list[BlindSpot]:
    out: list[BlindSpot] = []
    nvml = health.get("nvml")
    if nvml:
        unresponsive = nvml.get("unresponsive") or {}
        status = statuses.get("nvml", "")
        if "node" in unresponsive:
            u = unresponsive["node"]
            out.append(BlindSpot("nvml", f"NVML's {u['call']} has not returned for {u['for_s']:.0f}s: no GPU is read"))
        elif nvml.get("state") == "blind" or _down(status):
            out.append(BlindSpot("nvml", f"the NVML sampler is down ({status or nvml.get('state')})"))
        elif nvml.get("state") == "ok" and nvml.get("lag_s", 0.0) > nvml_stall_s(interval_s, nvml.get("deadline_s", 10.0)):
            out.append(BlindSpot("nvml", f"no GPU sample for {nvml['lag_s']:.0f}s past its {interval_s:g}s interval"))
    for name, follower in (health.get("followers") or {}).items():
        status = statuses.get(name, "")
        if _down(status):
            out.append(BlindSpot(name, f"the {name} log follower is not running ({status})"))
        elif follower.get("poll_age_s", 0.0) > FOLLOWER_STALL_S:
            out.append(BlindSpot(name, f"the {name} log follower has not read for {follower['poll_age_s']:.0f}s"))
    spool = health.get("spool") or {}
    if spool and not spool.get("writable", True):
        out.append(BlindSpot("spool", f"the spool cannot be written ({spool.get('error')}): while the broker is "
                                      f"away, telemetry waits in memory ({spool.get('in_memory', 0)} record(s)) and "
                                      f"the oldest samples are dropped ({spool.get('dropped', 0)} so far)"))
    publisher = health.get("publisher") or {}
    if publisher.get("lost"):
        out.append(BlindSpot("publisher", f"{publisher['lost']} record(s) could be neither sent nor kept"))
    return out


def gauges(health: Mapping[str, Any]) -> dict[str, float]:
    """Flat numbers for Prometheus (``faultlens_agent_*``, label ``component``)."""
    out: dict[str, float] = {}
    nvml = health.get("nvml")
    if nvml:
        out["agent_nvml_lag_seconds"] = nvml.get("lag_s", 0.0)
        if nvml.get("last_ok_ts") is not None:
            out["agent_nvml_last_ok_timestamp"] = nvml["last_ok_ts"]
        out["agent_nvml_unresponsive_gpus"] = len(nvml.get("unresponsive") or {})
        out["agent_nvml_abandoned_calls"] = nvml.get("abandoned_calls", 0)
    spool = health.get("spool") or {}
    for key in ("depth", "bytes", "dropped", "in_memory"):
        if key in spool:
            out[f"agent_spool_{key}"] = spool[key]
    if spool:
        out["agent_spool_writable"] = 1.0 if spool.get("writable", True) else 0.0
    for key, value in (health.get("publisher") or {}).items():
        if isinstance(value, (int, float)):
            out[f"agent_publisher_{key}"] = value
    for name, follower in (health.get("followers") or {}).items():
        for key in ("lines", "events", "folded", "poll_age_s"):
            if key in follower:
                out[f"agent_{name}_{key}"] = follower[key]
    out["agent_blind_spots"] = len(health.get("blind") or ())
    return out
