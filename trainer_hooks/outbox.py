"""What the training side publishes, sent from a thread of its own so that the operator side can
never stop training: no broker at start, a broker lost mid-run, a slow one, a full queue.

``hook.step`` (and `faultlens run`'s agent) only append an event to a bounded in-memory spool; a
daemon thread connects when a broker answers, sends the spool in batches and takes a batch off
only once the broker acknowledged it. While no broker answers, events wait in the spool (oldest
dropped past ``capacity``, counted in ``dropped``) and the thread retries every ``retry_s``; when
the broker comes back the spool is sent in order. The trainer sees one warning when the broker goes
away, one when the spool first overflows, one line when it catches up, and, at close, how much was
never delivered: never an exception, never a wait for a broker that is gone.

A batch whose acknowledgement was lost with the connection is sent again on the next one, so an
event can arrive twice (Kafka's at-least-once); one is never silently lost but by the spool's bound.

A record the broker or the client refuses for good (over the message size limit, an invalid or
unknown topic, no authorization: streams/producer.py's rejection_kind, by each client's own error)
is not the broker lost: that record is dropped, counted in ``rejected`` and said in one warning per
kind (its topic and size; again at most once a minute, with the count since), and the batch's other
records count as delivered. Sent again it would fail again, hold the spool behind it for good and
report an outage there is not.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import Counter, deque
from typing import Callable, Protocol

from faultlens.events.envelope import Envelope, encode
from faultlens.streams.broker import answers
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import DeliveryError, RefusalVoice

log = logging.getLogger(__name__)

CAPACITY = 20_000  # events (a step event is ~300 bytes: 6 MB; at 1 step/s per rank, 5 h of outage)
BATCH = 500
FLUSH_S = 5.0  # a batch not acknowledged within this long: the broker is taken as gone
RETRY_S = 1.0


class Sink(Protocol):
    def send_event(self, event: Envelope) -> None: ...
    def flush(self, timeout: float | None = ...) -> object: ...
    def close(self, timeout: float = ...) -> None: ...


def _kafka_producer(settings: KafkaSettings) -> Callable[[], Sink]:
    def make() -> Sink:
        from faultlens.streams.producer import Producer

        # Its failed sends are still in the spool, sent again later: what is lost the outbox says itself.
        return Producer(settings, failure_level=logging.DEBUG)
    return make


class Outbox:
    """``send_event`` never blocks nor raises; ``flush`` and ``close`` wait at most their timeout,
    and not at all while no broker answers. Counters: ``delivered``, ``dropped``, ``rejected``
    (refused for good), ``outages``."""

    def __init__(self, settings: KafkaSettings | None, *, connect: Callable[[], Sink] | None = None,
                 capacity: int = CAPACITY, batch: int = BATCH, flush_s: float = FLUSH_S, retry_s: float = RETRY_S,
                 name: str = "faultlens-outbox"):
        if connect is None and (settings is None or not settings.bootstrap):
            raise ValueError("the outbox needs a broker address (settings.bootstrap) or a connect function")
        self.bootstrap = settings.bootstrap if settings is not None else None
        self._connect = connect or _kafka_producer(settings)  # type: ignore[arg-type]
        self.capacity, self.batch, self.flush_s, self.retry_s = capacity, batch, flush_s, retry_s
        self._queue: deque[Envelope] = deque()
        self._inflight = 0
        self._cond = threading.Condition()
        self._wake = threading.Event()  # cuts a retry wait short at close
        self._closing = False
        self._give_up = False  # close: stop retrying, leave what is left
        self._sink: Sink | None = None
        # Producers let go while their broker was away: closed once their own queue gives up or
        # delivers (their network thread would otherwise live on, one per outage).
        self._abandoned: list[Sink] = []
        self.delivered = 0
        self.dropped = 0
        self.rejected = 0
        self.outages = 0
        self.undelivered = 0  # left unacknowledged at close
        self.cut_short = False  # the close's bound passed with the sender thread still busy
        self.down_since: float | None = None  # time.monotonic() of the failure that began the outage
        self.down_reason = ""
        self._last_ok = time.monotonic()  # the last acknowledged batch (or the start)
        self._warned_drop = False
        self._refusals = RefusalVoice(log, "faultlens telemetry", "dropped, the rest goes on")
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)

    # --- the trainer's side -----------------------------------------------------------------
    def send_event(self, event: Envelope) -> None:
        with self._cond:
            if self._closing:
                self.dropped += 1
                return
            self._queue.append(event)
            self._trim()
            self._cond.notify_all()

    @property
    def pending(self) -> int:
        """Events not yet acknowledged by the broker (spooled or in flight)."""
        with self._cond:
            return len(self._queue) + self._inflight

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until every event so far is acknowledged, the broker is found gone, or ``timeout``.
        True when nothing is left; never raises."""
        deadline = time.monotonic() + (timeout if timeout is not None else FLUSH_S * 2)
        with self._cond:
            while self._queue or self._inflight:
                left = deadline - time.monotonic()
                if left <= 0 or self.down_since is not None or self._give_up:
                    return False
                self._cond.wait(min(left, 0.2))
            return True

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what can be within ``timeout`` (none of it while the broker is down), then stop;
        what is left is counted (``undelivered``) and said once. ``timeout`` bounds the whole close:
        before, a flush of ``timeout`` was followed by a wait for the sender thread of up to
        ``flush_s`` + 1 more (16 s at a broker that takes connections and never answers, the thread
        stuck in its client's bootstrap). A thread still busy at the bound is left to end on its
        own (a daemon: it gives up at its next step, ``cut_short`` says so)."""
        atexit.unregister(self._at_exit)
        with self._cond:
            if self._closing:
                return
        deadline = time.monotonic() + timeout
        self.flush(timeout)
        with self._cond:
            self._closing = self._give_up = True
            self._cond.notify_all()
        self._wake.set()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            self.cut_short = self._thread.is_alive()
            self.undelivered = left = len(self._queue) + self._inflight
            broker = self.down_reason or ("slow" if left else "answering")
        if self.cut_short:
            self._abandon_busy_sink()
        if left or self.dropped or self.rejected:
            bound = f", the close's {timeout:g} s bound reached" if self.cut_short else ""
            log.warning("faultlens telemetry: %d event(s) delivered, %d not (broker %s%s), %d dropped from a full spool,"
                        " %d refused for good", self.delivered, left, broker, bound, self.dropped, self.rejected)

    def _abandon_busy_sink(self) -> None:
        """Close, without waiting, the producer the sender thread is still waiting on: its records
        fail at once, so the thread's flush returns and the thread ends; left open, kafka-python's own
        exit hook would flush it again as the interpreter leaves and print a traceback into the
        training job's output. The thread drops it as usual (closing it twice is harmless)."""
        sink = self._sink
        if sink is None:
            return
        try:
            sink.close(0.0)
        except Exception as exc:  # noqa: BLE001 - its broker is slow or gone: a timeout is expected
            log.debug("closing the telemetry producer at the close's bound: %s", exc)

    def _at_exit(self) -> None:
        # A script that never closes its hook: what the broker can take in a few seconds, quietly.
        try:
            self.close(5.0)
        except Exception:  # noqa: BLE001 - the interpreter is leaving
            pass

    def _trim(self) -> None:
        over = len(self._queue) + self._inflight - self.capacity
        while over > 0 and self._queue:
            self._queue.popleft()  # the oldest: the newest say most about a job that is still running
            self.dropped += 1
            over -= 1
        if self.dropped and not self._warned_drop:
            self._warned_drop = True
            log.warning("faultlens telemetry: spool full (%d events, broker %s); dropping the oldest, training goes on",
                        self.capacity, self.down_reason or "slow")

    # --- the sender thread ------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                self._reap()
                with self._cond:
                    while not self._queue and not self._closing:
                        if not self._cond.wait(self.retry_s * 5 if self._abandoned else None):
                            break  # a while idle with producers to reap
                    if self._give_up or (self._closing and not self._queue):
                        return
                    if not self._queue:
                        continue
                    n = min(len(self._queue), self.batch)
                    batch = [self._queue.popleft() for _ in range(n)]
                    self._inflight = n
                ok, refused = self._deliver(batch)
                with self._cond:
                    self._inflight = 0
                    self.rejected += len(refused)
                    if refused:
                        gone = {id(e) for e in refused}
                        batch = [e for e in batch if id(e) not in gone]
                    if ok:
                        self.delivered += len(batch)
                        if self.down_since is not None:
                            log.warning("faultlens telemetry: broker back after %.0f s without it; %d held event(s)"
                                        " delivered, %d more on their way, %d dropped so far",
                                        time.monotonic() - self._last_ok, len(batch), len(self._queue), self.dropped)
                            self.down_since, self.down_reason = None, ""
                        self._last_ok = time.monotonic()
                    else:
                        self._queue.extendleft(reversed(batch))
                        self._trim()
                    self._cond.notify_all()
                if not ok:
                    self._wake.wait(self.retry_s)
        finally:
            self._drop_sink(abandon=self._give_up and self.down_since is not None)
            self._reap()

    def _deliver(self, batch: list[Envelope]) -> tuple[bool, list[Envelope]]:
        """Send ``batch``: (delivered, the records of it refused for good). Not delivered: the
        broker is taken as gone, and what was not refused goes back to the spool."""
        if self._sink is None:
            # A TCP probe first: a Kafka client started against no broker blocks for its bootstrap
            # timeout and logs every retry.
            if self.bootstrap and not answers(self.bootstrap, 0.5):
                self._went_down(f"unreachable at {self.bootstrap}")
                return False, []
            try:
                self._sink = self._connect()
            except Exception as exc:  # noqa: BLE001 - any client error: retry later
                log.debug("telemetry producer: %r", exc)
                self._went_down(f"not connecting ({type(exc).__name__})")
                return False, []
        try:
            for event in batch:
                self._sink.send_event(event)
            self._sink.flush(self.flush_s)
            return True, []
        except DeliveryError as exc:
            refused = self._refused(batch, exc)
            if exc.only_rejected:
                return True, refused  # the rest were acknowledged: nothing to send again, no outage
            log.debug("telemetry batch of %d not delivered: %r", len(batch), exc)
            self._went_down(f"lost (no acknowledgement within {self.flush_s:.0f} s)")
            self._drop_sink(abandon=True)
            return False, refused
        except Exception as exc:  # noqa: BLE001 - DeliveryError, KafkaError, a closed socket: all the same here
            log.debug("telemetry batch of %d not delivered: %r", len(batch), exc)
            self._went_down(f"lost (no acknowledgement within {self.flush_s:.0f} s)")
            self._drop_sink(abandon=True)
            return False, []

    def _refused(self, batch: list[Envelope], exc: DeliveryError) -> list[Envelope]:
        """The events of ``batch`` the client refused for good (told by their encoded value), each
        said as its kind's warning allows."""
        if not exc.rejected:
            return []
        values = Counter(r.value for r in exc.rejected)
        refused = []
        for event in batch:
            value = encode(event)
            if values[value] > 0:
                values[value] -= 1
                refused.append(event)
        self._refusals.say(exc.rejected, time.monotonic())
        return refused

    def _went_down(self, reason: str) -> None:
        with self._cond:
            if self.down_since is None and not self._give_up:  # closed: its own line says what is left
                self.down_since, self.outages = time.monotonic(), self.outages + 1
                self.down_reason = reason
                log.warning("faultlens telemetry: broker %s; spooling up to %d events meanwhile, training goes on",
                            reason, self.capacity)
            self._cond.notify_all()

    def _drop_sink(self, abandon: bool) -> None:
        sink, self._sink = self._sink, None
        if sink is None:
            return
        try:
            # Abandoned: close without waiting (kafka-python drops its atexit flush at once, which
            # would otherwise wait and print a traceback at the interpreter's exit).
            sink.close(0.0 if abandon else self.flush_s)
        except Exception as exc:  # noqa: BLE001 - closing a client whose broker is gone
            log.debug("closing the telemetry producer: %s", exc)
            if abandon:
                self._abandoned.append(sink)  # its records are still queued in it: closed later

    def _reap(self) -> None:
        """Close the abandoned producers that can close now: their records were delivered (the
        broker came back; the spool sends them again too: a record may arrive twice, and the
        diagnosis knows a record it saw by its id) or expired in their own queue."""
        left = []
        for sink in self._abandoned:
            try:
                sink.close(0.0)
            except Exception:  # noqa: BLE001 - still holding undelivered records
                left.append(sink)
        self._abandoned = left
