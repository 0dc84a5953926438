"""The actuator interface: how the remediation consumer changes the cluster itself.

Commands on the bus reach the trainer; an actuator reaches the scheduler, so that a machine
taken out stays out (Slurm drain, Kubernetes cordon + taint) and the job comes back elsewhere.
Only the remediation consumer holds an actuator (it holds the cluster credentials; nodes never
do). Implementations raise :class:`ActuatorError` with a line a person can act on;
:func:`carry_out` turns every request into an :class:`ActionRecord`, honours observe-only and
never raises, so a broken scheduler never stops the consumer.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

from faultlens.events.action_record import OPERATIONS, ActionRecord

log = logging.getLogger(__name__)

# The taint key / reason prefix that says faultlens put a machine out (and may bring it back).
REASON_PREFIX = "faultlens"


class ActuatorError(RuntimeError):
    """An operation the scheduler refused or that could not be run; the message says why."""


@dataclass(frozen=True)
class ActionRequest:
    """One operation asked of the actuator, with the decision that asked for it."""

    op: str  # one of events.action_record.OPERATIONS
    job: str
    nodes: tuple[str, ...] = ()
    diagnosis_id: str = ""
    fault: str = ""
    reason: str = ""
    command: str = ""  # the command action of the decision (evict, reattempt, ...)

    def __post_init__(self) -> None:
        if self.op not in OPERATIONS:
            raise ValueError(f"unknown actuator operation {self.op!r} (one of {', '.join(OPERATIONS)})")

    def scheduler_reason(self) -> str:
        """The text a scheduler shows next to the machine: who, which diagnosis, which fault."""
        text = f"{REASON_PREFIX} diagnosis={self.diagnosis_id or '-'} fault={self.fault or '-'}"
        return f"{text}: {self.reason}" if self.reason else text

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "job": self.job, "nodes": list(self.nodes), "diagnosis_id": self.diagnosis_id,
                "fault": self.fault, "reason": self.reason, "command": self.command}


class Actuator(ABC):
    """Three operations; each returns a short text of what was done, or raises ActuatorError."""

    name: str = ""

    @abstractmethod
    def take_out(self, request: ActionRequest) -> str: ...

    @abstractmethod
    def requeue(self, request: ActionRequest) -> str: ...

    @abstractmethod
    def bring_back(self, request: ActionRequest) -> str: ...

    def perform(self, request: ActionRequest) -> str:
        return {"take_out": self.take_out, "requeue": self.requeue, "bring_back": self.bring_back}[request.op](request)


class NoActuator(Actuator):
    """`--actuator none`: the scheduler is left alone (the trainer's launcher does what it can);
    what an actuator would have done is still recorded, as skipped."""

    name = "none"

    def take_out(self, request: ActionRequest) -> str:
        return "no actuator"

    requeue = bring_back = take_out


def carry_out(actuator: Actuator, request: ActionRequest, mode: str, *,
              clock: Callable[[], float] = time.time) -> ActionRecord:
    """Perform ``request`` when ``mode`` is ``act``; the record of what happened, whatever happened."""
    started = clock()
    t0 = time.monotonic()

    def record(outcome: str, detail: str) -> ActionRecord:
        return ActionRecord(ts=started, job=request.job, op=request.op, actuator=actuator.name, nodes=request.nodes,
                            diagnosis_id=request.diagnosis_id, fault=request.fault, reason=request.reason,
                            mode=mode, outcome=outcome, detail=detail, duration_s=round(time.monotonic() - t0, 3))

    if isinstance(actuator, NoActuator):
        return record("skipped", "no actuator (--actuator none)")
    if mode != "act":
        what = "observe-only" if mode == "observe" else mode.replace("_", " ")
        return record("skipped", f"{what}: would {request.op.replace('_', ' ')} "
                                 f"{','.join(request.nodes) or request.job} with {actuator.name}")
    try:
        detail = actuator.perform(request)
    except ActuatorError as exc:
        log.error("actuator %s: %s of %s failed: %s", actuator.name, request.op, ",".join(request.nodes) or request.job, exc)
        return record("error", str(exc))
    except Exception as exc:  # noqa: BLE001 - an actuator bug must not stop remediation; it is recorded
        log.exception("actuator %s: %s raised", actuator.name, request.op)
        return record("error", f"{type(exc).__name__}: {exc}")
    log.warning("actuator %s: %s %s: %s", actuator.name, request.op, ",".join(request.nodes) or request.job, detail)
    return record("ok", detail)
