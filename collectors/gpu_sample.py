"""GPU readings → `gpu` events (docs/events.md): pure functions, no NVML here.

:mod:`collectors.nvml_sampler` reads raw values in NVML's units (bytes, milliwatts, a throttle
bitmask, per-link counters) into a :class:`GpuReading`; this module turns readings into payloads,
so the payload rules are tested with no GPU. A value the driver does not report is ``None`` in
the reading and ``null`` in the payload.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from faultlens.events.envelope import Envelope

# nvmlClocksThrottleReason* / nvmlClocksEventReason* bits, named as in docs/events.md.
THROTTLE_BITS = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal"),
    (0x040, "hw_thermal"),
    (0x080, "hw_power_brake"),
    (0x100, "display_clocks"),
)

# nvmlGpuRecoveryAction_t; the driver's own advice (R550+), reported by name.
RECOVERY_ACTIONS = {0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p", 4: "drain_and_reset",
                    5: "recover_imex_domain", 6: "bus_reset", 7: "system_reboot"}

_MB = 1024 * 1024


def throttle_names(mask: int | None) -> list[str] | None:
    """Names of the set throttle bits; unknown bits as ``bit_0x...`` so a new driver's reason is not lost."""
    if mask is None:
        return None
    names = [name for bit, name in THROTTLE_BITS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_BITS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"bit_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return names


@dataclass
class GpuReading:
    """One GPU's raw readings in NVML units; ``None`` where the driver did not answer."""

    index: int
    uuid: str | None = None
    util: int | None = None
    mem_util: int | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    temp_c: int | None = None
    power_mw: int | None = None
    power_limit_mw: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    throttle_mask: int | None = None
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    ecc_sbe_aggregate: int | None = None
    ecc_dbe_aggregate: int | None = None
    remapped_rows: tuple[int, int, int, int] | None = None  # correctable, uncorrectable, pending, failure
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pending: bool | None = None
    pcie_replay: int | None = None
    nvlink_errors: dict[str, int] | None = None  # counter name → sum over active links
    recovery_action: int | None = None
    lost: str | None = None  # the NVML error when the GPU's handle is gone
    errors: dict[str, str] = field(default_factory=dict)  # field → unexpected NVML error text


def _scaled(value: int | None, divisor: float, digits: int = 1) -> float | None:
    return None if value is None else round(value / divisor, digits)


def gpu_payload(r: GpuReading) -> dict[str, Any]:
    """One GPU's entry of a `gpu`/`sample` payload."""
    remap = r.remapped_rows or (None, None, None, None)
    return {
        "index": r.index,
        "uuid": r.uuid,
        "util": r.util,
        "mem_util": r.mem_util,
        "mem_used_mb": _scaled(r.mem_used_bytes, _MB),
        "mem_total_mb": _scaled(r.mem_total_bytes, _MB),
        "temp_c": r.temp_c,
        "power_w": _scaled(r.power_mw, 1000.0, 2),
        "power_limit_w": _scaled(r.power_limit_mw, 1000.0, 2),
        "sm_clock_mhz": r.sm_clock_mhz,
        "mem_clock_mhz": r.mem_clock_mhz,
        "sm_clock_max_mhz": r.sm_clock_max_mhz,
        "throttle": throttle_names(r.throttle_mask),
        "ecc_sbe_volatile": r.ecc_sbe_volatile,
        "ecc_dbe_volatile": r.ecc_dbe_volatile,
        "ecc_sbe_aggregate": r.ecc_sbe_aggregate,
        "ecc_dbe_aggregate": r.ecc_dbe_aggregate,
        "remap_correctable": remap[0],
        "remap_uncorrectable": remap[1],
        "remap_pending": None if remap[2] is None else bool(remap[2]),
        "remap_failure": None if remap[3] is None else bool(remap[3]),
        "retired_pages_sbe": r.retired_pages_sbe,
        "retired_pages_dbe": r.retired_pages_dbe,
        "retired_pending": r.retired_pending,
        "pcie_replay": r.pcie_replay,
        "nvlink_errors": r.nvlink_errors,
        "recovery_action": None if r.recovery_action is None else RECOVERY_ACTIONS.get(r.recovery_action, str(r.recovery_action)),
    }


def sample_events(readings: list[GpuReading], *, job: str, node: str, interval_s: float,
                  ts: float | None = None) -> list[Envelope]:
    """One `gpu`/`sample` for the GPUs that answered, plus one `gpu`/`lost` per GPU whose handle is gone."""
    ts = time.time() if ts is None else ts
    events = []
    alive = [r for r in readings if r.lost is None]
    if alive:
        events.append(Envelope(ts=ts, job=job, node=node, source="gpu", kind="sample",
                               data={"gpus": [gpu_payload(r) for r in alive], "interval_s": interval_s}))
    for r in readings:
        if r.lost is not None:
            events.append(lost_event(r.index, r.lost, job=job, node=node, ts=ts))
    return events


def lost_event(index: int, error: str, *, job: str, node: str, ts: float | None = None) -> Envelope:
    return Envelope(ts=time.time() if ts is None else ts, job=job, node=node, source="gpu", kind="lost",
                    data={"gpu": index, "error": error, "fault": "gpu_lost", "action": "evict"})


def xid_event(index: int | None, xid: int, *, job: str, node: str, ts: float | None = None) -> Envelope:
    """A `gpu`/`xid` event from NVML's event API, with the Xid's verdict (parsing.xid_verdict, its one owner)."""
    from faultlens.parsing.xid_verdict import xid_verdict

    info = xid_verdict(xid)  # an Xid the table does not know comes back as fault "unknown", action "none"
    return Envelope(ts=time.time() if ts is None else ts, job=job, node=node, source="gpu", kind="xid",
                    data={"gpu": index, "xid": xid, "fault": info.fault, "action": info.action,
                          "severity": info.severity, "mnemonic": info.mnemonic})


def unresponsive_event(index: int | None, call: str, *, deadline_s: float, waited_s: float, handle: str,
                       others_answered: int, uuid: str | None = None, job: str, node: str,
                       ts: float | None = None) -> Envelope:
    """`gpu`/`unresponsive`: an NVML call for GPU ``index`` (``None``: a node-wide call such as
    nvmlDeviceGetCount) did not return within its deadline. ``handle`` is what a fresh
    nvmlDeviceGetHandleByIndex said right after: ``lost`` (the handle is gone), ``answers``,
    ``unresponsive`` (it hung too) or ``unknown`` (not asked)."""
    lost = handle == "lost"
    fault, action = ("gpu_lost", "evict") if lost else ("gpu_reset_required", "evict_reset_gpu")
    data = {"gpu": index, "call": call, "deadline_s": deadline_s, "waited_s": round(waited_s, 3),
            "handle": handle, "others_answered": others_answered, "fault": fault, "action": action}
    if uuid is not None:
        data["uuid"] = uuid
    return Envelope(ts=time.time() if ts is None else ts, job=job, node=node, source="gpu", kind="unresponsive",
                    data=data)


def responsive_event(index: int | None, call: str, stuck_s: float, *, job: str, node: str,
                     ts: float | None = None) -> Envelope:
    """`gpu`/`responsive`: the call an `unresponsive` event named came back after ``stuck_s``."""
    return Envelope(ts=time.time() if ts is None else ts, job=job, node=node, source="gpu", kind="responsive",
                    data={"gpu": index, "call": call, "stuck_s": round(stuck_s, 3)})
