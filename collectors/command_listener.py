"""The agent's ear on the `commands` topic: signed `capture_stacks` commands → py-spy dumps.

Every agent must see every command for its job, so this is a plain consumer with no group,
assigned every partition and starting at the end (an old command is stale by definition).
:func:`check_command` is the pure gate: a command is obeyed only when its HMAC verifies under the
shared secret, it is unexpired, for this job, addressed to this node (or to every node when
``nodes`` is empty), and not seen before (the remediation side may resend).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Callable

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from collectors.stack_capture import DumpResult, capture, dump_event, find_training_processes
from remediation.command import Command
from streams.config import KafkaSettings
from streams.events import Envelope, InvalidEvent

log = logging.getLogger(__name__)

COMMANDS_TOPIC = "commands"


class SeenIds:
    """The ids of the last ``limit`` commands handled (bounded: an agent runs for months)."""

    def __init__(self, limit: int = 10_000):
        self.limit = limit
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, command_id: str) -> bool:
        return command_id in self._ids

    def add(self, command_id: str) -> None:
        self._ids[command_id] = None
        while len(self._ids) > self.limit:
            self._ids.popitem(last=False)


def check_command(cmd: Command, *, secret: bytes, job: str, node: str, now: float, seen: SeenIds) -> str | None:
    """``None`` when this agent must capture stacks for ``cmd``, else why not."""
    if cmd.action != "capture_stacks":
        return f"action {cmd.action} is not for the node agent"
    if not cmd.verify(secret):
        return "bad signature"
    if cmd.job != job:
        return f"for job {cmd.job}, not {job}"
    if cmd.nodes and node not in cmd.nodes:
        return "not addressed to this node"
    if now > cmd.expires_at:
        return f"expired {now - cmd.expires_at:.0f}s ago"
    if cmd.id in seen:
        return "already handled"
    return None


class StackCaptureSource:
    """Agent source: listens for commands and publishes one `stack_dump` per training process."""

    name = "stacks"

    def __init__(self, settings: KafkaSettings, *, secret: bytes, job: str, node: str,
                 publish: Callable[[Envelope], Any], launcher_pid: int | None = None,
                 proc_pattern: str | None = None, rank_env: str = "RANK", dump_timeout_s: float = 10.0,
                 retry_s: float = 2.0):
        self.settings = settings
        self.secret = secret
        self.job = job
        self.node = node
        self.publish = publish
        self.launcher_pid = launcher_pid
        self.proc_pattern = proc_pattern
        self.rank_env = rank_env
        self.dump_timeout_s = dump_timeout_s
        self.retry_s = retry_s
        self.seen = SeenIds()
        self.refused = 0
        self.captures = 0
        self.ready = threading.Event()  # set once the consumer sits at the end of the topic

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            consumer = self._connect()
            if consumer is None:
                stop.wait(self.retry_s)
                continue
            try:
                self._consume(consumer, stop)
            except KafkaError as exc:
                log.warning("command listener: %s; reconnecting", exc)
                stop.wait(self.retry_s)
            finally:
                self.ready.clear()
                consumer.close()

    def _connect(self) -> KafkaConsumer | None:
        try:
            consumer = KafkaConsumer(**{**self.settings.common_kwargs(), "group_id": None, "enable_auto_commit": False})
        except (KafkaError, OSError) as exc:
            log.debug("command listener: broker not reachable: %s", exc)
            return None
        partitions = consumer.partitions_for_topic(COMMANDS_TOPIC)
        if not partitions:
            consumer.close()
            log.debug("command listener: topic %s not there yet", COMMANDS_TOPIC)
            return None
        parts = [TopicPartition(COMMANDS_TOPIC, p) for p in sorted(partitions)]
        consumer.assign(parts)
        consumer.seek_to_end(*parts)
        for tp in parts:
            consumer.position(tp)  # resolve the end offsets now, so a command sent next is seen
        self.ready.set()
        log.info("listening for capture_stacks commands on %s", COMMANDS_TOPIC)
        return consumer

    def _consume(self, consumer: KafkaConsumer, stop: threading.Event) -> None:
        while not stop.is_set():
            for records in consumer.poll(timeout_ms=200).values():
                for record in records:
                    self.handle(record.value)

    def handle(self, raw: bytes | None, now: float | None = None) -> list[Envelope]:
        """One message of the commands topic; returns (and publishes) the dump events."""
        try:
            cmd = Command.decode(raw)
        except InvalidEvent as exc:
            self.refused += 1
            log.warning("command listener: unreadable command: %s", exc)
            return []
        reason = check_command(cmd, secret=self.secret, job=self.job, node=self.node,
                               now=time.time() if now is None else now, seen=self.seen)
        if reason is not None:
            if cmd.action == "capture_stacks":
                self.refused += 1
                log.warning("refused capture_stacks command %s: %s", cmd.id, reason)
            return []
        self.seen.add(cmd.id)
        return self.capture(cmd.id)

    def capture(self, request_id: str) -> list[Envelope]:
        procs = find_training_processes(launcher_pid=self.launcher_pid, proc_pattern=self.proc_pattern,
                                        rank_env=self.rank_env)
        self.captures += 1
        if not procs:
            # Still answer: a diagnoser waiting for this node's dumps learns why none come.
            how = f"launcher pid {self.launcher_pid}" if self.launcher_pid else f"pattern {self.proc_pattern!r}"
            results = [DumpResult(None, None, f"no training processes found on this node ({how})", False)]
        else:
            results = capture(procs, timeout_s=self.dump_timeout_s)
        events = [dump_event(r, job=self.job, node=self.node, request_id=request_id) for r in results]
        for event in events:
            self.publish(event)
        log.info("capture %s: %d dump(s), %d failed", request_id, len(events), sum(not r.ok for r in results))
        return events
