"""The agent's ear on the `commands` topic: signed `capture_stacks` commands → py-spy dumps.

Every agent must see every command for its job, so it reads with no group from the end of the
topic (streams.command_listener.CommandListener, reconnecting while Kafka is away). The gate is the
one every recipient uses (events.command_screen.CommandScreen): signed by a trusted key, within
the lifetime cap, unexpired, for this job, addressed to this node (or to every node when ``nodes``
is empty), not seen before (``memory``: persisted, so a restarted agent still refuses a duplicate),
and — here — a ``capture_stacks``; other actions are for the trainer and are ignored, not refused.
A refused ``capture_stacks`` is answered with a `check`/`command_ack` (collectors.command_ack).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from faultlens.collectors.command_ack import refusal_acker
from faultlens.collectors.stack_capture import DumpResult, capture, dump_event, find_training_processes, unranked_pids
from faultlens.events.command import Command
from faultlens.events.command_memory import CommandMemory
from faultlens.events.command_screen import CommandScreen
from faultlens.events.envelope import Envelope
from faultlens.events.signing import VerifyKeys
from faultlens.streams.command_listener import COMMANDS_TOPIC, CommandListener
from faultlens.streams.config import KafkaSettings

log = logging.getLogger(__name__)


class StackCaptureSource:
    """Agent source: listens for commands and publishes one `stack_dump` per training process."""

    name = "stacks"

    def __init__(self, settings: KafkaSettings, *, keys: VerifyKeys, job: str, node: str,
                 publish: Callable[[Envelope], Any], launcher_pid: int | None = None,
                 proc_pattern: str | None = None, rank_env: str = "RANK", dump_timeout_s: float = 10.0,
                 retry_s: float = 2.0, memory: CommandMemory | None = None):
        self.settings = settings
        self.job = job
        self.node = node
        self.publish = publish
        self.launcher_pid = launcher_pid
        self.proc_pattern = proc_pattern
        self.rank_env = rank_env
        self.dump_timeout_s = dump_timeout_s
        self.retry_s = retry_s
        self.screen = CommandScreen(keys, job, node, actions={"capture_stacks"}, memory=memory)
        # A refusal is answered (collectors.command_ack), so whoever asked for stacks learns why none come.
        self.listener = CommandListener(settings, self.screen, self._obey,
                                        refusal_acker(publish, job=job, node=node, actions={"capture_stacks"}),
                                        topic=COMMANDS_TOPIC)
        self.captures = 0
        self._last: list[Envelope] = []

    @property
    def ready(self) -> threading.Event:
        """Set while the listener sits at the end of the commands topic."""
        return self.listener.ready

    @property
    def refused(self) -> int:
        return self.listener.refused

    def run(self, stop: threading.Event) -> None:
        self.listener.serve(stop, retry_s=self.retry_s)

    def handle(self, raw: bytes | None, now: float | None = None) -> list[Envelope]:
        """One message of the commands topic; returns (and publishes) the dump events."""
        self._last = []
        self.listener.dispatch(raw, now)
        return self._last

    def _obey(self, cmd: Command) -> None:
        self._last = self.capture(cmd.id)

    def capture(self, request_id: str) -> list[Envelope]:
        procs = find_training_processes(launcher_pid=self.launcher_pid, proc_pattern=self.proc_pattern,
                                        rank_env=self.rank_env)
        self.captures += 1
        if not procs:
            # Still answer: a diagnoser waiting for this node's dumps learns why none come.
            how = f"launcher pid {self.launcher_pid}" if self.launcher_pid else f"pattern {self.proc_pattern!r}"
            results = [DumpResult(None, None, f"no training processes found on this node ({how})", False)]
        else:
            unranked = unranked_pids(procs)
            if unranked:
                # Still dumped: the stacks are real and end the diagnoser's wait for this node, but
                # without a rank nobody can place them; the operator must fix --rank-env.
                log.warning("capture %s: no rank in the environment of pid(s) %s (--rank-env %s, nor torchrun's "
                            "LOCAL_RANK/GROUP_RANK): their dumps go out with a null rank and cannot be placed",
                            request_id, unranked, self.rank_env)
            # The whole capture's deadline: a rank whose py-spy hangs costs one dump timeout, and
            # the node still answers for every rank well before the diagnoser gives up on it.
            results = capture(procs, timeout_s=self.dump_timeout_s,
                              deadline_s=self.dump_timeout_s * 2 + 0.5 * len(procs))
        events = [dump_event(r, job=self.job, node=self.node, request_id=request_id, rank_env=self.rank_env)
                  for r in results]
        for event in events:
            self.publish(event)
        log.info("capture %s: %d dump(s), %d failed", request_id, len(events), sum(not r.ok for r in results))
        return events
