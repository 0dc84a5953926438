"""Dual-phase reproduction (ByteRobust): the verdict on what the launcher's reproduction runs showed.

ByteRobust calls it dual-phase replay, and the contracted names keep that word (the action
`dual_phase_replay`, the events `check`/`replay` and `check`/`replay_done`, the rungs
`replay_evict` / `replay_inconclusive`); in the code it is a reproduction, replay being a trace
published back to its topics (docs/CONTRIBUTING.md, "Words").

The ladder's `dual_phase_replay` rung sends a `restart` with a plan (remediation.ladder.ReproductionPlan:
horizontal and vertical groups); the launcher runs the job on each group on its own and reports
which reproduced the fault (`check`/`replay_done`). Only the machines where the one failing group
of each phase meet are convicted; when no group reproduces, or every group does, or several of
one phase do (the meeting point could hold healthy machines), a person is asked instead —
evicting a healthy machine is the worst outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from faultlens.remediation.ladder import ReproductionPlan, Step


def plan_from_dict(data: Any) -> ReproductionPlan:
    if not isinstance(data, Mapping):
        raise ValueError(f"a reproduction plan must be an object, got {type(data).__name__}")
    phases = []
    for key in ("horizontal", "vertical"):
        groups = data.get(key)
        if not isinstance(groups, list) or not groups or not all(isinstance(g, list) and g for g in groups):
            raise ValueError(f"reproduction plan {key!r} must be a non-empty list of non-empty lists")
        phases.append(tuple(tuple(str(n) for n in g) for g in groups))
    return ReproductionPlan(phases[0], phases[1])


@dataclass
class PendingReproduction:
    job: str
    command_id: str
    diagnosis: dict[str, Any]
    plan: ReproductionPlan
    started: float
    deadline: float

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "command_id": self.command_id, "diagnosis": self.diagnosis,
                "plan": self.plan.to_dict(), "started": self.started, "deadline": self.deadline}

    @classmethod
    def from_dict(cls, data: Any) -> "PendingReproduction":
        if not isinstance(data, Mapping):
            raise ValueError(f"pending reproduction must be an object, got {type(data).__name__}")
        try:
            return cls(str(data["job"]), str(data["command_id"]), dict(data["diagnosis"]),
                       plan_from_dict(data["plan"]), float(data["started"]), float(data["deadline"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"pending reproduction: {exc!r}") from None


def _phase_problem(name: str, groups: tuple[tuple[str, ...], ...], failing: list[int]) -> str | None:
    if any(i < 0 or i >= len(groups) for i in failing):
        return f"{name} phase names a group the plan does not have ({failing})"
    if not failing:
        return f"no {name} group reproduced the fault"
    if len(groups) > 1 and len(failing) == len(groups):
        return f"every {name} group reproduced the fault (not one machine's doing)"
    if len(failing) > 1:
        return f"{len(failing)} {name} groups reproduced the fault (their meeting points may hold healthy machines)"
    return None


def judge_reproduction(p: PendingReproduction, failing_horizontal: Iterable[int], failing_vertical: Iterable[int]) -> Step:
    """Evict the machines at the meeting point of the one failing group of each phase, or alert."""
    fh, fv = sorted(set(failing_horizontal)), sorted(set(failing_vertical))
    fault = p.diagnosis.get("fault", "?")
    params = {"failing_horizontal": fh, "failing_vertical": fv, "plan": p.plan.to_dict(), "replay_command": p.command_id}
    problems = [x for x in (_phase_problem("horizontal", p.plan.horizontal, fh),
                            _phase_problem("vertical", p.plan.vertical, fv)) if x]
    culprits = () if problems else p.plan.culprits(fh, fv)
    everyone = {n for g in p.plan.horizontal for n in g}
    if not problems and (not culprits or set(culprits) == everyone):
        problems.append("the failing groups meet at no single part of the job")
    if problems:
        return Step("replay_inconclusive", None, (), f"{fault}: dual-phase reproduction inconclusive — "
                    + "; ".join(problems) + "; no eviction, a person should look", params)
    params["restart"] = "warm_standby"
    return Step("replay_evict", "evict", culprits,
                f"{fault}: dual-phase reproduction reproduced the fault in horizontal group {fh[0]} and vertical "
                f"group {fv[0]}, which meet at {', '.join(culprits)}", params)
