"""The background command listener: reads ``commands`` and passes on only commands to obey.

A command is obeyed only when it is well formed, signed with the shared secret, not expired, not
seen before (its id), and addressed to this job and to this node / rank (no nodes: the whole job;
no ranks: every rank). Everything else is refused with a reason, and never obeyed.

The listener reads from the end of the topic with no consumer group: every process must see
every command (a group would split them), and a command issued before the process started is
not meant for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from remediation.command import Command
from streams.config import KafkaSettings
from streams.events import InvalidEvent

log = logging.getLogger(__name__)

COMMANDS_TOPIC = "commands"
_SEEN_LIMIT = 10_000


@dataclass(frozen=True)
class Screened:
    """The outcome for one message: ``command`` is None when it did not even parse."""

    command: Command | None
    obey: bool
    reason: str
    addressed: bool = True  # False: meant for another job / node; neither obeyed nor acked


class CommandScreen:
    """The pure acceptance rules, with the set of ids already handled."""

    def __init__(self, secret: bytes, job: str, node: str | None = None, rank: int | None = None):
        self.secret = secret
        self.job = job
        self.node = node
        self.rank = rank
        self._seen: OrderedDict[str, None] = OrderedDict()

    def screen(self, raw: bytes | None, now: float) -> Screened:
        try:
            cmd = Command.decode(raw)
        except InvalidEvent as exc:
            return Screened(None, False, f"malformed command: {exc}")
        if cmd.job != self.job:
            return Screened(cmd, False, f"for job {cmd.job}", addressed=False)
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


class CommandListener(threading.Thread):
    """Polls ``commands`` in a daemon thread; calls ``on_command`` for each one to obey and
    ``on_refused`` for each refused one addressed here (or unreadable)."""

    def __init__(self, settings: KafkaSettings, screen: CommandScreen,
                 on_command: Callable[[Command], None],
                 on_refused: Callable[[Screened], None] | None = None,
                 *, topic: str = COMMANDS_TOPIC, poll_ms: int = 100):
        super().__init__(name="faultlens-commands", daemon=True)
        self.settings = settings
        self.screen = screen
        self.on_command = on_command
        self.on_refused = on_refused
        self.topic = topic
        self.poll_ms = poll_ms
        self.ready = threading.Event()
        self._stop_event = threading.Event()
        self.obeyed = 0
        self.refused = 0

    def stop(self) -> None:
        self._stop_event.set()

    def _consumer(self) -> KafkaConsumer:
        # A short fetch wait: a command should reach the trainer in milliseconds, not at the next long poll.
        consumer = KafkaConsumer(**{**self.settings.common_kwargs(), "group_id": None, "enable_auto_commit": False,
                                    "fetch_max_wait_ms": 50})
        deadline = time.monotonic() + 30
        parts = consumer.partitions_for_topic(self.topic)
        while not parts and time.monotonic() < deadline:
            time.sleep(0.2)
            consumer.topics()  # refresh metadata: the topic may be created a moment later
            parts = consumer.partitions_for_topic(self.topic)
        if not parts:
            consumer.close()
            raise RuntimeError(f"topic {self.topic!r} does not exist")
        tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_end(*tps)
        for tp in tps:
            consumer.position(tp)  # resolve the end offsets now, so "ready" means "sees what comes next"
        return consumer

    def run(self) -> None:
        try:
            consumer = self._consumer()
        except (KafkaError, RuntimeError, OSError) as exc:
            log.error("command listener could not start: %s; commands will not be obeyed", exc)
            return
        self.ready.set()
        try:
            while not self._stop_event.is_set():
                try:
                    polled = consumer.poll(timeout_ms=self.poll_ms)
                except KafkaError as exc:
                    log.warning("command listener poll failed: %s", exc)
                    time.sleep(0.5)
                    continue
                for messages in polled.values():
                    for m in messages:
                        self._one(m.value)
        finally:
            consumer.close()

    def _one(self, raw: bytes | None) -> None:
        result = self.screen.screen(raw, time.time())
        if result.obey:
            self.obeyed += 1
            log.info("obeying command %s: %s %s", result.command.id, result.command.action, result.command.reason)
            try:
                self.on_command(result.command)
            except Exception:  # noqa: BLE001 - a failing callback must not kill the listener
                log.exception("handling command %s failed", result.command.id)
            return
        if not result.addressed:
            return
        self.refused += 1
        cid = result.command.id if result.command else None
        log.warning("refused command %s: %s", cid, result.reason)
        if self.on_refused is not None:
            try:
                self.on_refused(result)
            except Exception:  # noqa: BLE001
                log.exception("acking refused command %s failed", cid)
