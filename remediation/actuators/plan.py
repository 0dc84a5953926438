"""Which actuator operations a remediation decision asks for (pure).

- an ``evict`` takes its nodes out of the scheduler and then requeues the job, so the scheduler
  restarts it without them (the trainer's own restart would land on the same machines);
- a ``bring_back`` list in the decision's params (the ladder adds it once a machine passed its
  stop-time checks) brings those machines back into service;
- a decision the safety gate blocked asks for nothing: the refusal is the record.
"""

from __future__ import annotations

from typing import Any, Mapping

from faultlens.remediation.actuators.base import ActionRequest
from faultlens.remediation.decision import Decision


def _nodes(value: Any) -> tuple[str, ...]:
    """A param naming machines: a list of names (or one name); anything else names none."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(dict.fromkeys(n for n in value if isinstance(n, str) and n))


def decision_params(decision: Decision) -> Mapping[str, Any]:
    params = getattr(decision, "params", None)  # a future Decision may carry the step's params itself
    if isinstance(params, Mapping) and params:
        return params
    command = decision.command or {}
    params = command.get("params") if isinstance(command, Mapping) else None
    return params if isinstance(params, Mapping) else {}


def plan(decision: Decision, *, requeue_on_evict: bool = True) -> list[ActionRequest]:
    if decision.blocked:
        return []
    params = decision_params(decision)
    base = {"job": decision.job, "diagnosis_id": decision.diagnosis_id, "fault": decision.fault,
            "reason": decision.reason, "command": decision.action}
    out: list[ActionRequest] = []
    evicted = decision.nodes if decision.action == "evict" else ()
    back = tuple(n for n in _nodes(params.get("bring_back")) if n not in evicted)
    if back:
        out.append(ActionRequest("bring_back", nodes=back, **base))
    if evicted:
        out.append(ActionRequest("take_out", nodes=evicted, **base))
    # A machine taken out of service for good (a lemon: remediation.fleet; the decision's fault,
    # hardware_inspection, is the scheduler's reason and the Kubernetes taint). No requeue: the
    # job's own decision already restarted it if it had to.
    drain = _nodes(params.get("take_out"))
    if drain:
        out.append(ActionRequest("take_out", nodes=drain, **base))
    if evicted and requeue_on_evict:
        out.append(ActionRequest("requeue", nodes=evicted, **base))
    return out
