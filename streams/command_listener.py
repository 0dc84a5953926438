"""The background command listener: reads ``commands`` and passes on only commands to obey
(the rules are events.command_screen.CommandScreen).

The listener reads from the end of the topic with no consumer group: every process must see
every command (a group would split them), and a command issued before the process started is
not meant for it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from kafka import TopicPartition
from kafka.errors import KafkaError

from faultlens.events import topics
from faultlens.events.command import Command
from faultlens.events.command_screen import CommandScreen, Screened
from faultlens.streams.broker import answers
from faultlens.streams.config import KafkaSettings
from faultlens.streams.kafka_client import Consumer, open_consumer
from faultlens.streams.reader_ends import seek_past_end

log = logging.getLogger(__name__)

COMMANDS_TOPIC = topics.COMMANDS
# A long poll, not a fast one (issue 58): the broker holds an empty fetch up to FETCH_WAIT_MS and
# answers it when a command arrives, so an idle listener costs a fetch or two a second instead of
# twenty. Measured on the embedded broker (idle CPU of the process, send → dispatch): 50 ms fetches
# polled every 100 ms, 26.9 ms CPU/s, p50 22 ms, max 59 ms; these, 4.5 ms CPU/s, p50 10 ms, max 81
# ms. A longer fetch wait is not better: there the broker answered late (1 s: p50 136 ms; 2 s:
# 634 ms). POLL_MS bounds how long stop() waits for the thread to notice.
FETCH_WAIT_MS = 500
POLL_MS = 250
PROBE_TIMEOUT_S = 0.5


class CommandListener(threading.Thread):
    """Polls ``commands`` in a daemon thread; calls ``on_command`` for each one to obey and
    ``on_refused`` for each refused one to ack (addressed here, unreadable, or misaddressed in a
    way events.command_screen acks)."""

    def __init__(self, settings: KafkaSettings, screen: CommandScreen,
                 on_command: Callable[[Command], None],
                 on_refused: Callable[[Screened], None] | None = None,
                 *, topic: str = COMMANDS_TOPIC, poll_ms: int = POLL_MS):
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

    def _consumer(self) -> Consumer | None:
        """A consumer at the end of every partition, or None while the broker or topic is away."""
        # A TCP probe first: against no broker a Kafka client blocks for its bootstrap timeout (30 s
        # in kafka-python) and logs each failed connection at ERROR, about once a second, into the
        # agent's journal or the training job's output, for as long as the broker is away.
        if self.settings.bootstrap and not answers(self.settings.bootstrap, PROBE_TIMEOUT_S):
            return None
        try:
            consumer = open_consumer(self.settings, None, max_records=100, fetch_max_wait_ms=FETCH_WAIT_MS)
        except (KafkaError, OSError) as exc:
            log.debug("command listener: broker not reachable: %s", exc)
            return None
        try:
            parts = consumer.partitions_for_topic(self.topic)
            if not parts and hasattr(consumer, "topics"):
                # kafka-python answers from cached metadata: refresh it, the topic may be a moment old
                consumer.topics()
                parts = consumer.partitions_for_topic(self.topic)
            if not parts:
                log.debug("command listener: topic %s not there yet", self.topic)
                consumer.close()
                return None
            tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
            consumer.assign(tps)
            # Resolved now, so "ready" means "sees what comes next"; past the last record, not at the
            # listed end, which the embedded broker puts inside the last batch (streams/reader_ends.py)
            seek_past_end(consumer, tps)
        except (KafkaError, OSError) as exc:
            log.debug("command listener: %s", exc)
            consumer.close()
            return None
        return consumer

    def run(self) -> None:
        self.serve(self._stop_event)

    def serve(self, stop: threading.Event, retry_s: float = 1.0) -> None:
        """Listen until ``stop``; reconnects while the broker or the topic is away (an agent
        starts before Kafka is up, and must obey the first command after it comes back)."""
        warned = False
        while not stop.is_set():
            consumer = self._consumer()
            if consumer is None:
                if not warned:
                    log.warning("command listener: no %s topic reachable yet; retrying every %.0fs", self.topic, retry_s)
                    warned = True
                stop.wait(retry_s)
                continue
            self.ready.set()
            log.info("listening for commands on %s", self.topic)
            try:
                while not stop.is_set():
                    for messages in consumer.poll(timeout_ms=self.poll_ms).values():
                        for m in messages:
                            self.dispatch(m.value)
            except KafkaError as exc:
                log.warning("command listener: %s; reconnecting", exc)
                stop.wait(retry_s)
            finally:
                self.ready.clear()
                consumer.close()

    def dispatch(self, raw: bytes | None, now: float | None = None) -> Screened:
        """Screen one message of the topic and obey or refuse it; returns the screening."""
        result = self.screen.screen(raw, time.time() if now is None else now)
        command = result.command
        if result.obey and command is not None:  # an obeyed command always parsed
            self.obeyed += 1
            log.info("obeying command %s: %s %s", command.id, command.action, command.reason)
            try:
                self.on_command(command)
            except Exception:  # noqa: BLE001 - a failing callback must not kill the listener
                log.exception("handling command %s failed", command.id)
            return result
        if not result.ack:
            log.debug("command %s not for this receiver: %s", result.command.id if result.command else None, result.reason)
            return result
        if result.addressed:
            self.refused += 1
        cid = result.command.id if result.command else None
        log.log(logging.WARNING if result.addressed else logging.INFO, "refused command %s: %s", cid, result.reason)
        if self.on_refused is not None:
            try:
                self.on_refused(result)
            except Exception:  # noqa: BLE001
                log.exception("acking refused command %s failed", cid)
        return result
