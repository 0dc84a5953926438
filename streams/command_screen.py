"""Who obeys a command: the acceptance rules every recipient applies (trainer hook, launcher,
node agent, the demo's simulated cluster).

A command is obeyed only when it is well formed, signed with the shared secret, not expired, not
seen before (its id), addressed to this job and to this node / rank (no nodes: the whole job;
no ranks: every rank), and of an action this recipient carries out. Everything else is refused
with a reason, and never obeyed.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable

from streams.command import Command
from streams.events import InvalidEvent

_SEEN_LIMIT = 10_000  # ids remembered: a recipient runs for months, a replay comes within minutes


@dataclass(frozen=True)
class Screened:
    """The outcome for one message: ``command`` is None when it did not even parse."""

    command: Command | None
    obey: bool
    reason: str
    addressed: bool = True  # False: meant for another job / node; neither obeyed nor acked


class CommandScreen:
    """The pure acceptance rules, with the set of ids already handled."""

    def __init__(self, secret: bytes, job: str, node: str | None = None, rank: int | None = None,
                 actions: Iterable[str] | None = None):
        self.secret = secret
        self.job = job
        self.node = node
        self.rank = rank
        self.actions = frozenset(actions) if actions is not None else None  # None: every action
        self._seen: OrderedDict[str, None] = OrderedDict()

    def screen(self, raw: bytes | None, now: float) -> Screened:
        try:
            cmd = Command.decode(raw)
        except InvalidEvent as exc:
            return Screened(None, False, f"malformed command: {exc}")
        if cmd.job != self.job:
            return Screened(cmd, False, f"for job {cmd.job}", addressed=False)
        if self.actions is not None and cmd.action not in self.actions:
            return Screened(cmd, False, f"action {cmd.action} is not carried out here", addressed=False)
        if self.node is not None and cmd.nodes and self.node not in cmd.nodes:
            return Screened(cmd, False, f"for nodes {','.join(cmd.nodes)}", addressed=False)
        if self.rank is not None and cmd.ranks and self.rank not in cmd.ranks:
            return Screened(cmd, False, f"for ranks {cmd.ranks}", addressed=False)
        if not cmd.verify(self.secret):
            return Screened(cmd, False, "bad signature (forged or altered)")
        if now > cmd.expires_at:
            return Screened(cmd, False, f"expired {now - cmd.expires_at:.1f}s ago")
        if cmd.id in self._seen:
            return Screened(cmd, False, "replayed (command id already handled)")
        self._seen[cmd.id] = None
        if len(self._seen) > _SEEN_LIMIT:
            self._seen.popitem(last=False)
        return Screened(cmd, True, "ok")
