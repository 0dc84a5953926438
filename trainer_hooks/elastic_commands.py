"""What `faultlens run` makes of the job's signed commands: pure rules, no torch, no Kafka.

One `faultlens run` agent runs on every node of a torchrun job. Each reads the job's commands
(all of them, job-level, as trainer_hooks.launcher does) into a ``CommandInbox`` and acts on the
restart-type ones; its workers' hooks obey the same commands at their step boundary. When the
workers start again, the agents of the new rendezvous round exchange what brought each of them
there (``RoundNote``) through the round's store, and ``merge_round`` turns the notes into one
``RoundPlan`` that every node uses: the same resume point on every rank, the same attempt
number, and the `job`/`restart` event published once, by the round's first node.
"""

from __future__ import annotations

import json
import queue
import signal
import time
from dataclasses import asdict, dataclass

from faultlens.events.command import Command
from faultlens.events.topology import RankPlace, Topology
from faultlens.trainer_hooks.crash_wait import LEAVING_ACTIONS, evicts_none_of, wait_for_verdict
from faultlens.trainer_hooks.exit_codes import EXIT_ACTION

# Faults that may have poisoned the model's state before the newest checkpoint saved it: a
# rollback for one of them goes to the checkpoint before the newest. Any other fault (a crash, user
# code, a machine) leaves the saved state good: the newest checkpoint redoes the fewest steps.
POISONING_FAULTS = frozenset({"nan_loss", "loss_spike", "loss_stalled"})


def fault_of(cmd: Command | None) -> str | None:
    """The fault class a command acts on: ``params.fault`` when the remediator says it, else the
    head of its reason (the ladder writes ``"<fault>: ..."``) when that is a fault class's name."""
    from faultlens.events.diagnosis_record import FaultClass

    if cmd is None:
        return None
    named = (cmd.params or {}).get("fault")
    head = named if isinstance(named, str) else cmd.reason.split(":", 1)[0].strip()
    return head if head in FaultClass.__members__.values() else None


def resume_choice(action: str, cmd: Command | None = None) -> tuple[str, str]:
    """Where a restart resumes (``latest``: the newest checkpoint, ``rollback``: the one before it)
    and why, in words for the job's restart line and its workers (FAULTLENS_RESUME_WHY)."""
    if action != "rollback":
        return "latest", f"the newest checkpoint: a {action} leaves the saved state good"
    fault = fault_of(cmd)
    if fault in POISONING_FAULTS:
        return "rollback", f"the checkpoint before the newest: {fault} may have poisoned the state the newest one saved"
    if fault is not None:
        return "latest", f"the newest checkpoint: {fault} does not poison the saved state (a rollback redoes the fewest steps)"
    return "rollback", "the checkpoint before the newest: a rollback that names no fault (a person's, or a worker's exit code)"


def resume_of(action: str, cmd: Command | None = None) -> str:
    """The checkpoint a restart resumes from (:func:`resume_choice`)."""
    return resume_choice(action, cmd)[0]


def named_checkpoint(cmd: Command | None) -> str | None:
    """The checkpoint a command names (``params.checkpoint``: a path the trainer can load), if any."""
    value = (cmd.params or {}).get("checkpoint") if cmd is not None else None
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class RoundNote:
    """What one node brings to a rendezvous round: its name and why its workers (re)start."""

    node: str
    attempt: int  # rounds this node has started before this one
    action: str = ""  # the restart's action ("" for a first start or a peer's membership change)
    command_id: str | None = None
    reason: str = ""
    resume: str = "latest"
    checkpoint: str | None = None
    nodes_out: tuple[str, ...] = ()
    resume_why: str = ""
    previous: tuple[str, ...] = ()  # the nodes of this node's previous round (none for its first)
    local_world: int = 0  # how many workers this node starts (--nproc-per-node); 0: not said

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def decode(cls, raw: bytes) -> "RoundNote":
        d = json.loads(raw)
        d["nodes_out"] = tuple(d.get("nodes_out") or ())
        d["previous"] = tuple(d.get("previous") or ())
        return cls(**d)


@dataclass(frozen=True)
class RoundPlan:
    """What every node of a round agrees on."""

    nodes: tuple[str, ...]  # in group-rank order
    attempt: int
    resume: str
    checkpoint: str | None
    action: str
    command_ids: frozenset[str]
    reason: str
    command_id: str | None
    resume_why: str = ""


def merge_round(notes: list[RoundNote]) -> RoundPlan:
    """One plan from the notes of a round's nodes (given in group-rank order).

    A rollback anywhere makes the round a rollback (ranks must not resume from different steps); a
    named checkpoint wins over both; the attempt is the highest any node has seen plus one when any
    node restarts; the reason is the first command's."""
    nodes = tuple(n.node for n in notes)
    restarted = [n for n in notes if n.action]
    with_command = [n for n in restarted if n.command_id]
    first = next(iter(with_command or restarted), None)
    resume = "rollback" if any(n.resume == "rollback" for n in notes) else "latest"
    why = next((n.resume_why for n in notes if n.resume == resume and n.resume_why), "")
    checkpoint = next((n.checkpoint for n in notes if n.checkpoint), None)
    seen = max((n.attempt for n in notes), default=0)
    return RoundPlan(nodes=nodes, attempt=seen, resume=resume, checkpoint=checkpoint,
                     action=first.action if first else "", reason=first.reason if first else "",
                     command_id=first.command_id if first else None,
                     command_ids=frozenset(n.command_id for n in notes if n.command_id), resume_why=why)


def rendezvous_topology(notes: list[RoundNote]) -> Topology | None:
    """The placement the rendezvous decided (notes in group-rank order): torch numbers the workers
    node after node in that order, so rank r runs on the node whose share of ranks holds r. What
    the launcher knows is pure data parallelism (tp = pp = 1, dp = the world): every rank its own
    TP and PP group, so a hang's culprit is localised to its own machine; a trainer that knows its
    real groups publishes them after (TrainerHook.publish_topology). None when a node did not say
    how many workers it starts."""
    if not notes or any(n.local_world < 1 for n in notes):
        return None
    places, rank = [], 0
    for note in notes:
        for _ in range(note.local_world):
            places.append(RankPlace(rank, note.node, 0, 0, rank))
            rank += 1
    sizes = {n.local_world for n in notes}
    extra = {"gpus_per_node": sizes.pop()} if len(sizes) == 1 else None
    return Topology(1, 1, rank, tuple(places), extra)


def own_exit_codes(codes: list[int]) -> list[int]:
    """The workers' exit codes less torch's own ending of the rest: once one worker of a group
    fails, torch's agent sends the others SIGTERM, and a rank slower to reach the same exit (a busy
    machine) shows -15 beside its peers' code. Every code -15: someone else ended them all."""
    own = sorted({c for c in codes if c != -signal.SIGTERM})
    return own or sorted(set(codes))


def action_of_exit_codes(codes: list[int]) -> str | None:
    """The command action the workers' exit codes say they obeyed (trainer_hooks.exit_codes), or
    None when any failed otherwise (a crash)."""
    actions = {EXIT_ACTION.get(c) for c in codes}
    if not codes or None in actions:
        return None
    # evict (75) before the others: a rank that left for an eviction speaks for its node
    return min(actions, key=lambda a: ("evict", "stop", "rollback", "restart", "reattempt").index(a))


class CommandInbox:
    """The commands the listener passed on, for the agent's monitor loop to take in its own time.

    ``nodes`` is the job's node list of the current round: an evict naming none of them (sent
    before a restart swapped them out) is dropped, and so is a restart-type command a round
    already carried out (``done``)."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Command] = queue.Queue()
        self.done: set[str] = set()
        self.checks: Command | None = None  # the latest run_checks: it holds a crash's wait
        self.checks_at = 0.0  # when it came (time.monotonic())

    def put(self, cmd: Command) -> None:
        self._queue.put(cmd)

    def take(self, nodes: tuple[str, ...], seconds: float = 0.0) -> Command | None:
        """The next restart-type or stop command for this job within ``seconds`` (0: only one
        already here); run_checks are kept aside in ``checks``; checkpoint / capture_stacks are the
        workers' business."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                cmd = self._queue.get(timeout=max(0.0, deadline - time.monotonic())) if seconds > 0 \
                    else self._queue.get_nowait()
            except queue.Empty:
                return None
            if cmd.action == "run_checks":
                self.checks, self.checks_at = cmd, time.monotonic()
            elif cmd.action in LEAVING_ACTIONS and cmd.id not in self.done:
                if not evicts_none_of(cmd, nodes):
                    return cmd

    def after_crash(self, nodes: tuple[str, ...], crash_wait: float) -> Command | None:
        """The command that says how to go on after a crash, or None after ``crash_wait`` seconds
        (stretched by a run_checks, before or during the wait: trainer_hooks/crash_wait.py)."""
        def next_command(seconds: float) -> Command | None:
            try:
                cmd = self._queue.get(timeout=seconds)
            except queue.Empty:
                return None
            return None if cmd.action in LEAVING_ACTIONS and cmd.id in self.done else cmd

        def noted(cmd: Command, at: float) -> None:
            self.checks, self.checks_at = cmd, at

        return wait_for_verdict(next_command, nodes, crash_wait, checks=self.checks,
                                checks_at=self.checks_at, on_checks=noted)
