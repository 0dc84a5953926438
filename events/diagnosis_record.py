"""The diagnosis record and the fault-class and action names of docs/design.md §9 (a contract: add, never rename)."""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Any, TypeVar

import orjson
from msgspec.structs import force_setattr

from faultlens.events.envelope import InvalidEvent
from faultlens.events.record import Record


class FaultClass(StrEnum):
    """A fault class of docs/design.md §9. A member equals its name as a string
    (``FaultClass.GPU_LOST == "gpu_lost"``) and encodes as it, so records and comparisons with
    the names read as they always did."""

    GPU_LOST = "gpu_lost"
    GPU_MEMORY = "gpu_memory"
    NVLINK = "nvlink"
    GPU_THERMAL = "gpu_thermal"
    GPU_RESET_REQUIRED = "gpu_reset_required"
    NIC = "nic"
    KERNEL = "kernel"
    HOST_OOM = "host_oom"
    CUDA_ERROR = "cuda_error"
    NCCL_ERROR = "nccl_error"
    USER_CODE = "user_code"
    NAN_LOSS = "nan_loss"
    LOSS_SPIKE = "loss_spike"
    JOB_HANG = "job_hang"
    FAIL_SLOW = "fail_slow"
    NODE_SILENT = "node_silent"
    APP_FAULT = "app_fault"
    UNKNOWN = "unknown"
    # Added (never renamed): a node whose clock is off; record-only, its events still count.
    CLOCK_SKEW = "clock_skew"
    # Added: a whole job's telemetry stopped (it ended, or the pipeline upstream of diagnosis lost
    # it): an alert about the job or the pipeline, never about a machine.
    TELEMETRY_LOST = "telemetry_lost"
    # Added (docs/design.md §9): local disk, filesystem or NFS. A failing local disk evicts its node; an
    # NFS server outage is job-wide and only alerts.
    STORAGE = "storage"
    # Added: the node agent beats but cannot see part of its node (NVML stuck at the node level, a
    # log follower stalled, a spool that cannot keep what it cannot send): an alert naming what it
    # cannot see, never an eviction (the machine may be fine; the agent is half blind).
    AGENT_BLIND = "agent_blind"
    # Added: a run whose loss stopped improving (at chance, never learned, frozen, regressed, or a
    # gradient norm at zero; diagnosis/rules/loss_stalled.py): an alert, or a rollback to a better checkpoint.
    LOSS_STALLED = "loss_stalled"


class Action(StrEnum):
    """The first action of the decision tree a diagnosis recommends (docs/design.md §3-§4). ``none``
    records only; ``stop_time_diagnosis`` asks the ladder to run diagnostics, then reattempt /
    rollback / replay. ``alert`` asks a person to look (a suspicion without the evidence an
    eviction needs, an agent that stopped beating while its node still trains): like ``none``,
    nothing is done automatically. A member equals its name as a string."""

    EVICT = "evict"
    EVICT_RESET_GPU = "evict_reset_gpu"
    REATTEMPT = "reattempt"
    ROLLBACK = "rollback"
    RESTART = "restart"
    CAPTURE_STACKS = "capture_stacks"
    STOP_TIME_DIAGNOSIS = "stop_time_diagnosis"
    INSPECT_HARDWARE = "inspect_hardware"
    NONE = "none"
    ALERT = "alert"


# The names as plain strings, in the order above (plots colour the classes in this order).
FAULT_CLASSES: tuple[str, ...] = tuple(c.value for c in FaultClass)
ACTIONS: tuple[str, ...] = tuple(a.value for a in Action)

_Name = TypeVar("_Name", FaultClass, Action)


def _member(names: type[_Name], value: Any, field_name: str, what: str) -> _Name:
    """``value`` (a name, or a member) as its member; InvalidEvent naming the field for any other
    value (an unknown name, a number, null), as a record with it has always been refused."""
    try:
        return names(value)
    except (ValueError, TypeError):
        raise InvalidEvent(field_name, f"unknown {what} {value!r}") from None


class Diagnosis(Record, frozen=True, kw_only=True):
    """A diagnosis, its fields in the order they go on the bus."""

    REQUIRED = ("id", "job", "ts", "onset", "fault", "action")
    WHAT = "a diagnosis"

    # Left empty, the id is derived from what was decided (job, fault, action, onset, suspects,
    # evidence): analysing the same trace twice, or a consumer re-running after a crash, gives
    # the same ids, so every downstream store dedups by id. A folded diagnosis re-emitted with a
    # higher count keeps its id (msgspec.structs.replace copies it).
    id: str = ""
    job: str
    ts: float
    onset: float
    # Given as a member or as its name (a str); kept as the member (FaultClass("gpu_lost")), which
    # equals, hashes and encodes as the name, so records on the bus are byte for byte as before.
    fault: FaultClass
    nodes: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    group: str | None = None
    confidence: float = 1.0
    action: Action
    evidence: tuple[str, ...] = ()
    detail: str = ""
    count: int = 1
    # The rule that made the finding (a parsing rule id, an Xid table entry, a detector's name), so
    # `faultlens rules diff` can say what each rule gained and lost. Not part of the id, and left out
    # of the record when None, so a diagnosis without it is byte for byte what it was.
    rule: str | None = None

    def __post_init__(self) -> None:
        if type(self.fault) is not FaultClass:
            force_setattr(self, "fault", _member(FaultClass, self.fault, "fault", "fault class"))
        if type(self.action) is not Action:
            force_setattr(self, "action", _member(Action, self.action, "action", "action"))
        for name in ("nodes", "ranks", "evidence"):  # a list given is kept as the record's tuple
            if type(getattr(self, name)) is not tuple:
                force_setattr(self, name, tuple(getattr(self, name)))
        if not self.id:
            basis = orjson.dumps([self.job, self.fault, self.action, round(float(self.onset), 3), list(self.nodes),
                                  list(self.ranks), self.group, list(self.evidence[:16])])
            force_setattr(self, "id", hashlib.blake2b(basis, digest_size=16).hexdigest())
        if not 0.0 <= float(self.confidence) <= 1.0:
            raise InvalidEvent("confidence", f"{self.confidence!r} outside 0..1")

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["confidence"] = round(float(self.confidence), 4)  # on the bus to four places, as always
        if self.rule is None:
            del out["rule"]
        return out
