"""Which payload Struct each ``source``/``kind`` has, and the payload check every consumer runs.

:data:`PAYLOAD_TYPES` maps a kind to its Struct (events/payloads_node.py, events/payloads_log.py,
events/payloads_job.py, events/payloads_stage.py; the rules of their fields:
events/payload_fields.py); a kind a user's catalogue rule made reads as ``ParsedLog``. :func:`check_payload` reads an event's
``data`` into its Struct once, refusing a wrong value with an InvalidEvent naming the field (the
event becomes a dead letter with that reason), and keeps the Struct on the event:
:func:`typed` then gives it to any detector without reading ``data`` again.

The two biggest samples have a quicker way to the same verdict. A ``gpu``/``sample`` or
``net``/``sample`` read by the typed readers (events/gpu_reading.py, events/net_reading.py) was
checked while it was parsed, and a plain ``gpu``/``sample`` (events.gpu_table: every read value
of the right type) is what detectors read as a table anyway: neither is read into its Struct
unless someone asks for it (:func:`typed`). tests/events/test_payloads_quick.py holds the quick
ways to the Struct's verdict.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar, overload

from faultlens.events.envelope import Envelope, InvalidEvent, keep_payload
from faultlens.events.gpu_table import GpuRows, gpu_table
from faultlens.events.net_reading import CheckedPorts
from faultlens.events.payload_fields import Payload, convert
from faultlens.events.payloads_job import (
    CheckReplay,
    CheckReplayDone,
    CheckResult,
    CommandAck,
    HeartbeatBeat,
    NcclError,
    NcclException,
    NcclNan,
    NcclTimeout,
    RecorderDump,
    StackDump,
    TrainCheckpoint,
    TrainEval,
    TrainStep,
)
from faultlens.events.payloads_log import (
    GpuDriverLine,
    KernelClock,
    KernelCrash,
    KernelOom,
    KernelStall,
    KernelStorage,
    KernelSystem,
    LinkState,
    NcclWarn,
    NicLine,
    ParsedLog,
    PcieAer,
    SchedulerLine,
    SubsystemLine,
    SuspectLine,
)
from faultlens.events.payloads_node import (
    GpuLost,
    GpuResponsive,
    GpuSample,
    GpuUnresponsive,
    GpuXid,
    HostSample,
    KernelGpuLost,
    KernelMachineCheck,
    KernelSxid,
    KernelXid,
    LogLine,
    NetSample,
)
from faultlens.events.payloads_stage import (
    JobEnd,
    JobRestart,
    JobTopology,
    SummaryBundle,
    SummaryClock,
    SummaryFinding,
    SummaryWatermark,
    SummaryWindow,
)

PAYLOAD_TYPES: dict[tuple[str, str], type[Payload]] = {
    ("gpu", "sample"): GpuSample,
    ("gpu", "xid"): GpuXid,
    ("gpu", "lost"): GpuLost,
    ("gpu", "unresponsive"): GpuUnresponsive,
    ("gpu", "responsive"): GpuResponsive,
    ("kernel", "xid"): KernelXid,
    ("kernel", "gpu_lost"): KernelGpuLost,
    ("kernel", "sxid"): KernelSxid,
    ("kernel", "mce"): KernelMachineCheck,
    ("kernel", "edac"): KernelMachineCheck,
    ("kernel", "line"): LogLine,
    ("kernel", "link_down"): LinkState,
    ("kernel", "link_up"): LinkState,
    ("kernel", "nic_error"): NicLine,
    ("kernel", "nic_warn"): NicLine,
    ("kernel", "pcie_aer"): PcieAer,
    ("kernel", "soft_lockup"): KernelStall,
    ("kernel", "hung_task"): KernelStall,
    ("kernel", "hard_lockup"): KernelStall,
    ("kernel", "panic"): KernelStall,
    ("kernel", "kernel_oops"): KernelCrash,
    ("kernel", "segfault"): KernelCrash,
    ("kernel", "oom_kill"): KernelOom,
    ("kernel", "kernel_deadlock"): KernelSystem,
    ("kernel", "kernel_limit"): KernelSystem,
    ("kernel", "clock_skew"): KernelClock,
    ("kernel", "disk_error"): KernelStorage,
    ("kernel", "fs_error"): KernelStorage,
    ("kernel", "nfs_error"): KernelStorage,
    ("kernel", "nfs_ok"): KernelStorage,
    ("kernel", "nvlink_error"): GpuDriverLine,
    ("kernel", "gsp_error"): GpuDriverLine,
    ("kernel", "peermem_error"): GpuDriverLine,
    ("kernel", "subsystem_error"): SubsystemLine,
    ("kernel", "suspect_line"): SuspectLine,
    ("nccl", "nccl_warn"): NcclWarn,
    ("nccl", "nccl_timeout"): NcclTimeout,
    ("nccl", "nccl_error"): NcclError,
    ("nccl", "cuda_error"): NcclError,
    ("nccl", "exception"): NcclException,
    ("nccl", "nan"): NcclNan,
    ("nccl", "nic_error"): NicLine,
    # A BMC SEL listing (ipmitool) printed by a health check or a job script: the catalogue's source-"any" rules
    # host.bmc_sel_uncorrectable / host.bmc_sel_drive_fault give the kernel's kinds on this source too.
    ("nccl", "edac"): KernelMachineCheck,
    ("nccl", "disk_error"): KernelStorage,
    ("nccl", "oom_kill"): SchedulerLine,
    ("nccl", "node_failure"): SchedulerLine,
    ("nccl", "worker_failed"): SchedulerLine,
    ("nccl", "suspect_line"): SuspectLine,
    ("nccl", "line"): LogLine,
    ("train", "step"): TrainStep,
    ("train", "checkpoint"): TrainCheckpoint,
    ("train", "eval"): TrainEval,
    ("train", "command_ack"): CommandAck,
    ("heartbeat", "beat"): HeartbeatBeat,
    ("stack", "stack_dump"): StackDump,
    ("stack", "recorder_dump"): RecorderDump,
    ("check", "result"): CheckResult,
    ("check", "replay"): CheckReplay,
    ("check", "replay_done"): CheckReplayDone,
    ("check", "command_ack"): CommandAck,
    ("net", "sample"): NetSample,
    ("host", "sample"): HostSample,
    ("job", "topology"): JobTopology,
    ("job", "restart"): JobRestart,
    ("job", "end"): JobEnd,
    ("summary", "window"): SummaryWindow,
    ("summary", "finding"): SummaryFinding,
    ("summary", "watermark"): SummaryWatermark,
    ("summary", "bundle"): SummaryBundle,
    ("summary", "clock"): SummaryClock,
}
# The name this table had when it held hand-written checks (tests/test_design_names.py reads its kinds).
SCHEMAS = PAYLOAD_TYPES


def _plain_interval(data: Any) -> bool:
    interval = data.get("interval_s")
    return interval is None or (type(interval) in (int, float) and 0 <= interval < math.inf)


def _gpu_sample_checked(event: Envelope) -> bool:
    """A GPU sample certainly valid: read by the typed reader, or plain (events.gpu_table, whose
    table the GPU rules and the feature windows then reuse)."""
    data = event.data
    return _plain_interval(data) and (type(data.get("gpus")) is GpuRows or gpu_table(event) is not None)


def _net_sample_checked(event: Envelope) -> bool:
    """A NIC sample read by the typed reader (events/net_reading.py), which checked every value."""
    data = event.data
    return type(data.get("ports")) is CheckedPorts and _plain_interval(data)


_CHECKED = {GpuSample: _gpu_sample_checked, NetSample: _net_sample_checked}


_LOG_SOURCES = ("kernel", "nccl")


def payload_type_of(event: Envelope) -> type[Payload] | None:
    """``event``'s payload Struct: its kind's, else :class:`ParsedLog` for a kind a user's catalogue
    rule made (a ``kernel`` / ``nccl`` event naming its ``rule``: diagnosis.engine.kinds.known_kind lets
    it in), else None (a kind the intake refuses anyway)."""
    payload_type = PAYLOAD_TYPES.get((event.source, event.kind))
    if payload_type is None and event.source in _LOG_SOURCES and isinstance(event.data.get("rule"), str):
        return ParsedLog
    return payload_type


def check_payload(event: Envelope) -> None:
    """Raise InvalidEvent (``data.<key>``) when a documented key has the wrong type; otherwise the
    event's typed payload is read (or certainly readable: see the module's docstring)."""
    if event._payload is not None:
        return
    payload_type = payload_type_of(event)
    if payload_type is None:
        return
    checked = _CHECKED.get(payload_type)
    if checked is not None and checked(event):
        return
    _read(event, payload_type)


P = TypeVar("P", bound=Payload)
P2 = TypeVar("P2", bound=Payload)
P3 = TypeVar("P3", bound=Payload)


@overload
def typed(event: Envelope, expected: type[P]) -> P: ...
@overload
def typed(event: Envelope, expected: tuple[type[P], type[P2]]) -> P | P2: ...
@overload
def typed(event: Envelope, expected: tuple[type[P], type[P2], type[P3]]) -> P | P2 | P3: ...


def typed(event: Envelope, expected: type[Payload] | tuple[type[Payload], ...]) -> Payload:
    """``event``'s payload as the Struct its reader names, read once and kept on the event;
    InvalidEvent naming the field where ``data`` does not fit.

    ``typed(event, TrainStep)`` (or a tuple of Structs, for a rule that reads several kinds) is the
    read the type checker sees: it returns that Struct, so a read of a field it lacks fails mypy,
    and an event whose kind carries another Struct (or none) is an InvalidEvent naming its kind,
    never a payload of the wrong shape. Every read names its Struct: there is no untyped form, so
    none can be written (issue 57)."""
    payload: Payload | None = event._payload
    if payload is None:  # not read yet: the payload check's quick ways, or no check ran
        payload_type = payload_type_of(event)
        if payload_type is not None:
            payload = _read(event, payload_type)
    if not isinstance(payload, expected):
        carried = "no payload Struct" if payload is None else type(payload).__name__
        raise InvalidEvent("kind", f"{event.source}/{event.kind} carries {carried}, not {_names(expected)}")
    return payload


def _read(event: Envelope, payload_type: type[Payload]) -> Payload:
    """``data`` read as its kind's own Struct, ``payload_type``, and kept on the event."""
    payload = convert(event.data, payload_type, from_attributes=payload_type is GpuSample)
    keep_payload(event, payload)
    return payload


def _names(expected: type[Payload] | tuple[type[Payload], ...]) -> str:
    return " or ".join(t.__name__ for t in (expected if isinstance(expected, tuple) else (expected,)))
