"""Payload Structs of parsed log events: sources ``kernel`` and ``nccl`` (docs/events.md, "Parsed
log events" and each source's table; the rules every field follows: events/payload_fields.py).

Every parsed event carries the common keys of :class:`ParsedLog` (parsing/line.py ``common``,
the flood fold's ``count`` / ``folded`` / ``first_ts`` / ``last_ts``). A catalogue rule
(parsing/rules.toml) adds its pattern's named groups as keys: each group a shipped rule of a kind
can fill is a field of that kind's Struct, typed :data:`Group` (parsing/rules.py turns a group
whose text is an integer into an int, any other into the text), so a detector reads
``typed(event, KernelStorage).server`` as it reads a key the code writes; tests/events/test_payloads_producers.py
fails when a shipped rule names a group its kind's Struct lacks. A user's rule (``--rules FILE``)
may name other groups, or a kind of its own (its events carry ``rule``, and read as
:class:`ParsedLog`): those stay keys of ``event.data``, read as sent.

Keys the code writes are typed as it writes them; a key a catalogue group fills as well is a
:data:`Group`, whatever the code writes, so no rule's match is ever refused for its text (``pid``
is an int either way: every shipped rule's ``pid`` group is digits).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from faultlens.events.diagnosis_record import Action, FaultClass
from faultlens.events.payload_fields import Flag, Int, NonNegInt, Number, RankedPayload, Text

# A catalogue rule's named group: an int where its text is one (signed too), else the text.
Group = Int | Text
Severity = Literal["fatal", "error", "warn", "info"]  # parsing/rules.py SEVERITIES
Confidence = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]  # a calibrated probability


class ParsedLog(RankedPayload, frozen=True):
    """The keys every parsed log event carries (docs/events.md, "Parsed log events"); the Struct
    of a kind a user's catalogue rule makes. ``rank``: the training rank where an nccl line names
    one. ``count`` / ``folded`` / ``first_ts`` / ``last_ts``: a folded repeat
    (collectors/flood_fold.py); ``scope``: ``job`` for a rule whose fault is the job's (an NFS
    server)."""

    line: Text | None = None
    fault: FaultClass | None = None
    action: Action | None = None
    severity: Severity | None = None
    rule: Text | None = None
    text: Text | None = None
    scope: Text | None = None
    count: NonNegInt | None = None
    folded: Flag | None = None
    first_ts: Number | None = None
    last_ts: Number | None = None


# --- source `kernel` (parsing/kernel_log.py, kernel_host.py, kernel_nic.py, rules.toml) --------


class LinkState(ParsedLog, frozen=True):
    """``kernel``/``link_down`` and ``kernel``/``link_up``: a NIC / IB port's state."""

    device: Text | None = None
    port: Int | None = None
    state: Text | None = None
    driver: Text | None = None


class NicLine(ParsedLog, frozen=True):
    """``kernel``/``nic_error``, ``kernel``/``nic_warn`` and ``nccl``/``nic_error``: a NIC's error
    (mlx5 health / syndrome, a NETDEV WATCHDOG, NCCL's IB async event) or a NIC line recorded."""

    device: Group | None = None
    driver: Group | None = None
    queue: Group | None = None
    port: Group | None = None
    code: Group | None = None
    cpu: Group | None = None
    ibdev: Group | None = None
    watts: Group | None = None
    what: Group | None = None
    command: Group | None = None
    event: Group | None = None


class PcieAer(ParsedLog, frozen=True):
    """``kernel``/``pcie_aer``: a PCIe AER error of a device."""

    pci: Text | None = None
    error_type: Text | None = None


class KernelStall(ParsedLog, frozen=True):
    """``kernel``/``soft_lockup``, ``hung_task``, ``hard_lockup`` and ``panic``: a CPU or task stuck,
    or the kernel gave up."""

    process: Group | None = None
    pid: Int | None = None
    cpu: Group | None = None
    secs: Group | None = None


class KernelCrash(ParsedLog, frozen=True):
    """``kernel``/``kernel_oops`` and ``kernel``/``segfault``: the kernel's own bug, or a process
    that crashed inside a library (libnccl, libcuda)."""

    process: Text | None = None
    pid: Int | None = None
    lib: Text | None = None
    what: Group | None = None
    where: Group | None = None


class KernelOom(ParsedLog, frozen=True):
    """``kernel``/``oom_kill``: the kernel's OOM killer took a process (``cgroup``: a cgroup's limit)."""

    pid: Int | None = None
    process: Group | None = None
    cgroup: Flag | None = None
    cgroup_path: Group | None = None
    limit_path: Group | None = None
    gfp_mask: Group | None = None


class KernelStorage(ParsedLog, frozen=True):
    """``kernel``/``disk_error``, ``fs_error``, ``nfs_error`` and ``nfs_ok``: a disk, a file system
    or an NFS server (the catalogue's storage rules)."""

    device: Group | None = None
    device2: Group | None = None
    fs: Group | None = None
    check: Group | None = None  # a Ceph monitor's health check code (SLOW_OPS, OSD_DOWN, ...)
    array: Group | None = None
    sector: Group | None = None
    block: Group | None = None
    corrupt: Group | None = None
    flush: Group | None = None
    gen: Group | None = None
    rd: Group | None = None
    wr: Group | None = None
    server: Group | None = None


class KernelSystem(ParsedLog, frozen=True):
    """``kernel``/``kernel_deadlock`` and ``kernel``/``kernel_limit``: a leaked netdevice reference,
    a kernel table full."""

    device: Group | None = None
    limit: Group | None = None


class KernelClock(ParsedLog, frozen=True):
    """``kernel``/``clock_skew``: the node's clock went wrong (the kernel's clocksource watchdog
    dropped a clocksource, a time daemon found the clock off its sources). ``device``: the
    clocksource; ``offset``: the seconds the daemon found the clock off by."""

    device: Group | None = None
    offset: Group | None = None


class GpuDriverLine(ParsedLog, frozen=True):
    """``kernel``/``nvlink_error``, ``gsp_error`` and ``peermem_error``: NVLink, the GSP firmware, or
    nvidia-peermem, by a catalogue rule."""

    handle: Group | None = None
    func: Group | None = None
    what: Group | None = None


class SubsystemLine(ParsedLog, frozen=True):
    """``kernel``/``subsystem_error``: an error line no precise rule took, classed by the subsystem
    that wrote it (parsing/subsystems.py). ``priority``: the kmsg level the line carried."""

    subsystem: Text | None = None
    tag: Text | None = None
    basis: Text | None = None
    finding: Text | None = None
    device: Group | None = None
    priority: Int | None = None


class SuspectLine(ParsedLog, frozen=True):
    """``kernel``/``suspect_line`` and ``nccl``/``suspect_line``: an alarming line classed by the
    line model (parsing/line_model.py), with its calibrated confidence."""

    basis: Text | None = None
    confidence: Confidence | None = None
    finding: Text | None = None
    subsystem: Text | None = None
    priority: Int | None = None


# --- source `nccl` (parsing/trainer_log.py, nccl_lines.py, rules.toml) ------------------------


class NcclWarn(ParsedLog, frozen=True):
    """``nccl``/``nccl_warn``: a NCCL WARN line (``device`` is NCCL's ``[3]``, not the rank)."""

    device: Group | None = None
    host: Text | None = None
    pid: Int | None = None
    ib_error: Int | None = None
    ib_opcode: Int | None = None
    peer: Text | None = None


class SchedulerLine(ParsedLog, frozen=True):
    """``nccl``/``oom_kill``, ``node_failure`` and ``worker_failed``: what Slurm or torchrun said
    of the job's processes (a catalogue rule). ``count`` of Slurm's oom-kill line is the rule's
    group: the oom-kill events it reports."""

    host: Group | None = None
    on: Group | None = None
    tasks: Group | None = None
    exitcode: Group | None = None

