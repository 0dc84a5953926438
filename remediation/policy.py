"""Diagnosis → decision → signed command: the ladder, gated by safety and fed by the standby pool.

No I/O beyond two optional state files, the breaker's and the ladders' / pools' (remediation.state):
the Kafka edge (remediation.consumer) feeds diagnoses and topologies in and sends the commands
that come out. Every diagnosis yields one :class:`Decision`
(also when nothing is sent) so the decision log explains each outcome.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams.diagnosis_record import Diagnosis
from streams.command import Command
from streams.signing import SigningKey
from remediation.ladder import JobLadder, Step
from remediation.pool import StandbyPool
from remediation.safety import Safety
from remediation.state import JobState, StateStore
from streams.topology import Topology

log = logging.getLogger(__name__)

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
    # What the actuator did on the scheduler for this decision (streams.action_record, as dicts);
    # filled in by the consumer after the decision, empty without one.
    actions: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "ts": self.ts, "job": self.job, "diagnosis_id": self.diagnosis_id, "fault": self.fault,
            "rung": self.rung, "action": self.action, "nodes": list(self.nodes), "reason": self.reason,
            "mode": self.mode, "sent": self.sent, "blocked": self.blocked, "command": self.command,
            "actions": list(self.actions),
        }


@dataclass
class Policy:
    signing_key: SigningKey  # the private half: only the remediation consumer holds it
    config: PolicyConfig = field(default_factory=PolicyConfig)
    safety: Safety = field(default_factory=Safety)
    ladders: dict[str, JobLadder] = field(default_factory=dict)
    topologies: dict[str, Topology] = field(default_factory=dict)
    pools: dict[str, StandbyPool] = field(default_factory=dict)
    # Where ladders and pools outlive a restart (remediation.state); None keeps them in memory only.
    state_file: Path | None = None
    store: StateStore | None = field(default=None, init=False)
    _touched: dict[str, float] = field(default_factory=dict, init=False)  # job → last decision that changed it

    def __post_init__(self) -> None:
        if self.state_file is None:
            return
        self.store = StateStore(self.state_file)
        c = self.config
        for job, state in self.store.load({"min_confidence": c.min_confidence, "episode_s": c.episode_s,
                                           "settle_s": c.settle_s}).items():
            self._touched[job] = state.touched
            if state.ladder is not None:
                self.ladders[job] = state.ladder
            if state.pool is not None:
                self.pools[job] = state.pool

    def observe_topology(self, job: str, topology: Topology) -> None:
        first = job not in self.topologies
        self.topologies[job] = topology
        # A restarted job may list standbys that replaced evicted nodes; its size is what caps use.
        self.safety.job_nodes[job] = len(topology.nodes)
        if first:
            pool = StandbyPool.for_job(
                job, len(topology.nodes), list(self.config.standby_names),
                daily_failure_rate=self.config.daily_failure_rate, window_days=self.config.standby_window_days)
            earlier = self.pools.get(job)  # restored from the state file, or made by an eviction seen first
            if earlier is not None:
                pool = pool.without(earlier.used)
                pool.used, pool.allocations = list(earlier.used), dict(earlier.allocations)
            self.pools[job] = pool
            log.info("job %s: %d nodes, warm standby pool of %d", job, len(topology.nodes), len(self.pools[job].spares))
        # A spare the job now runs on (it replaced an evicted node) is no spare, whatever was remembered.
        if set(self.pools[job].spares) & set(topology.nodes):
            self.pools[job] = self.pools[job].without(topology.nodes)

    def _ladder(self, job: str) -> JobLadder:
        if job not in self.ladders:
            c = self.config
            self.ladders[job] = JobLadder(job, c.min_confidence, c.episode_s, c.settle_s)
        return self.ladders[job]

    def decide(self, d: Diagnosis, now: float) -> tuple[Decision, Command | None]:
        before = self._job_state(d.job)
        result = self._decide(d, now)
        if self.store is not None and self._job_state(d.job) != before:
            self._touched[d.job] = now
            self._save(now)
        return result

    def _job_state(self, job: str) -> tuple[dict | None, dict | None]:
        """What the state file keeps of ``job``: an episode under way, spares handed out."""
        ladder, pool = self.ladders.get(job), self.pools.get(job)
        return (ladder.to_dict() if ladder is not None and ladder.failures else None,
                pool.to_dict() if pool is not None and pool.used else None)

    def _save(self, now: float) -> None:
        jobs: dict[str, JobState] = {}
        for job in set(self.ladders) | set(self.pools):
            ladder, pool = self._job_state(job)
            if ladder or pool:  # a job with no episode and no spare handed out has nothing to remember
                jobs[job] = JobState(job, self._touched.get(job, now), self.ladders[job] if ladder else None,
                                     self.pools[job] if pool else None)
        try:
            self.store.save(jobs, now)
        except OSError as exc:
            # The decision stands (its command may already be on its way); the next save retries.
            log.error("could not save remediation state %s: %s; a restart now would forget it", self.store.path, exc)

    def _decide(self, d: Diagnosis, now: float) -> tuple[Decision, Command | None]:
        topology = self.topologies.get(d.job)
        job_nodes = topology.nodes if topology else ()
        step = self._ladder(d.job).decide(d, job_nodes)
        mode = self.config.mode(d.job)
        if step.action is None:
            return self._decision(now, d, step, mode, sent=False), None

        # Capturing stacks is harmless and a second stall soon after a restart needs it again, so it
        # is folded only over the settle time; disruptive actions over the full dedup window.
        window = self.config.settle_s if step.action == "capture_stacks" else self.safety.config.dedup_s
        if self.safety.is_duplicate(d.job, step.nodes, d.fault, step.action, now, window):
            return self._decision(now, d, step, mode, sent=False,
                                  blocked=f"duplicate: {step.action} for these nodes and {d.fault} within {window:.0f}s"), None
        params = dict(step.params)
        if step.evicts:
            verdict = self.safety.check_eviction(d.job, step.nodes, now)
            if not verdict.allowed:
                log.warning("job %s: eviction of %s refused: %s", d.job, ",".join(step.nodes), verdict.reason)
                return self._decision(now, d, step, mode, sent=False, blocked=verdict.reason), None
            pool = self.pools.get(d.job) or StandbyPool.for_job(d.job, 0, list(self.config.standby_names))
            self.pools.setdefault(d.job, pool)
            if mode == "act":
                allocation = pool.take_for(d.id, len(step.nodes))
            else:
                allocation = StandbyPool(d.job, list(pool.spares)).take(len(step.nodes))
            params.update(allocation.to_params())

        command = Command(
            id=command_id(d.id, step.action), job=d.job, action=step.action, nodes=step.nodes,
            reason=step.reason,
            diagnosis_id=d.id, issued_at=now, expires_at=now + self.config.ttl_s, params=params,
        ).signed(self.signing_key)
        self.safety.remember(d.job, step.nodes, d.fault, step.action, now)
        sent = mode == "act"
        if sent and step.evicts:
            self.safety.record_eviction(d.job, step.nodes, now)
        return self._decision(now, d, step, mode, sent=sent, command=command), command if sent else None

    @staticmethod
    def _decision(now: float, d: Diagnosis, step: Step, mode: str, *, sent: bool, blocked: str = "",
                  command: Command | None = None) -> Decision:
        return Decision(now, d.job, d.id, d.fault, step.rung, step.action or "none", step.nodes, step.reason,
                        mode, sent, blocked, command.to_dict() if command else None)
