"""Diagnosis → decision → signed command: the ladder, gated by safety and fed by the standby pool.

No I/O beyond two optional state files, the breaker's and the ladders' / pools' (remediation.state):
the Kafka edge (remediation.consumer) feeds diagnoses and topologies in and sends the commands
that come out. Every diagnosis yields one :class:`Decision` (remediation.decision, with the
policy's configuration), also when nothing is sent, so the decision log explains each outcome.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultlens.events.command import Command, CommandAction
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.events.signing import SigningKey
from faultlens.events.topology import Topology
from faultlens.remediation.decision import Decision, PolicyConfig, command_id
from faultlens.remediation.fleet import Fleet, Lemon
from faultlens.remediation.ladder import SEQUENCES, JobLadder, Step
from faultlens.remediation.lemon import LEMON_STATE
from faultlens.remediation.policy_checks import PolicyChecks
from faultlens.remediation.pool import StandbyPool
from faultlens.remediation.reproduction import PendingReproduction, plan_from_dict
from faultlens.remediation.safety import Safety
from faultlens.remediation.state import JobState, StateStore
from faultlens.remediation.stop_checks import PendingChecks
from faultlens.remediation.wave_pause import WavePause, is_wave

log = logging.getLogger(__name__)

# A fail-slow stack round request is ``<suspicion id>.round<k>`` (diagnosis/peers/failslow.py).
_ROUND_ID = re.compile(r"\.round\d+$")
ROUND_FOLD_S = 2.0  # only a copy of the same round (a redelivery) comes this close


def is_stack_round(d: Diagnosis) -> bool:
    """Whether ``d`` is one round of a fail-slow campaign's stack requests."""
    return d.fault == "fail_slow" and d.action == "capture_stacks" and bool(_ROUND_ID.search(d.id))


@dataclass
class Policy(PolicyChecks):
    signing_key: SigningKey  # the private half: only the remediation consumer holds it
    config: PolicyConfig = field(default_factory=PolicyConfig)
    safety: Safety = field(default_factory=Safety)
    ladders: dict[str, JobLadder] = field(default_factory=dict)
    topologies: dict[str, Topology] = field(default_factory=dict)
    pools: dict[str, StandbyPool] = field(default_factory=dict)
    # Where ladders and pools outlive a restart (remediation.state); None keeps them in memory only.
    state_file: Path | None = None
    # Or any store with the same load/save (remediation.state_log.StateLog: a compacted topic,
    # shared by several remediation members); it wins over ``state_file``.
    store: StateStore | Any | None = None
    pending_checks: dict[str, PendingChecks] = field(default_factory=dict)  # job → stop-time checks under way
    reproductions: dict[str, PendingReproduction] = field(default_factory=dict)  # job → dual-phase reproduction under way
    taken_out: dict[str, dict[str, str]] = field(default_factory=dict)  # job → node evicted → diagnosis id
    # Every machine's record across jobs (remediation.fleet); None: in memory, with config.lemon.
    fleet: Fleet | None = None
    # Decisions that follow from others, not from one diagnosis: lemons to drain. The consumer
    # takes them (take_followups) after each call and carries them out like any decision.
    followups: list[Decision] = field(default_factory=list)
    # A wave of one class in a job pauses that class's remediation for the job (remediation.wave_pause).
    waves: WavePause = field(default_factory=WavePause)
    _touched: dict[str, float] = field(default_factory=dict, init=False)  # job → last decision that changed it

    def __post_init__(self) -> None:
        if self.fleet is None:
            self.fleet = Fleet(self.config.lemon)
        if self.store is None and self.state_file is not None:
            self.store = StateStore(self.state_file)
        if self.store is not None:
            self._restore(self._load(), only_newer=False)

    @property
    def _fleet(self) -> Fleet:
        """The fleet record: given, or made from config.lemon by __post_init__ (never None after it)."""
        if self.fleet is None:
            self.fleet = Fleet(self.config.lemon)
        return self.fleet

    def _load(self) -> dict[str, JobState]:
        c = self.config
        if self.store is None:
            return {}
        return self.store.load({"min_confidence": c.min_confidence, "episode_s": c.episode_s, "settle_s": c.settle_s})

    def reload(self) -> int:
        """Take the store's newer job states (another member decided for them before a rebalance
        gave their partitions here); returns how many jobs changed."""
        if self.store is None:
            return 0
        return self._restore(self._load(), only_newer=True)

    def _restore(self, states: dict[str, JobState], *, only_newer: bool) -> int:
        n = 0
        for job, state in states.items():
            if only_newer and state.touched <= self._touched.get(job, float("-inf")):
                continue
            n += 1
            # (A pool is only kept once it handed out a spare; the one made from the topology stays.)
            for held in (self.ladders, self.pending_checks, self.reproductions, self.taken_out):
                held.pop(job, None)
            self._touched[job] = state.touched
            if state.ladder is not None:
                self.ladders[job] = state.ladder
            if state.pool is not None:
                self.pools[job] = state.pool
            if state.checks is not None:
                self.pending_checks[job] = state.checks
            if state.reproduction is not None:
                self.reproductions[job] = state.reproduction
            if state.taken_out:
                self.taken_out[job] = dict(state.taken_out)
        return n

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
        self._saved_if_changed(d.job, before, now)
        self._lemons(self._fleet.observe_diagnosis(d, now, self.config.mode(d.job)), now)
        return result

    def hear_wave(self, d: Diagnosis) -> bool:
        """A wave that reached this member under another job of the part it names (several
        remediation members split `diagnoses` by job): remembered, so its class pauses for the
        machines of this member's jobs in that part, and nothing decided for it here. False: not a wave."""
        if not is_wave(d):
            return False
        self.waves.observe(d)
        return True

    def refresh_fleet(self, now: float) -> None:
        """What other members and people wrote to the fleet record; lemons it reveals are drained."""
        self._lemons(self._fleet.refresh(now, self.config.mode), now)

    def take_followups(self) -> list[Decision]:
        out, self.followups = self.followups, []
        return out

    def _lemons(self, lemons: list[Lemon], now: float) -> None:
        """Each new lemon → a decision to drain it (no command: the job's own decision already
        evicted it or restarts in place; the drain keeps the scheduler from placing it again)."""
        breaker = self.safety.breaker
        for lemon in lemons:
            v = lemon.verdict
            # The breaker stops drains too: many machines turning lemons at once is the pipeline
            # going wrong more likely than the fleet (the verdict stays on record for a person).
            blocked = f"circuit breaker open ({breaker.reason}): not drained" if breaker.open else ""
            self.followups.append(Decision(
                now, lemon.job, lemon.diagnosis_id, LEMON_STATE, LEMON_STATE, "none", (lemon.node,),
                f"{lemon.node} is a lemon ({v.rule}): {v.reason}; record: faultlens nodes show {lemon.node}; "
                f"back only by `faultlens nodes resume {lemon.node}`", self.config.mode(lemon.job), False,
                blocked=blocked, params={"take_out": [lemon.node], "lemon": v.to_dict()}))

    def observe_check(self, event: Envelope, now: float) -> list[tuple[Decision, Command | None]]:
        """A `check` event (a node's stop-time results or its refusal to run them, a reproduction's outcome)
        → what follows from it."""
        job = event.job
        before = self._job_state(job)
        out: list[tuple[Decision, Command | None]] = []
        if event.kind in ("result", "command_ack") and job in self.pending_checks:
            if self.pending_checks[job].record(event):
                out = self._settle_checks(job, now)
        elif event.kind == "replay_done" and job in self.reproductions:
            out = self._settle_reproduction(event, now)
        self._saved_if_changed(job, before, now)
        return out

    def tick(self, now: float) -> list[tuple[Decision, Command | None]]:
        """Deadlines: checks nobody answered in time, reproductions that never reported."""
        out: list[tuple[Decision, Command | None]] = []
        for job in sorted(set(self.pending_checks) | set(self.reproductions)):
            before = self._job_state(job)
            if job in self.pending_checks:
                out += self._settle_checks(job, now)
            repro = self.reproductions.get(job)
            if repro is not None and now >= repro.deadline:
                del self.reproductions[job]
                d = Diagnosis.from_dict(repro.diagnosis)
                step = Step("replay_inconclusive", None, (),
                            f"{d.fault}: no dual-phase reproduction outcome within {self.config.reproduction_wait_s:.0f}s; "
                            "no eviction, a person should look", {"replay_command": repro.command_id})
                out.append((self._decision(now, d, step, self.config.mode(job), sent=False), None))
            self._saved_if_changed(job, before, now)
        return out

    def _saved_if_changed(self, job: str, before: tuple, now: float) -> None:
        if self.store is not None and self._job_state(job) != before:
            self._touched[job] = now
            self._save(now)

    def _job_state(self, job: str) -> tuple:
        """What the state file keeps of ``job``: an episode under way, spares handed out, checks or a
        reproduction awaited, machines taken out."""
        ladder, pool = self.ladders.get(job), self.pools.get(job)
        checks, repro = self.pending_checks.get(job), self.reproductions.get(job)
        return (ladder.to_dict() if ladder is not None and ladder.failures else None,
                pool.to_dict() if pool is not None and pool.used else None,
                checks.to_dict() if checks is not None else None,
                repro.to_dict() if repro is not None else None,
                dict(self.taken_out.get(job) or {}) or None)

    def _save(self, now: float) -> None:
        jobs: dict[str, JobState] = {}
        for job in set(self.ladders) | set(self.pools) | set(self.pending_checks) | set(self.reproductions) | set(self.taken_out):
            ladder, pool, checks, repro, taken_out = self._job_state(job)
            if ladder or pool or checks or repro or taken_out:  # else nothing to remember
                jobs[job] = JobState(job, self._touched.get(job, now), self.ladders[job] if ladder else None,
                                     self.pools[job] if pool else None, self.pending_checks.get(job),
                                     self.reproductions.get(job), dict(taken_out or {}))
        store = self.store
        if store is None:
            return
        try:
            store.save(jobs, now)
        except OSError as exc:
            # The decision stands (its command may already be on its way); the next save retries.
            log.error("could not save remediation state %s: %s; a restart now would forget it", store.path, exc)

    def _decide(self, d: Diagnosis, now: float) -> tuple[Decision, Command | None]:
        self.waves.observe(d)
        paused = self.waves.paused(d, self.topologies)
        if paused:
            return self._decision(now, d, Step("wave", None, d.nodes, paused), self.config.mode(d.job), sent=False), None
        topology = self.topologies.get(d.job)
        job_nodes = topology.nodes if topology else ()
        checks = self.pending_checks.get(d.job)
        waiting = ("stop-time checks" if checks is not None and not checks.settled
                   else "a dual-phase reproduction" if d.job in self.reproductions else None)
        if waiting and d.action in SEQUENCES:
            # The job is stopped for its checks, or reproducing the fault on purpose: what it logs
            # meanwhile is not a new failure to climb the ladder for.
            step = Step("waiting", None, d.nodes, f"{d.fault}: {waiting} under way for this job; recorded only")
            return self._decision(now, d, step, self.config.mode(d.job), sent=False), None
        step = self._ladder(d.job).decide(d, job_nodes)
        if self.config.stop_checks and step.action is not None and step.params.get("stop_time_diagnosis"):
            return self._ask_checks(d, step, job_nodes or d.nodes, now)
        return self._act(d, step, now)

    def _act(self, d: Diagnosis, step: Step, now: float, key: str | None = None) -> tuple[Decision, Command | None]:
        """Gate ``step`` by safety and make its command (sent only in act mode)."""
        mode = self.config.mode(d.job)
        if step.action is None:
            return self._decision(now, d, step, mode, sent=False), None

        # Capturing stacks is harmless and a second stall soon after a restart needs it again, so it
        # is folded only over the settle time; disruptive actions over the full dedup window.
        window = self.config.settle_s if step.action in ("capture_stacks", "run_checks") else self.safety.config.dedup_s
        if step.action == "capture_stacks" and is_stack_round(d):
            # A fail-slow campaign asks for its rounds itself, ~10 s apart, each a new ask
            # (diagnosis/peers/failslow.py): folding them over the settle time would starve it.
            window = ROUND_FOLD_S
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
            self.refresh_fleet(now)  # what other members decided since the last tick
            lemons = self._fleet.lemons()  # a lemon is never handed out as a spare
            if mode == "act":
                allocation = pool.take_for(d.id, len(step.nodes), skip=lemons)
            else:
                allocation = pool.preview(len(step.nodes), skip=lemons)
            params.update(allocation.to_params())

        command = Command(
            id=command_id(key or d.id, step.action), job=d.job, action=CommandAction(step.action), nodes=step.nodes,
            reason=step.reason,
            diagnosis_id=d.id, issued_at=now, expires_at=now + self.config.ttl_s, params=params,
        ).signed(self.signing_key)
        self.safety.remember(d.job, step.nodes, d.fault, step.action, now)
        sent = mode == "act"
        if sent and step.evicts:
            self.safety.record_eviction(d.job, step.nodes, now)
            # Remembered so that a later round of checks asks them whether they may come back.
            self.taken_out.setdefault(d.job, {}).update({n: d.id for n in step.nodes})
            self._fleet.evicted(d.job, step.nodes, d.id, d.fault, now)
        if sent and step.rung == "dual_phase_replay" and "plan" in step.params:
            self.reproductions[d.job] = PendingReproduction(d.job, command.id, d.to_dict(), plan_from_dict(step.params["plan"]),
                                                now, now + self.config.reproduction_wait_s)
        return self._decision(now, d, step, mode, sent=sent, command=command), command if sent else None

    @staticmethod
    def _decision(now: float, d: Diagnosis, step: Step, mode: str, *, sent: bool, blocked: str = "",
                  command: Command | None = None) -> Decision:
        return Decision(now, d.job, d.id, d.fault, step.rung, step.action or "none", step.nodes, step.reason,
                        mode, sent, blocked, command.to_dict() if command else None, dict(step.params))
