"""The simulated cluster's trainer hooks, as far as commands go: each rank answers a command on
`train`/`command_ack` the way trainer_hooks.hook.TrainerHook does, so demo histories show commands
obeyed or refused instead of "no answer".

Each rank screens the message with the real rules (events.command_screen.CommandScreen for its
node and rank, rank 0 as the job's spokesperson, its own command memory) and acks what the real hook
acks: an obeyed command with the hook's reason (trainer_hooks.ack_reasons), a refusal with the
screen's reason and ``addressed``, and nothing for what it neither carries out nor is asked to ack
(``run_checks``, routine "not for me"). Only what a real cluster would say: no ack while the job is
down (its trainer processes are gone, as its heartbeats' empty pid lists say), each from the node
that holds the rank at the time, on the simulated clock.
"""

from __future__ import annotations

from typing import Mapping

from faultlens.events.command_memory import CommandMemory
from faultlens.events.command_screen import CommandScreen, ack_payload
from faultlens.events.signing import VerifyKeys
from faultlens.trainer_hooks.ack_reasons import obeyed_reason


class SimulatedHookAcks:
    """Per-rank command screens of one simulated job; :meth:`acks` answers one message."""

    def __init__(self, keys: VerifyKeys, job: str):
        self.keys = keys
        self.job = job
        # A real hook keeps its memory in the checkpoint directory: it outlives restarts and swaps.
        self._memory: dict[int, CommandMemory] = {}

    def acks(self, raw: bytes | None, now: float, placement: Mapping[int, str],
             alive: bool = True) -> list[tuple[str, dict]]:
        """(node, `command_ack` payload) for each rank of ``placement`` (rank → node) that answers
        the message ``raw`` received at ``now``; none when the trainers are not ``alive``."""
        if not alive:
            return []
        out = []
        for rank, node in sorted(placement.items()):
            screen = CommandScreen(self.keys, self.job, node, rank, spokesperson=rank == 0,
                                   memory=self._memory.setdefault(rank, CommandMemory()))
            screened = screen.screen(raw, now)
            cmd = screened.command
            if screened.obey and cmd is not None:  # an obeyed screening always parsed
                reason = obeyed_reason(cmd.action)
                if reason is None:
                    continue  # the node agent's action: the trainer neither obeys nor acks it
                out.append((node, ack_payload(rank, cmd, True, reason)))
            elif screened.ack:
                out.append((node, ack_payload(rank, cmd, False, screened.reason, screened.addressed)))
        return out
