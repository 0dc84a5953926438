"""What the remediation policy is told and what it answers: its configuration (the mode of each
job, the waits, the ladder's thresholds) and the :class:`Decision` it records for every diagnosis
(also when nothing is sent), with the deterministic id of the command it makes.

The Policy (remediation.policy) makes decisions; the consumer logs them and hands them to the
actuator (remediation.actuators.plan), the demo and `faultlens up` read them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from faultlens.remediation.lemon import LemonConfig

MODES = ("observe", "dry_run", "act")


def command_id(diagnosis_id: str, action: str) -> str:
    """Deterministic, so a re-delivered diagnosis makes the same command and trainers drop the copy."""
    return hashlib.sha256(f"{diagnosis_id}:{action}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class PolicyConfig:
    act_on: frozenset[str] = frozenset()
    act_on_all: bool = False
    dry_run: bool = False
    ttl_s: float = 300.0
    min_confidence: float = 0.5
    settle_s: float = 30.0
    episode_s: float = 3600.0
    standby_names: tuple[str, ...] = ()
    daily_failure_rate: float = 0.0012
    standby_window_days: float = 1.0
    # Stop-time diagnosis (remediation.stop_checks): ask the node agents to run their checks before
    # the ladder's first rung, wait up to checks_wait_s per ask, ask silent machines checks_asks times.
    stop_checks: bool = False
    checks_wait_s: float = 420.0
    checks_asks: int = 2
    reproduction_wait_s: float = 3600.0  # how long a dual-phase reproduction may take before a person is asked
    lemon: LemonConfig = field(default_factory=LemonConfig)  # machines that keep failing (remediation.lemon)

    def mode(self, job: str) -> str:
        if not (self.act_on_all or job in self.act_on):
            return "observe"
        return "dry_run" if self.dry_run else "act"


@dataclass(frozen=True)
class Decision:
    ts: float
    job: str
    diagnosis_id: str
    fault: str
    rung: str
    action: str  # the command action, or "none"
    nodes: tuple[str, ...]
    reason: str
    mode: str
    sent: bool
    blocked: str = ""
    command: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)  # the step's params (e.g. bring_back), sent or not
    # What the actuator did on the scheduler for this decision (events.action_record, as dicts);
    # filled in by the consumer after the decision, empty without one.
    actions: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "ts": self.ts, "job": self.job, "diagnosis_id": self.diagnosis_id, "fault": self.fault,
            "rung": self.rung, "action": self.action, "nodes": list(self.nodes), "reason": self.reason,
            "mode": self.mode, "sent": self.sent, "blocked": self.blocked, "command": self.command,
            "params": self.params,
            "actions": list(self.actions),
        }
