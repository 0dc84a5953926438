"""Payload Structs of what a node agent reports about its machine: sources ``gpu``, ``kernel``,
``net`` and ``host`` (docs/events.md; the rules every field follows: events/payload_fields.py).

Field types are the ones the bus has always checked. A documented key typed ``Any`` is one no
check ever refused (and that no detector reads as a number): it is listed so a reader finds it
on the Struct, and read as it was sent.
"""

from __future__ import annotations

from typing import Any

from faultlens.events.diagnosis_record import Action, FaultClass
from faultlens.events.payload_fields import Flag, Int, NonNeg, NonNegInt, Number, Payload, Text
from faultlens.events.payloads_log import Group, ParsedLog, Severity

# --- source `gpu` (collectors/nvml_sampler.py, collectors/gpu_sample.py) ----------------------


class GpuEntry(Payload, frozen=True):
    """One GPU of a ``gpu``/``sample``. The numbers some detector reads (events.gpu_table's
    TABLE_NUMBERS), ``index``, ``uuid`` and ``throttle`` are checked; the other documented values
    (memory use, memory clock, corrected-error counters, ``nvlink_errors``, ``recovery_action``,
    the remap / retire flags) are read as sent, never checked (issue 13: no per-event check of a
    field nobody reads, so a sample is never refused for one)."""

    index: NonNegInt | None = None
    uuid: Text | None = None
    util: Number | None = None
    temp_c: Number | None = None
    power_w: Number | None = None
    power_limit_w: Number | None = None
    sm_clock_mhz: Number | None = None
    sm_clock_max_mhz: Number | None = None
    ecc_dbe_volatile: Number | None = None
    ecc_dbe_aggregate: Number | None = None
    remap_uncorrectable: Number | None = None
    retired_pages_sbe: Number | None = None
    retired_pages_dbe: Number | None = None
    pcie_replay: Number | None = None
    throttle: list[Text | None] | None = None
    mem_util: Any = None
    mem_used_mb: Any = None
    mem_total_mb: Any = None
    mem_clock_mhz: Any = None
    ecc_sbe_volatile: Any = None
    ecc_sbe_aggregate: Any = None
    remap_correctable: Any = None
    remap_pending: Any = None
    remap_failure: Any = None
    retired_pending: Any = None
    nvlink_errors: Any = None
    recovery_action: Any = None


class GpuSample(Payload, frozen=True):
    """``gpu``/``sample``: one NVML sample of every GPU of the node."""

    gpus: list[GpuEntry | None] | None = None
    interval_s: NonNeg | None = None


class GpuXid(Payload, frozen=True):
    """``gpu``/``xid``: an Xid from NVML's event API."""

    gpu: NonNegInt | None = None
    xid: NonNegInt | None = None
    fault: FaultClass | None = None
    action: Action | None = None
    severity: Severity | None = None
    mnemonic: Any = None


class GpuLost(Payload, frozen=True):
    """``gpu``/``lost``: the GPU's NVML handle is gone."""

    gpu: NonNegInt | None = None
    error: Any = None
    fault: FaultClass | None = None
    action: Action | None = None


class GpuUnresponsive(Payload, frozen=True):
    """``gpu``/``unresponsive``: an NVML call did not return within the agent's deadline."""

    gpu: NonNegInt | None = None
    call: Text | None = None
    deadline_s: NonNeg | None = None
    waited_s: NonNeg | None = None
    handle: Text | None = None
    others_answered: NonNegInt | None = None
    uuid: Any = None
    fault: FaultClass | None = None
    action: Action | None = None


class GpuResponsive(Payload, frozen=True):
    """``gpu``/``responsive``: the call an ``unresponsive`` named came back."""

    gpu: NonNegInt | None = None
    call: Text | None = None
    stuck_s: NonNeg | None = None


# --- source `kernel` (parsing/kernel_log.py, kernel_gpu.py; the other kinds: events/payloads_log.py)


class KernelXid(ParsedLog, frozen=True):
    """``kernel``/``xid``: an NVRM Xid line (parsing/xid_table.py); its ``fault`` and ``action`` are
    parsing.xid_verdict's. ``count`` / ``folded``: a folded repeat (collectors/flood_fold.py)."""

    xid: NonNegInt | None = None
    pid: Int | None = None
    process: Text | None = None
    sympathetic: Flag | None = None
    pci: Any = None
    gpu: Any = None
    mnemonic: Any = None
    nvidia_action: Text | None = None
    subcode: Text | None = None
    intrinfo: Text | None = None
    error_status: Text | None = None


class KernelGpuLost(ParsedLog, frozen=True):
    """``kernel``/``gpu_lost``: a GPU fell off the bus (``xid_inferred``: the record had no Xid
    line, so it is Xid 79), or its PCIe AER recovery failed (rule ``gpu.aer_cannot_recover``)."""

    xid: NonNegInt | None = None
    pci: Any = None
    xid_inferred: Flag | None = None
    uuid: Text | None = None
    serial: Any = None
    pid: Int | None = None
    process: Text | None = None
    driver: Group | None = None


class KernelSxid(ParsedLog, frozen=True):
    """``kernel``/``sxid``: an NVSwitch error (the driver's line, or fabric manager's with its
    ``pci`` / ``physical_id`` / ``port``)."""

    sxid: NonNegInt | None = None
    device: Group | None = None
    pci: Group | None = None
    physical_id: Group | None = None
    port: Group | None = None


class KernelMachineCheck(ParsedLog, frozen=True):
    """``kernel``/``mce`` and ``kernel``/``edac``: a machine-check or EDAC memory error."""

    corrected: Flag | None = None


class LogLine(Payload, frozen=True):
    """``kernel``/``line`` and ``nccl``/``line``: a raw log line, parsed downstream."""

    line: Text | None = None


# --- source `net` (collectors/net_counters.py) ------------------------------------------------


class NetPort(Payload, frozen=True):
    """One NIC port of a ``net``/``sample``: its state, and its counters' per-second rates and
    increments since the last sample (a counter the port lacks is null)."""

    device: Text | None = None
    port: NonNegInt | None = None
    link_layer: Text | None = None
    state: Text | None = None
    phys_state: Text | None = None
    rate_gbps: NonNeg | None = None
    netdev: Text | None = None
    rates: dict[Any, NonNeg | None] | None = None
    deltas: dict[Any, NonNegInt | None] | None = None


class NetSample(Payload, frozen=True):
    """``net``/``sample``: every RDMA / NIC port of the node."""

    ports: list[NetPort | None] | None = None
    interval_s: NonNeg | None = None


# --- source `host` ----------------------------------------------------------------------------


class HostSample(Payload, frozen=True):
    """``host``/``sample``: the node's CPU, memory and disk."""

    cpu_util: NonNeg | None = None
    mem_used_frac: NonNeg | None = None
    disk_free_frac: NonNeg | None = None
    load1: NonNeg | None = None
