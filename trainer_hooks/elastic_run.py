"""`faultlens run`: torchrun's own elastic agent, taught to obey the job's signed commands.

torch.distributed.run parses the arguments and launches as torchrun does; only the agent class
differs: ``FaultlensAgent`` is torch's ``LocalElasticAgent`` with four methods extended (never
copied):

- ``_rendezvous``: after torch's rendezvous, the round's nodes exchange a ``RoundNote`` through
  the round's store (trainer_hooks.elastic_commands) and agree on one plan: the node names in
  group-rank order, the attempt, the resume point; the round's first node publishes `job`/`restart`;
- ``_set_local_rank_env``: every worker gets the hook's environment (FAULTLENS_JOB, _NODE, _NODES,
  _BOOTSTRAP, _ATTEMPT, _RESUME, _CHECKPOINT when a command named one, _VERIFY_KEY, _STATE_DIR);
- ``_monitor_workers``: after torch's look at the workers, the commands: restart / reattempt /
  rollback, and an evict of other nodes, restart the workers in place (a new round, the evicted
  nodes gone); an evict of this node leaves the job with exit code EVICTED (75), the rendezvous
  left open for the others, as torch leaves it on a scheduler's SIGTERM; stop ends the job (79).
  Workers that exit with a command's code (their hook obeyed it first) are waited on for the
  command; a crash (any other code) waits ``crash_wait`` for the remediator's command (stretched
  by a run_checks), then falls back on torch's own restart, counted against --max-restarts.
  A command's restart does not count: the remediator has its own caps.

torch builds its agent inside ``launch_agent``, by name; ``faultlens_agent`` puts this class in
that name for the length of one launch, so every other part of torchrun (rendezvous backends,
--standalone, log specs, signals, the @record error files) runs unchanged.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from torch.distributed.elastic.agent.server.api import RunResult, WorkerGroup, WorkerSpec, WorkerState
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from faultlens.events.command import Command
from faultlens.events.command_memory import STATE_DIR_ENV
from faultlens.events.envelope import Envelope
from faultlens.events.signing import VERIFY_KEY_ENV
from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks.elastic_commands import (
    CommandInbox,
    RoundNote,
    RoundPlan,
    action_of_exit_codes,
    merge_round,
    named_checkpoint,
    own_exit_codes,
    rendezvous_topology,
    resume_choice,
)
from faultlens.trainer_hooks.outbox import Outbox
from faultlens.trainer_hooks.worker_exits import exit_summary, failure_events

log = logging.getLogger("faultlens.run")

NOTE_KEY = "faultlens/round_note/{}"
USAGE_EXIT = 2  # a worker's exit code for bad arguments or a script Python cannot open
SHARE_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


class Evicted(SignalException):
    """This node was evicted: leave as on a scheduler's SIGTERM (torch keeps the rendezvous open)."""

    def __init__(self, cmd: Command | None):
        super().__init__(f"evicted by command {cmd.id if cmd else '(a worker exit code)'}", signal.SIGTERM)
        self.command = cmd


class Stopped(Exception):
    """A stop command ended the job."""

    def __init__(self, cmd: Command | None):
        super().__init__(f"stopped by command {cmd.id if cmd else '(a worker exit code)'}")
        self.command = cmd


@dataclass
class JobSide:
    """The faultlens half of one node's agent: who it is, where it publishes, what it learned."""

    job: str
    node: str
    settings: KafkaSettings
    verify_key_paths: tuple[str, ...]
    state_dir: Path | None
    crash_wait: float = 60.0
    command_wait: float = 10.0
    grace: float = 10.0
    inbox: CommandInbox = field(default_factory=CommandInbox)
    producer: Outbox | None = None  # made at the first event: spooled, never blocks the job on the broker
    plan: RoundPlan | None = None
    group_rank: int | None = None
    rounds: int = 0  # rounds this node has started
    pending: RoundNote | None = None  # why this node's workers restart next
    pids: list[int] = field(default_factory=list)  # the workers started last (the heartbeat lists the live ones)
    # The node agent's line parser (parsing.registry), handed in by `faultlens run`: a failed worker's
    # last words are parsed as the node agent parses them (parsing sits above the trainer hooks).
    parser_factory: Callable[[], Any] | None = None
    alive_at: float | None = None  # when the agent last saw every worker alive (a death came after)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # --- output -----------------------------------------------------------------------------
    def emit(self, obj: dict[str, Any]) -> None:
        """One JSON line on stdout (the launcher's lines: start, restart, crash, end)."""
        print(json.dumps({"ts": time.time(), "job": self.job, "node": self.node, **obj}), flush=True)

    def publish(self, kind: str, data: dict[str, Any]) -> None:
        self.send(Envelope(ts=time.time(), job=self.job, node="-", source="job", kind=kind, data=data))

    def send(self, event: Envelope) -> None:
        with self._lock:  # the heartbeat's thread and the agent's both send
            if self.producer is None:
                self.producer = Outbox(self.settings, name="faultlens-run-outbox")
        self.producer.send_event(event)

    def report_failures(self, failures: Mapping[int, ProcessFailure]) -> None:
        """Each failed worker of this node: a JSON line, and its traceback and exit parsed as the
        node agent parses torchrun's output (trainer_hooks/worker_exits.py), so the crash is
        diagnosed with no node agent."""
        attempt = self.plan.attempt if self.plan else 0
        for rank, failure in sorted(failures.items()):
            self.emit({"event": "worker_exit", "attempt": attempt, **exit_summary(rank, failure)})
        if self.parser_factory is None:
            return
        try:
            for event in failure_events(self.job, self.node, failures, self.parser_factory, alive_at=self.alive_at):
                self.send(event)
        except Exception as exc:  # noqa: BLE001 - a report; the crash is handled whatever it says
            log.warning("could not report the workers' failures: %r", exc)

    def end(self, reason: str, command: Command | None = None) -> None:
        """``job``/``end``, once for the job: from the node that was the last round's first."""
        self.emit({"event": "end", "reason": reason, "command_id": command.id if command else None})
        if self.group_rank != 0:
            return
        try:
            self.publish("end", {"reason": reason, "attempt": self.plan.attempt if self.plan else 0,
                                 "command_id": command.id if command else None,
                                 "nodes": list(self.plan.nodes if self.plan else (self.node,))})
        except Exception as exc:  # noqa: BLE001 - the job has ended whatever the broker says
            log.warning("could not publish the job's end: %s", exc)

    # --- rounds -----------------------------------------------------------------------------
    def note(self) -> RoundNote:
        previous = self.plan.nodes if self.plan else ()
        base = self.pending or RoundNote(node=self.node, attempt=self.rounds)
        return replace(base, node=self.node, attempt=self.rounds, previous=previous)

    def begin_round(self, group_rank: int, notes: list[RoundNote]) -> RoundPlan:
        """The plan of a round that just formed (``notes`` in group-rank order)."""
        plan = merge_round(notes)
        if len(set(plan.nodes)) != len(plan.nodes):
            log.warning("two agents of job %s call themselves the same node (%s): give each --node-name",
                        self.job, ",".join(plan.nodes))
        previous = next((n.previous for n in notes if n.previous), ())
        self.plan, self.group_rank, self.pending = plan, group_rank, None
        self.rounds = plan.attempt + 1
        self.inbox.done |= plan.command_ids
        self.inbox.checks = None
        restarted = plan.attempt > 0
        out = tuple(n for n in previous if n not in plan.nodes)
        into = tuple(n for n in plan.nodes if previous and n not in previous)
        self.emit({"event": "restart" if restarted else "start", "attempt": plan.attempt, "group_rank": group_rank,
                   "nodes": list(plan.nodes), "resume": plan.resume, "resume_why": plan.resume_why or None,
                   "checkpoint": plan.checkpoint,
                   "action": plan.action or None, "command_id": plan.command_id,
                   "nodes_out": list(out), "nodes_in": list(into)})
        if group_rank == 0:
            self.publish_topology(notes)
        if restarted and group_rank == 0:
            try:
                self.publish("restart", {
                    "reason": plan.reason or "the workers restarted (exit codes or a node joining or leaving)",
                    "command_id": plan.command_id, "nodes_out": list(out), "nodes_in": list(into),
                    "attempt": plan.attempt, "resume": plan.resume, "resume_why": plan.resume_why})
            except Exception as exc:  # noqa: BLE001 - the restart goes on; the event is a report
                log.warning("could not publish the restart: %s", exc)
        return plan

    def publish_topology(self, notes: list[RoundNote]) -> None:
        """`job`/`topology` of the round, from the rendezvous (the round's first node sends it): the
        job's hangs are localised and its ranks placed with no trainer code."""
        topology = rendezvous_topology(notes)
        if topology is None:
            log.info("job %s: a node did not say how many workers it starts; no topology published", self.job)
            return
        self.publish("topology", topology.to_data())

    def worker_env(self) -> dict[str, str]:
        plan = self.plan
        env = {"FAULTLENS_JOB": self.job, "FAULTLENS_NODE": self.node,
               "FAULTLENS_NODES": ",".join(plan.nodes if plan else (self.node,)),
               "FAULTLENS_BOOTSTRAP": self.settings.address(), "FAULTLENS_ATTEMPT": str(plan.attempt if plan else 0),
               "FAULTLENS_RESUME": plan.resume if plan else "latest",
               "FAULTLENS_CHECKPOINT": (plan.checkpoint or "") if plan else "",
               "FAULTLENS_RESUME_WHY": ("named by the command" if plan.checkpoint else plan.resume_why) if plan else ""}
        if self.verify_key_paths:
            env[VERIFY_KEY_ENV] = ",".join(self.verify_key_paths)
        if self.state_dir is not None:
            env[STATE_DIR_ENV] = str(self.state_dir)
        return env

    def restart_note(self, action: str, cmd: Command | None) -> RoundNote:
        resume, why = resume_choice(action, cmd)
        return RoundNote(node=self.node, attempt=self.rounds, action=action,
                         command_id=cmd.id if cmd else None,
                         reason=cmd.reason if cmd and cmd.reason else f"{action}" + ("" if cmd else " (worker exit codes)"),
                         resume=resume, resume_why=why, checkpoint=named_checkpoint(cmd),
                         nodes_out=tuple(cmd.nodes) if cmd and action == "evict" else ())


class FaultlensAgent(LocalElasticAgent):
    """torch's LocalElasticAgent with the faultlens side (``side``, set by ``faultlens_agent``)."""

    side: JobSide

    # --- the round --------------------------------------------------------------------------
    def _rendezvous(self, worker_group: WorkerGroup) -> None:
        super()._rendezvous(worker_group)
        store, rank, world = worker_group.store, worker_group.group_rank, worker_group.group_world_size
        if store is None or rank is None or world is None:  # torch's rendezvous sets all three
            raise RuntimeError("the rendezvous left the worker group without its store, rank or world size")
        note = replace(self.side.note(), local_world=worker_group.spec.local_world_size)
        store.set(NOTE_KEY.format(rank), note.encode())  # the store is the round's (prefixed by round)
        notes = [RoundNote.decode(store.get(NOTE_KEY.format(r))) for r in range(world)]
        self.side.begin_round(rank, notes)

    def _set_local_rank_env(self, worker_env: dict[str, str | None], local_rank: int, spec: WorkerSpec) -> None:
        super()._set_local_rank_env(worker_env, local_rank, spec)
        worker_env.update(self.side.worker_env())
        # torch counts only the restarts that spend --max-restarts, each agent its own: the job's
        # attempt, the same on every node, counts a command's restart and a membership change too.
        worker_env["TORCHELASTIC_RESTART_COUNT"] = str(self.side.plan.attempt if self.side.plan else 0)

    def _start_workers(self, worker_group: WorkerGroup) -> dict[int, int]:
        self.side.alive_at = time.time()  # a worker of this round dies after its start
        pids = super()._start_workers(worker_group)
        self.side.pids = [int(p) for p in pids.values()]
        ranks = {w.local_rank: w.global_rank for w in worker_group.workers}
        self.side.emit({"event": "workers", "attempt": self.side.plan.attempt if self.side.plan else 0,
                        "pids": {str(ranks.get(local, local)): pid for local, pid in sorted(pids.items())}})
        return pids

    # --- commands ---------------------------------------------------------------------------
    def _monitor_workers(self, worker_group: WorkerGroup) -> RunResult:
        polled = time.time()
        result = super()._monitor_workers(worker_group)
        if result.state == WorkerState.HEALTHY:
            self.side.alive_at = polled  # a worker found dead later died after this poll
        if result.state == WorkerState.SUCCEEDED:
            return result
        side = self.side
        nodes = side.plan.nodes if side.plan else (side.node,)
        cmd = side.inbox.take(nodes)
        if cmd is None and result.state == WorkerState.FAILED:
            codes = own_exit_codes([f.exitcode for f in result.failures.values()])
            told = action_of_exit_codes(codes)
            if told is not None:
                # A worker's hook obeyed a command we have not read yet: it is on its way.
                cmd = side.inbox.take(nodes, side.command_wait)
                if cmd is None:
                    return self._obey(worker_group, told, None)
            else:
                side.report_failures(result.failures)
                if codes == [USAGE_EXIT]:
                    # Every worker exited 2 (Python's and argparse's code for a script that cannot
                    # run, or was given bad arguments), or was ended by torch on the first one's exit:
                    # no machine is at fault and no verdict will come. As torchrun.
                    side.emit({"event": "crash", "attempt": side.plan.attempt if side.plan else 0, "exit_codes": codes,
                               "crash_wait": 0, "why": "every worker exited 2 (bad arguments or script)"})
                    return result
                side.emit({"event": "crash", "attempt": side.plan.attempt if side.plan else 0, "exit_codes": codes,
                           "crash_wait": side.crash_wait})
                self._stop_workers(worker_group)  # this node's other ranks would only wait on the dead one
                cmd = side.inbox.after_crash(nodes, side.crash_wait)
                if cmd is None:
                    log.warning("no command within %.0fs of the crash; torch's own restart follows", side.crash_wait)
                    return result
        if cmd is None:
            return result
        return self._obey(worker_group, cmd.action, cmd)

    def _obey(self, worker_group: WorkerGroup, action: str, cmd: Command | None) -> RunResult:
        side = self.side
        if cmd is not None:
            side.inbox.done.add(cmd.id)
        self._let_workers_exit(worker_group)
        if action == "stop":
            raise Stopped(cmd)
        if action == "evict" and (cmd is None or side.node in cmd.nodes):
            leave_rendezvous(worker_group.spec.rdzv_handler)
            raise Evicted(cmd)
        side.pending = side.restart_note(action, cmd)
        self._restart_workers(worker_group)
        return RunResult(state=WorkerState.HEALTHY)

    def _let_workers_exit(self, worker_group: WorkerGroup) -> None:
        """Up to ``grace`` seconds for the workers' hooks to ack and exit at a step boundary."""
        deadline = time.monotonic() + self.side.grace
        while time.monotonic() < deadline and super()._monitor_workers(worker_group).state == WorkerState.HEALTHY:
            time.sleep(0.1)


def leave_rendezvous(handler: object) -> None:
    """Take this node out of the rendezvous at once, so the others' next round need not wait for
    its heartbeats to go stale (c10d: keep_alive_interval x keep_alive_max_attempt, 15 s by default).

    torch has no public "leave"; its own next_rendezvous starts with this exit operation. Without
    it (another backend, another torch) the others still go on, after the heartbeat timeout."""
    try:
        from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _RendezvousExitOp

        handler._stop_heartbeats()  # type: ignore[attr-defined]
        deadline = handler._get_deadline(handler._settings.timeout.close)  # type: ignore[attr-defined]
        handler._op_executor.run(_RendezvousExitOp(), deadline)  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - leaving is a courtesy: the heartbeat timeout does the same
        log.info("could not leave the rendezvous at once (%s); the others wait for its heartbeat timeout", exc)


@contextlib.contextmanager
def faultlens_agent(side: JobSide) -> Iterator[None]:
    """torch's launch_agent builds ``LocalElasticAgent`` by name: make that name ours for one launch."""
    import torch.distributed.launcher.api as launcher_api

    # A fresh store for the workers every round (torch's own opt-out of sharing the agents'
    # rendezvous store): the shared one outlives rounds and keeps the last round's process-group
    # keys, so after a restart a rank can read a dead peer's address before the peer rewrites it
    # (gloo: "connection refused", then the other ranks wait forever). torch restarts rarely; we
    # restart on every command.
    os.environ.setdefault(SHARE_STORE_ENV, "1")
    original = launcher_api.LocalElasticAgent
    # Rebinding torch's class name is the point (launch_agent looks it up at call time); mypy
    # refuses any assignment to a class.
    launcher_api.LocalElasticAgent = type("FaultlensAgent", (FaultlensAgent,), {"side": side})  # type: ignore[misc, assignment]
    try:
        yield
    finally:
        launcher_api.LocalElasticAgent = original  # type: ignore[misc]
