"""The escalation ladder of docs/design.md §4, one per job, and the dual-phase reproduction plan.

Pure: a diagnosis and the job's current nodes go in, a :class:`Step` (what to do and why) comes
out; the only state is the job's recent failures, kept so that a crash that comes back climbs a
rung instead of repeating the same remedy forever.

1. high-confidence hardware → evict the nodes, restart on warm standbys;
2. user code → rollback, no eviction;
3. crash / NaN with no clear culprit → stop-time diagnosis, then reattempt → rollback →
   dual-phase reproduction as the same failure keeps coming back (NaN skips the reattempt: running
   the same data again in place reproduces it);
4. hang / fail-slow → capture stacks of every rank, then evict the group the clustering blames.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from faultlens.events.diagnosis_record import Diagnosis

HARDWARE_ACTIONS = ("evict", "evict_reset_gpu", "inspect_hardware")
IMPLICIT_FAULTS = ("job_hang", "fail_slow")

# Rungs climbed by repeated failures of one job, by the diagnosis's first action.
# `evict_suspects` is skipped when the diagnosis names no nodes.
SEQUENCES: dict[str, tuple[str, ...]] = {
    "stop_time_diagnosis": ("reattempt", "rollback", "dual_phase_replay"),
    "reattempt": ("reattempt", "evict_suspects", "rollback", "dual_phase_replay"),
    "restart": ("restart", "evict_suspects", "rollback", "dual_phase_replay"),
}
NUMERIC_SEQUENCE = ("rollback", "dual_phase_replay")
NUMERIC_FAULTS = ("nan_loss", "loss_spike")

# The command each rung sends (events.command.COMMAND_ACTIONS).
RUNG_ACTION = {
    "reattempt": "reattempt",
    "restart": "restart",
    "rollback": "rollback",
    "evict_suspects": "evict",
    "dual_phase_replay": "restart",
}


@dataclass(frozen=True)
class Step:
    """One decision of the ladder. ``action`` is a command action, or None to only record it."""

    rung: str
    action: str | None
    nodes: tuple[str, ...]
    reason: str
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def evicts(self) -> bool:
        return self.action == "evict"


@dataclass(frozen=True)
class ReproductionPlan:
    """Machines laid out on a grid: each is in one horizontal (row) and one vertical (column) group.

    Phase one runs every horizontal group on its own, phase two every vertical group; a machine
    that breaks its job breaks exactly one group of each phase, so the failing row and the failing
    column meet at it.
    """

    horizontal: tuple[tuple[str, ...], ...]
    vertical: tuple[tuple[str, ...], ...]

    def culprits(self, failing_horizontal: Iterable[int], failing_vertical: Iterable[int]) -> tuple[str, ...]:
        rows = {n for i in failing_horizontal for n in self.horizontal[i]}
        cols = {n for i in failing_vertical for n in self.vertical[i]}
        return tuple(n for group in self.horizontal for n in group if n in rows and n in cols)

    def locate(self, failed: Iterable[str]) -> tuple[str, ...]:
        """The culprits given which machines are really bad: what the two phases would report."""
        bad = set(failed)
        rows = [i for i, g in enumerate(self.horizontal) if bad & set(g)]
        cols = [i for i, g in enumerate(self.vertical) if bad & set(g)]
        return self.culprits(rows, cols)

    def to_dict(self) -> dict[str, Any]:
        return {"horizontal": [list(g) for g in self.horizontal], "vertical": [list(g) for g in self.vertical]}


def dual_phase_plan(nodes: Iterable[str]) -> ReproductionPlan:
    """A near-square grid of ``nodes`` (in the given order, duplicates dropped)."""
    order = list(dict.fromkeys(nodes))
    if not order:
        raise ValueError("a reproduction plan needs at least one machine")
    cols = math.ceil(math.sqrt(len(order)))
    rows = math.ceil(len(order) / cols)
    horizontal = tuple(tuple(order[r * cols:(r + 1) * cols]) for r in range(rows))
    vertical = tuple(tuple(order[i] for i in range(c, len(order), cols)) for c in range(cols))
    return ReproductionPlan(horizontal, vertical)


@dataclass
class JobLadder:
    """The escalation state of one job."""

    job: str
    min_confidence: float = 0.5
    episode_s: float = 3600.0
    settle_s: float = 30.0
    failures: list[float] = field(default_factory=list)  # ts of each rung climbed in this episode
    sequence: str = ""
    rung: str = ""  # the last rung climbed, for people reading the state file; decide() never reads it

    def to_dict(self) -> dict[str, Any]:
        """The episode (remediation.state persists it); the limits come from the config, not the file."""
        return {"job": self.job, "sequence": self.sequence, "rung": self.rung, "count": len(self.failures),
                "last": self.failures[-1] if self.failures else None, "failures": list(self.failures)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], min_confidence: float = 0.5, episode_s: float = 3600.0,
                  settle_s: float = 30.0) -> "JobLadder":
        """Raises ValueError for anything that is not what :meth:`to_dict` writes."""
        if not isinstance(data, Mapping):
            raise ValueError(f"ladder must be an object, got {type(data).__name__}")
        job, sequence, rung, failures = data.get("job"), data.get("sequence"), data.get("rung", ""), data.get("failures")
        if not isinstance(job, str) or not job:
            raise ValueError(f"ladder 'job' must be a non-empty string, got {job!r}")
        if not isinstance(sequence, str) or (sequence and sequence not in SEQUENCES):
            raise ValueError(f"ladder 'sequence' must be one of {sorted(SEQUENCES)} or empty, got {sequence!r}")
        if not isinstance(rung, str):
            raise ValueError(f"ladder 'rung' must be a string, got {rung!r}")
        if not isinstance(failures, list) or not all(
                isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) for t in failures):
            raise ValueError(f"ladder 'failures' must be a list of times, got {failures!r}")
        return cls(job, min_confidence, episode_s, settle_s, [float(t) for t in failures], sequence, rung)

    def decide(self, d: Diagnosis, job_nodes: tuple[str, ...] = ()) -> Step:
        if d.action in HARDWARE_ACTIONS:
            return self._evict(d)
        if d.fault == "user_code" or d.action == "rollback":
            return Step("user_code_rollback", "rollback", (), f"{d.fault}: roll back to the last good checkpoint, no eviction")
        if d.action == "capture_stacks":
            nodes = job_nodes or d.nodes
            return Step("capture_stacks", "capture_stacks", nodes,
                        f"{d.fault}: capture the stacks of every rank to find the group to blame",
                        {"suspects": list(d.nodes), "ranks": list(d.ranks)})
        if d.action in SEQUENCES:
            return self._climb(d, job_nodes)
        return Step("record", None, d.nodes, f"{d.fault}: action {str(d.action)!r} is recorded only")

    def _evict(self, d: Diagnosis) -> Step:
        if not d.nodes:
            return Step("record", None, (), f"{d.fault}: {d.action} names no node; recorded only")
        if d.confidence < self.min_confidence:
            return Step("record", None, d.nodes,
                        f"{d.fault}: confidence {d.confidence:.2f} below {self.min_confidence:.2f}; recorded only")
        params: dict[str, Any] = {"restart": "warm_standby"}
        if d.action == "evict_reset_gpu":
            params["reset_gpu"] = True
        if d.action == "inspect_hardware":
            params["inspect_hardware"] = True
        if d.fault in IMPLICIT_FAULTS:
            params["group"] = d.group
            return Step("evict_group", "evict", d.nodes,
                        f"{d.fault}: evict the group {d.group or '?'} the stacks blame", params)
        return Step("hardware_evict", "evict", d.nodes, f"{d.fault}: evict and restart on warm standbys", params)

    def _climb(self, d: Diagnosis, job_nodes: tuple[str, ...]) -> Step:
        now = d.ts
        if self.failures and now - self.failures[-1] < self.settle_s:
            # The same incident reported again (another rank, another log): not a new failure.
            return Step("same_incident", None, d.nodes,
                        f"{d.fault}: within {self.settle_s:.0f}s of the last escalation; same incident")
        if self.failures and now - self.failures[-1] > self.episode_s:
            self.failures.clear()
        if not self.failures:
            self.sequence = d.action
        rungs = NUMERIC_SEQUENCE if d.fault in NUMERIC_FAULTS else SEQUENCES[self.sequence or d.action]
        if not d.nodes:
            rungs = tuple(r for r in rungs if r != "evict_suspects")
        index = len(self.failures)
        self.failures.append(now)
        self.rung = rungs[index] if index < len(rungs) else "exhausted"
        if index >= len(rungs):
            return Step("exhausted", None, d.nodes,
                        f"{d.fault}: failure {index + 1} after every rung ({', '.join(rungs)}); needs a person")
        rung = rungs[index]
        params: dict[str, Any] = {"attempt": index + 1}
        if index == 0 and d.action == "stop_time_diagnosis":
            params["stop_time_diagnosis"] = True
        nodes: tuple[str, ...] = ()
        if rung == "evict_suspects":
            nodes = d.nodes
            params["restart"] = "warm_standby"
        if rung == "dual_phase_replay":
            plan_nodes = job_nodes or d.nodes
            if not plan_nodes:
                self.rung = "exhausted"
                return Step("exhausted", None, (), f"{d.fault}: reproduction needs the job's machines (no topology seen)")
            params["mode"] = "dual_phase_replay"
            params["plan"] = dual_phase_plan(plan_nodes).to_dict()
        return Step(rung, RUNG_ACTION[rung], nodes,
                    f"{d.fault}: failure {index + 1} in this episode → {rung.replace('_', ' ')}", params)
