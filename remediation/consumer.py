"""The Kafka edge of remediation: diagnoses and topologies in, signed commands out.

Runs as consumer group ``faultlens-remediate`` over ``diagnoses`` (and ``jobs``, for each job's
machines). Every decision is written as one JSON line to the decision log and to ``emit`` (stdout
in the CLI), whether or not a command was sent.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Iterable

import msgspec
import orjson

from faultlens.events import topics
from faultlens.events.action_record import ActionRecord
from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope, InvalidEvent, decode, encode
from faultlens.events.payloads import check_payload
from faultlens.events.signing import SigningKey
from faultlens.events.topology import Topology, is_topology
from faultlens.remediation.actuators import Actuator, NoActuator, carry_out, plan
from faultlens.remediation.decision import Decision, PolicyConfig
from faultlens.remediation.fleet import Fleet
from faultlens.remediation.policy import Policy
from faultlens.remediation.safety import CircuitBreaker, Safety, SafetyConfig
from faultlens.streams.config import KafkaSettings
from faultlens.streams.jobs_topic import prime_from_jobs_topic
from faultlens.streams.producer import Outgoing
from faultlens.streams.runner.loop import GroupRunner, Record, dead_letter

log = logging.getLogger(__name__)

GROUP = "faultlens-remediate"
COMMANDS_TOPIC = topics.COMMANDS
DIAGNOSES_TOPIC = topics.DIAGNOSES
JOBS_TOPIC = topics.JOBS
CHECKS_TOPIC = topics.CHECKS  # stop-time check results and reproduction outcomes the ladder waits for
ACTIONS_TOPIC = topics.ACTIONS
DECODERS = {DIAGNOSES_TOPIC: Diagnosis.decode, JOBS_TOPIC: decode, CHECKS_TOPIC: decode}
_SEEN_LIMIT = 100_000


class RemediationHandler:
    """A GroupRunner handler; ``clock`` is injectable so tests decide what "now" is."""

    def __init__(self, policy: Policy, *, decision_log: Path | None = None,
                 emit: Callable[[Decision], None] | None = None, clock: Callable[[], float] = time.time,
                 group: str = GROUP, actuator: Actuator | None = None, requeue_on_evict: bool = True):
        self.policy = policy
        # Acts on the scheduler (drain, requeue, resume) for decisions of jobs in `act` mode; the
        # others only record what it would have done (remediation.actuators).
        self.actuator = actuator or NoActuator()
        self.requeue_on_evict = requeue_on_evict
        self.group = group
        self.decision_log = decision_log
        self.emit = emit
        self.clock = clock
        self.decisions: list[Decision] = []
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._reload = False

    def on_assigned(self, partitions) -> None:
        """Called from the rebalance callback (it must not block): jobs may have come from another
        member, whose decisions the shared state store holds; read it before the next batch."""
        self._reload = True

    def observe_topology(self, event: Envelope) -> None:
        if is_topology(event):
            self.policy.observe_topology(event.job, Topology.from_data(event.data))

    def handle(self, records: list[Record]) -> Iterable[Outgoing]:
        if self._reload:
            self._reload = False
            if (n := self.policy.reload()):
                store = self.policy.store  # there is one: only a store has a newer state to take
                log.info("took the newer state of %d job(s) from %s", n, store.path if store is not None else "?")
            self.policy.refresh_fleet(self.clock())
        out: list[Outgoing] = []
        for r in records:
            if r.topic == JOBS_TOPIC:
                try:
                    self.observe_topology(r.value)
                except InvalidEvent as exc:
                    # Dead-lettered here, not raised: a raise would make the runner redeliver the whole
                    # batch, and diagnoses already decided in it would then be skipped as seen.
                    out.append(dead_letter(r.topic, r.partition, r.offset, r.key, encode(r.value),
                                           f"bad topology: {exc}", self.group))
                continue
            if r.topic == CHECKS_TOPIC:
                try:
                    check_payload(r.value)
                except InvalidEvent as exc:
                    # Dead-lettered, so a person sees what was wrong with it, and still read by the
                    # ladder: a malformed answer is an answer (a result it cannot read counts for
                    # nothing, a reproduction outcome it cannot read is inconclusive, a person looks),
                    # not a silence that holds the job until the deadline.
                    out.append(dead_letter(r.topic, r.partition, r.offset, r.key, encode(r.value),
                                           f"bad check event: {exc}", self.group))
                out.extend(self._follow(self.policy.observe_check(r.value, self.clock())))
                continue
            d: Diagnosis = r.value
            if r.key is not None and r.key != d.job.encode() and self.policy.hear_wave(d):
                # A fleet wave delivered under another job of its part (diagnosis/engine/fleet_waves.py):
                # it pauses its class for this member's jobs there; the member of its own job decides it.
                continue
            if d.id in self._seen:
                # A redelivery after a crash or rebalance: the ladder must not climb twice for it.
                log.info("diagnosis %s seen before; skipped", d.id)
                continue
            decision, command = self.policy.decide(d, self.clock())
            self._seen[d.id] = None
            if len(self._seen) > _SEEN_LIMIT:
                self._seen.popitem(last=False)
            out.extend(self._decided(decision, command))
            out.extend(self._follow([]))
        return out

    def tick(self, now: float) -> Iterable[Outgoing]:
        """Deadlines of stop-time checks and reproductions (judged on this handler's clock); what other
        members and people wrote to the fleet record since the last tick."""
        self.policy.refresh_fleet(self.clock())
        return self._follow(self.policy.tick(self.clock()))

    def _follow(self, results: list[tuple[Decision, Command | None]]) -> list[Outgoing]:
        """Carry out ``results`` and then what followed from them (lemons to drain)."""
        out = []
        for decision, command in results:
            out.extend(self._decided(decision, command))
        for decision in self.policy.take_followups():
            out.extend(self._decided(decision, None))
        return out

    def _decided(self, decision: Decision, command: Command | None) -> list[Outgoing]:
        """Carry out what ``decision`` asks of the scheduler, record it with the outcomes, and the
        messages it makes: its command (when sent) and one action record per operation. Every
        decision goes through here, whatever made it (a diagnosis, check results, a deadline)."""
        actions = self._actuate(decision)
        if actions:
            decision = dataclasses.replace(decision, actions=tuple(a.to_dict() for a in actions))
        self._record(decision)
        out = []
        if command is not None:
            out.append(Outgoing(COMMANDS_TOPIC, command.job.encode(), command.encode()))
        out.extend(Outgoing(ACTIONS_TOPIC, a.job.encode(), a.encode()) for a in actions)
        return out

    def _actuate(self, decision: Decision) -> list[ActionRecord]:
        """Carry out what the decision asks of the scheduler; a take-out that failed is not followed
        by a requeue (the job would come back on the machine that stayed in). Without an actuator
        there is nothing to record: the decision line already says what was decided."""
        if isinstance(self.actuator, NoActuator):
            return []
        records: list[ActionRecord] = []
        for request in plan(decision, requeue_on_evict=self.requeue_on_evict):
            if request.op == "requeue" and any(r.op == "take_out" and r.outcome == "error" for r in records):
                records.append(msgspec.structs.replace(records[-1], op="requeue", id="", outcome="skipped",
                                                       detail="not requeued: taking the nodes out failed", duration_s=0.0))
                continue
            records.append(carry_out(self.actuator, request, decision.mode, clock=self.clock))
        return records

    def _record(self, decision: Decision) -> None:
        self.decisions.append(decision)
        line = orjson.dumps(decision.to_dict())
        level = logging.WARNING if decision.blocked else logging.INFO
        log.log(level, "job %s %s → %s %s (%s%s)", decision.job, decision.fault, decision.action,
                ",".join(decision.nodes) or "*", decision.mode, f", blocked: {decision.blocked}" if decision.blocked else "")
        if self.decision_log is not None:
            self.decision_log.parent.mkdir(parents=True, exist_ok=True)
            with self.decision_log.open("ab") as f:
                f.write(line + b"\n")
        if self.emit is not None:
            self.emit(decision)


def prime_topologies(handler: RemediationHandler, settings: KafkaSettings, idle_s: float = 1.0) -> int:
    """Read the compacted ``jobs`` topic once, so a restarted remediator knows every job's machines;
    returns how many topologies it read (streams/jobs_topic.py: tombstones skipped quietly)."""
    return prime_from_jobs_topic(settings, handler.observe_topology, idle_s=idle_s, timeout_s=30.0).topologies


def build_policy(signing_key: SigningKey, config: PolicyConfig, safety: SafetyConfig, breaker_file: Path | None,
                 state_file: Path | None = None, store: Any = None, fleet_store: Any = None) -> Policy:
    """The policy with its safety limits; ``breaker_file`` None keeps the breaker in memory, and
    ``state_file`` None the ladders and standby pools (remediation.state), unless ``store`` (a
    remediation.state_log.StateLog shared by several members) keeps them. ``fleet_store`` (a
    remediation.fleet_log.FleetLog) keeps every machine's record across jobs; None: in memory."""
    policy = Policy(signing_key, config, Safety(safety, CircuitBreaker(breaker_file)), state_file=state_file,
                    store=store, fleet=Fleet(config.lemon, fleet_store))
    if policy.store is not None:
        log.info("ladder and standby pool state: %s (%d job(s) restored)", policy.store.path,
                 len(set(policy.ladders) | set(policy.pools)))
    log.info("commands are signed with key %s", signing_key.key_id)
    if policy.safety.breaker.open:
        log.error("circuit breaker is open (%s): evictions are blocked until `faultlens remediate --reset`",
                  policy.safety.breaker.reason)
    if not (config.act_on or config.act_on_all):
        log.warning("observe-only: decisions are logged, no command is sent (use --act-on JOB or --act-on-all)")
    return policy


def remediate_consumer(settings: KafkaSettings, policy: Policy, *, group: str = GROUP,
                       decision_log: Path | None = None, emit: Callable[[Decision], None] | None = None,
                       wrap: Callable[[RemediationHandler], Any] | None = None, actuator: Actuator | None = None,
                       requeue_on_evict: bool = True) -> tuple[GroupRunner, RemediationHandler]:
    """The remediation consumer, not started: `faultlens remediate` and `faultlens up` both build it here.
    ``wrap`` puts a handler around it (the demo decides on simulated time)."""
    handler = RemediationHandler(policy, decision_log=decision_log, emit=emit, group=group, actuator=actuator,
                                 requeue_on_evict=requeue_on_evict)
    log.info("known jobs from the jobs topic: %d topology event(s)", prime_topologies(handler, settings))
    runner = GroupRunner(settings, group, [DIAGNOSES_TOPIC, JOBS_TOPIC, CHECKS_TOPIC], wrap(handler) if wrap else handler,
                         DECODERS)
    return runner, handler
