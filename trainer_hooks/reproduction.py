"""Dual-phase reproduction in the launcher (ByteRobust): run the job on each group of a reproduction plan on its
own and report which groups reproduce the fault.

The remediation ladder's `dual_phase_replay` rung sends a `restart` whose params carry ``mode:
dual_phase_replay`` and a ``plan`` (``horizontal`` and ``vertical`` lists of node groups,
remediation.ladder.ReproductionPlan). Each group runs the trainer from the latest checkpoint for a few
steps (``FAULTLENS_REPLAY_STEPS``; the trainer neither checkpoints nor publishes a topology in a
reproduction run, so the job's own state is untouched); a group reproduces the fault when a rank exits
non-zero or the run outlives its timeout (a hang). A group that is the whole job is not run
again: the job itself just failed, which is why there is a reproduction. One `check`/`replay` event per
group and one `check`/`replay_done` event at the end go to ``telemetry.checks``, for the ladder to
convict the machines where the failing groups meet (remediation.reproduction).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from faultlens.events.command import Command
from faultlens.events.envelope import Envelope

PHASES = ("horizontal", "vertical")


@dataclass(frozen=True)
class GroupRun:
    phase: str
    group: int
    nodes: tuple[str, ...]
    reproduced: bool
    detail: str
    exit_codes: dict[str, int | None]
    duration_s: float = 0.0


def reproduction_groups(params: Mapping[str, Any], job_nodes: tuple[str, ...]) -> dict[str, list[tuple[str, ...]]]:
    """The plan's groups, each limited to machines the job runs on now. Raises ValueError on a bad plan."""
    plan = params.get("plan")
    if not isinstance(plan, Mapping):
        raise ValueError("dual_phase_replay without a plan")
    out: dict[str, list[tuple[str, ...]]] = {}
    for phase in PHASES:
        groups = plan.get(phase)
        if not isinstance(groups, list) or not groups or not all(isinstance(g, list) for g in groups):
            raise ValueError(f"plan {phase!r} must be a non-empty list of node lists")
        out[phase] = [tuple(str(n) for n in g if n in job_nodes) for g in groups]
    return out


def judge_run(codes: dict[str, int | None], timed_out: bool, timeout_s: float) -> tuple[bool, str]:
    """Pure: did this group's run reproduce the fault?"""
    if timed_out:
        return True, f"still running after {timeout_s:g}s (a hang reproduces)"
    bad = {n: c for n, c in codes.items() if c not in (0, None)}
    if bad:
        return True, "exited " + ", ".join(f"{n}={c}" for n, c in sorted(bad.items()))
    return False, f"ran clean on {', '.join(sorted(codes))}"


def run_reproduction(cmd: Command, job: str, job_nodes: tuple[str, ...],
               run_group: Callable[[tuple[str, ...]], tuple[dict[str, int | None], bool]], timeout_s: float,
               publish: Callable[[Envelope], None], emit: Callable[[dict], None]) -> dict[str, list[int]]:
    """Every group of both phases in turn; returns the failing group indices per phase.

    ``run_group(nodes)`` runs the job on ``nodes`` and returns (exit code per node, timed out).
    """
    groups = reproduction_groups(cmd.params, job_nodes)
    failing: dict[str, list[int]] = {p: [] for p in PHASES}
    for phase in PHASES:
        for i, nodes in enumerate(groups[phase]):
            start = time.monotonic()
            if not nodes:
                run = GroupRun(phase, i, nodes, False, "no machine of this group is in the job now", {})
            elif set(nodes) == set(job_nodes):
                run = GroupRun(phase, i, nodes, True, "the whole job: it failed already (why we reproduce)", {})
            else:
                codes, timed_out = run_group(nodes)
                reproduced, detail = judge_run(codes, timed_out, timeout_s)
                run = GroupRun(phase, i, nodes, reproduced, detail, codes, time.monotonic() - start)
            if run.reproduced:
                failing[phase].append(i)
            data = {"command_id": cmd.id, "diagnosis_id": cmd.diagnosis_id, "phase": phase, "group": i,
                    "nodes": list(run.nodes), "reproduced": run.reproduced, "detail": run.detail,
                    "exit_codes": run.exit_codes, "duration_s": round(run.duration_s, 3)}
            publish(Envelope(ts=time.time(), job=job, node="-", source="check", kind="replay", data=data))
            emit({"event": "replay_group", **data})
    done = {"command_id": cmd.id, "diagnosis_id": cmd.diagnosis_id, "failing_horizontal": failing["horizontal"],
            "failing_vertical": failing["vertical"], "plan": {p: [list(g) for g in groups[p]] for p in PHASES}}
    publish(Envelope(ts=time.time(), job=job, node="-", source="check", kind="replay_done", data=done))
    emit({"event": "replay_done", **done})
    return failing
