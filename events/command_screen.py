"""Who obeys a command: the acceptance rules every recipient applies (trainer hook, launcher,
node agent, the demo's simulated cluster).

A command is obeyed only when it is well formed, signed by a trusted key (Ed25519, events.signing),
valid for no longer than this receiver accepts (``max_lifetime_s``, whatever the signer wrote),
issued not in the future, not expired, not handled before (its id, remembered across restarts
when the receiver keeps a command memory file), addressed to this job and to this node / rank (no nodes:
the whole job; an ``evict`` must name its nodes) and of an action this recipient carries out.
Everything else is refused with a reason, and never obeyed.

Commands for another job, node or rank are refused too, but marked not addressed. Every receiver
reads every command of the fleet, so if each acked those, the refusals that matter (a forged,
altered, duplicate or over-long command sent here) would drown in thousands of routine "not for me"
acks. Only two kinds are acked (``Screened.ack``), so that a misaddressed command still leaves a
reason on ``command_ack`` while each command costs at most a node's receivers:
- a command of another job that names this node (a stale command for the job that ran here
  before, or a signer confused about placement): acked by the receivers on that node;
- a command of this job for other nodes or ranks: acked once per job, by the receiver chosen as
  the job's ``spokesperson`` (the trainer hook of rank 0), so the job's ack stream shows that the
  job saw it and who it was for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from faultlens.events.command import MAX_LIFETIME_S, Command
from faultlens.events.command_memory import CommandMemory
from faultlens.events.envelope import InvalidEvent
from faultlens.events.signing import VerifyKeys

# Clocks of the signer and the receivers differ a little; a command from further ahead is refused.
FUTURE_SKEW_S = 60.0


@dataclass(frozen=True)
class Screened:
    """The outcome for one message: ``command`` is None when it did not even parse."""

    command: Command | None
    obey: bool
    reason: str
    addressed: bool = True  # False: meant for another job / node / rank / kind of receiver
    ack: bool = True  # answer it on command_ack (every addressed one; see the module doc for the rest)


def ack_payload(rank: int | None, command: Command | None, obeyed: bool, reason: str,
                addressed: bool = True) -> dict:
    """A receiver's answer to ``command`` (None: a message that did not parse), the payload of a
    `command_ack` event (docs/events.md), whoever sends it: a trainer rank, or a node agent
    (``rank`` None)."""
    return {"rank": rank, "command_id": command.id if command else None,
            "action": command.action if command else None, "obeyed": obeyed, "reason": reason,
            "addressed": addressed}


class CommandScreen:
    """The pure acceptance rules, with the ids already handled (``memory``; in memory only unless
    given a persisted one)."""

    def __init__(self, keys: VerifyKeys, job: str, node: str | None = None, rank: int | None = None,
                 actions: Iterable[str] | None = None, *, memory: CommandMemory | None = None,
                 max_lifetime_s: float = MAX_LIFETIME_S, spokesperson: bool = False):
        self.keys = keys
        self.job = job
        self.node = node
        self.rank = rank
        self.actions = frozenset(actions) if actions is not None else None  # None: every action
        self.memory = memory if memory is not None else CommandMemory()
        self.max_lifetime_s = max_lifetime_s
        self.spokesperson = spokesperson

    def _scope(self, cmd: Command) -> tuple[str, bool] | None:
        """Why the command is not addressed to this receiver, and whether to ack that; None when
        it is addressed here."""
        if cmd.job != self.job:
            names_me = self.node is not None and self.node in cmd.nodes
            return f"for job {cmd.job}, not {self.job}" + (f" (names {self.node})" if names_me else ""), names_me
        if self.actions is not None and cmd.action not in self.actions:
            return f"action {cmd.action} is not carried out here", False
        if self.node is not None and cmd.nodes and self.node not in cmd.nodes:
            return f"for nodes {','.join(cmd.nodes)}, not {self.node}", self.spokesperson
        if self.rank is not None and cmd.ranks and self.rank not in cmd.ranks:
            return f"for ranks {','.join(map(str, cmd.ranks))}, not {self.rank}", self.spokesperson
        return None

    def _problem(self, cmd: Command, now: float) -> str | None:
        """Why an addressed command must not be obeyed; None when it may."""
        if not (math.isfinite(cmd.issued_at) and math.isfinite(cmd.expires_at)):
            # NaN passes every comparison below, the lifetime cap included. (The record type lets
            # it through: the history stores such a record's rejection with its reason.)
            return "malformed command: issued_at and expires_at must be finite"
        bad = cmd.signature_problem(self.keys)
        if bad:
            return bad
        lifetime = cmd.expires_at - cmd.issued_at
        if lifetime > self.max_lifetime_s:
            return f"lifetime {lifetime:.0f}s is over the {self.max_lifetime_s:.0f}s this receiver accepts"
        if cmd.issued_at > now + FUTURE_SKEW_S:
            return f"issued {cmd.issued_at - now:.0f}s in the future (clocks more than {FUTURE_SKEW_S:.0f}s apart?)"
        if now > cmd.expires_at:
            return f"expired {now - cmd.expires_at:.1f}s ago"
        if cmd.action == "evict" and not cmd.nodes:
            return "an evict must name its nodes"
        if cmd.id in self.memory:
            return "duplicate (command id already handled)"
        return None

    def screen(self, raw: bytes | None, now: float) -> Screened:
        try:
            cmd = Command.decode(raw)
        except InvalidEvent as exc:
            return Screened(None, False, f"malformed command: {exc}")
        elsewhere = self._scope(cmd)
        if elsewhere:
            reason, ack = elsewhere
            return Screened(cmd, False, reason, addressed=False, ack=ack)
        problem = self._problem(cmd, now)
        if problem:
            return Screened(cmd, False, problem)
        self.memory.remember(cmd.id, cmd.expires_at, now)
        return Screened(cmd, True, "ok")
