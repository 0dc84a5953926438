"""Which nodes a job restarts on, and from which checkpoint (pure): evicted nodes leave, each
replaced by a spare while spares last, the command's replacements first, then the launcher's own
``--standby`` list. The launcher (trainer_hooks.launcher) carries the plan out.
"""

from __future__ import annotations

from dataclasses import dataclass

from faultlens.events.command import Command
from faultlens.trainer_hooks.elastic_commands import resume_of


@dataclass(frozen=True)
class RestartPlan:
    nodes: tuple[str, ...]
    nodes_out: tuple[str, ...]
    nodes_in: tuple[str, ...]
    resume: str  # "latest" or "rollback"
    standby: tuple[str, ...]  # what is left of the launcher's own standby list


def plan_restart(nodes: tuple[str, ...], standby: tuple[str, ...], action: str,
                 evicted: tuple[str, ...] = (), replacements: tuple[str, ...] = (),
                 cmd: Command | None = None) -> RestartPlan:
    """The job's next node list: evicted nodes leave, each replaced by a spare while spares last.

    Spares come from the command (the remediator's pool) first, then the launcher's own list;
    a spare already in the job is skipped. Order is kept so ranks move as little as possible.
    """
    out = tuple(n for n in nodes if n in evicted) if action == "evict" else ()
    spares = [s for s in (*replacements, *standby) if s not in nodes]
    spares = list(dict.fromkeys(spares))
    new: list[str] = []
    taken: list[str] = []
    for n in nodes:
        if n not in out:
            new.append(n)
        elif spares:
            taken.append(spares.pop(0))
            new.append(taken[-1])
    left = tuple(s for s in standby if s not in taken)
    # The same resume rule as `faultlens run` (a rollback for a fault that leaves the state good
    # resumes from the newest checkpoint): trainer_hooks.elastic_commands.resume_choice.
    return RestartPlan(tuple(new), out, tuple(taken), resume_of(action, cmd), left)
