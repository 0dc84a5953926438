"""The agent's ear for `run_checks`: a signed command → the suite → one `check`/`result` event.

The gate is the one every recipient uses (events.command_screen.CommandScreen, here for
``run_checks`` only); the agent's stack capture listens for ``capture_stacks`` the same way. The
suite runs in its own thread, so the listener keeps reading (and refusing forgeries) meanwhile;
a second command while one suite runs waits for it (the checks need the GPUs to themselves).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from faultlens.collectors.checks.suite import CheckRunner, ChecksConfig
from faultlens.collectors.command_ack import refusal_acker
from faultlens.events.command import Command
from faultlens.events.command_memory import CommandMemory
from faultlens.events.command_screen import CommandScreen
from faultlens.events.envelope import Envelope
from faultlens.events.signing import VerifyKeys
from faultlens.streams.command_listener import COMMANDS_TOPIC, CommandListener
from faultlens.streams.config import KafkaSettings

log = logging.getLogger(__name__)


class ChecksSource:
    name = "checks"

    def __init__(self, settings: KafkaSettings, *, keys: VerifyKeys, job: str, node: str,
                 publish: Callable[[Envelope], Any], config: ChecksConfig | None = None,
                 memory: CommandMemory | None = None, retry_s: float = 2.0, runner: CheckRunner | None = None):
        self.runner = runner or CheckRunner(job, node, publish, config or ChecksConfig())
        self.retry_s = retry_s
        self.screen = CommandScreen(keys, job, node, actions={"run_checks"}, memory=memory)
        # A refusal is answered (collectors.command_ack): remediation stops waiting for this node's results.
        self.listener = CommandListener(settings, self.screen, self._obey,
                                        refusal_acker(publish, job=job, node=node, actions={"run_checks"}),
                                        topic=COMMANDS_TOPIC)
        self._lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    @property
    def ready(self) -> threading.Event:
        return self.listener.ready

    def run(self, stop: threading.Event) -> None:
        self.listener.serve(stop, retry_s=self.retry_s)

    def _obey(self, cmd: Command) -> None:
        t = threading.Thread(target=self.run_for, args=(cmd,), name=f"checks-{cmd.id[:8]}", daemon=True)
        self.threads = [x for x in self.threads if x.is_alive()] + [t]
        t.start()

    def run_for(self, cmd: Command) -> Envelope:
        only = (cmd.params or {}).get("checks")
        with self._lock:
            return self.runner.run(cmd.id, cmd.diagnosis_id, only if isinstance(only, list) else None)
