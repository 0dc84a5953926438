"""Only the hook speaks of a broker outage: its own Kafka clients' records are DEBUG while it is lost.

Through an outage kafka-python logs every reconnect of every client at ERROR or WARNING (a minute
without a broker: ~75 lines, most from the command listener's consumer), in a training job whose
user was promised three lines (trainer_hooks/outbox.py: broker lost, spool full, broker back).

The hook's own clients are told apart from a user's by the threads their records come from: the
command listener's thread and the two threads kafka-python names after a client's ``client_id``
(``kafka-io-<id>``, ``<id>-network-thread``); librdkafka's lines (``settings.client =
"confluent"``, through the ``faultlens.streams.librdkafka`` logger) by the client name they carry,
``<id>#producer-1``. A user's own client in the same process speaks as before unless it was given
the hook's client_id. A record of the hook's clients at WARNING or
above is demoted to DEBUG while the hook knows the broker is lost: its spool says so, or the broker
does not answer a TCP probe (made when such a record comes, at most once a PROBE_EVERY_S), or the
record itself says a connection failed: so the burst of lines at the moment of the loss is caught
before the spool's 5 s acknowledgement timeout.
The clients' aftermath is demoted too, for SETTLE_S after the hook last found the broker lost: a
consumer whose metadata refresh was backing off says "No node available" once more after the broker
is back, and one that finds its topic recreated (a broker that kept no state) says so a few seconds
later (6 s measured on the embedded broker). Any other record of theirs (a misconfiguration, a
broker that answers but refuses) keeps its level.

Closing is the other time the clients speak for nothing: a connection still being set up is aborted
("Abort", "Connection lost", a bootstrap that fails), a selector is closed under the IO loop. After
:meth:`OutageVoice.closing` every WARNING+ record of the hook's clients is DEBUG, the broker up or
not, and :meth:`OutageVoice.release` takes the filter away only once the threads that were still
running have ended: the command listener and kafka-python's IO threads finish closing after the
hook's close() returns.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from faultlens.streams.broker import answers

PROBE_EVERY_S = 1.0
PROBE_TIMEOUT_S = 0.5
SETTLE_S = 30.0
# How long a released voice waits for its clients' threads before it goes anyway: kafka-python's
# request timeout (30 s) ends a connection still being set up, and a bootstrap backs off after it.
RELEASE_WAIT_S = 60.0
# A client of the hook's that says its connection failed is the first to know: a probe made as the
# broker dies may still be answered (its connections closed a moment before its listening socket).
# Said in the record's text, or only in its exception: a broker killed with a request of ours still
# unread resets the connection (the kernel closes a socket with unread data so), and kafka-python logs
# "Error receiving network data closing socket" with a ConnectionResetError's traceback, the same
# loss as the empty read it logs as "socket disconnected" when the broker had read everything.
CONNECTION_LOST = ("KafkaConnectionError", "ECONNREFUSED", "Connection refused", "socket disconnected",
                   "ConnectionResetError", "Connection reset", "ConnectionAbortedError", "BrokenPipeError",
                   "Broken pipe")
# Loggers of the clients the hook owns: kafka-python's (all created when kafka is imported) and the
# command listener's own reconnect line. Not the outbox's: its lines are the ones the user reads.
LIBRDKAFKA = "faultlens.streams.librdkafka"  # streams/confluent_config.py: args (facility, client name, text)
LOGGERS = ("kafka", "faultlens.streams.command_listener", LIBRDKAFKA)


def client_threads(client_id: str, *others: str) -> frozenset[str]:
    """The names of the threads a kafka-python client with ``client_id`` logs from, and ``others``."""
    return frozenset({f"kafka-io-{client_id}", f"{client_id}-network-thread", *others})


class OutageVoice(logging.Filter):
    """Demotes the WARNING+ records of ``threads`` to DEBUG while ``down()`` or the broker at
    ``bootstrap`` does not answer; a demoted record reaches handlers only where its logger is
    enabled for DEBUG (the logger's level was checked at WARNING before the filter ran).
    ``on_lost`` is called once an outage, when the first record of it is demoted: an owner whose
    outbox may have nothing to send for a long while (the launcher) says there that the broker is
    lost, in the one line the clients' thirty would have been."""

    def __init__(self, threads: frozenset[str], bootstrap: str | None, down: Callable[[], bool], client_id: str = "",
                 on_lost: Callable[[], object] | None = None):
        super().__init__()
        self.threads, self.bootstrap, self.down, self.on_lost = threads, bootstrap, down, on_lost
        self.librdkafka_name = f"{client_id}#" if client_id else None
        self.demoted = 0
        self._lock = threading.Lock()
        self._probed_at = -PROBE_EVERY_S
        self._lost_at: float | None = None
        self._closing = False

    def lost(self, said: str = "") -> bool:
        """Whether the broker is lost now (``said``: a record of the hook's clients), or was less than
        SETTLE_S ago."""
        with self._lock:
            now = time.monotonic()
            was_lost = self._lost_at is not None and now - self._lost_at < SETTLE_S
            is_lost = self._lost(now, said)
        if is_lost and not was_lost and self.on_lost is not None:
            self.on_lost()  # outside the lock: it logs, and its record may come back through this filter
        return is_lost

    def _lost(self, now: float, said: str) -> bool:
        if self.down() or any(word in said for word in CONNECTION_LOST):
            self._lost_at = now
        elif self.bootstrap and now - self._probed_at >= PROBE_EVERY_S:
            if not answers(self.bootstrap, PROBE_TIMEOUT_S):
                self._lost_at = now
            self._probed_at = time.monotonic()
        return self._lost_at is not None and now - self._lost_at < SETTLE_S

    def ours(self, record: logging.LogRecord) -> bool:
        if record.name == LIBRDKAFKA:
            args = record.args if isinstance(record.args, tuple) else ()
            return self.librdkafka_name is not None and len(args) > 1 and str(args[1]).startswith(self.librdkafka_name)
        return record.threadName in self.threads

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not self.ours(record):
            return True
        if not self._closing and not self.lost(_said(record)):
            return True
        self.demoted += 1
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)

    def install(self) -> "OutageVoice":
        for logger in _loggers():
            logger.addFilter(self)
        return self

    def remove(self) -> None:
        for logger in _loggers():
            logger.removeFilter(self)

    def closing(self) -> "OutageVoice":
        """The clients are being closed: from now on all they say at WARNING or above is DEBUG."""
        self._closing = True
        return self

    def release(self, wait_s: float = RELEASE_WAIT_S) -> threading.Thread | None:
        """Remove the filter once the threads of ``threads`` alive now have ended, at most ``wait_s``
        from now, without making the caller wait: the thread that waits, or None (none was alive, the
        filter is gone)."""
        me = threading.current_thread()
        running = [t for t in threading.enumerate() if t.name in self.threads and t is not me]
        if not running:
            self.remove()
            return None

        def remove_when_done() -> None:
            deadline = time.monotonic() + wait_s
            for thread in running:
                thread.join(max(0.0, deadline - time.monotonic()))
            self.remove()

        waiter = threading.Thread(target=remove_when_done, name="faultlens-voice-release", daemon=True)
        waiter.start()
        return waiter


def quiet_close(voice: OutageVoice, *steps: Callable[[], object]) -> threading.Thread | None:
    """Run ``steps`` (each closes clients of ours) with what those clients say as they close at DEBUG
    (``voice``, installed, is :meth:`~OutageVoice.closing` from now), then release it. Returns
    :meth:`~OutageVoice.release`'s."""
    voice.closing()
    try:
        for step in steps:
            step()
    finally:
        waiter = voice.release()
    return waiter


def _said(record: logging.LogRecord) -> str:
    """What a record says: its text, and the exception it carries (a connection reset is said there
    alone: "ConnectionResetError: [Errno 104] Connection reset by peer")."""
    exc = record.exc_info[1] if record.exc_info else None
    if exc is None:
        return record.getMessage()
    return f"{record.getMessage()} {type(exc).__name__}: {exc}"


def _loggers() -> list[logging.Logger]:
    # A filter acts only on the records of the logger it is on, not on its children's: every one.
    import kafka  # noqa: F401 - creates kafka-python's module loggers

    names = [n for n in list(logging.root.manager.loggerDict) if any(n == p or n.startswith(p + ".") for p in LOGGERS)]
    return [logging.getLogger(n) for n in sorted(set(names) | set(LOGGERS))]
