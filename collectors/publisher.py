"""The node agent's way out: one thread owns the Kafka producer and spools while the broker is away.

Sources call :meth:`Publisher.publish` from their own threads; it never blocks on Kafka. The
publisher thread sends in batches and waits for the broker's acknowledgement of each batch; a
batch that fails (broker down, topic gone, timeout) goes to the :class:`~collectors.spool.Spool`
with everything after it, and from then on every record goes through the spool until the spool
has been sent, in order, to a broker that answers again. Delivery is at least once: a batch that
failed half way is sent again whole, and consumers fold duplicates by event id.

A record refused for good (over the client's or the broker's size limit, an invalid topic, no
authorization: streams/producer.py's rejection_kind) is no broker lost: when every failure of a
batch is such a refusal the rest of it was acknowledged, so the refused records are dropped,
counted (``rejected``, in the heartbeat) and said in one WARNING per kind, and the spool goes on.
Spooled and sent again they would fail again, hold the spool behind them for good and report the
agent spooling while the broker answers.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

from kafka.errors import KafkaError

from faultlens.collectors.spool import Spool
from faultlens.collectors.spool_format import SpooledRecord, is_droppable
from faultlens.events.envelope import Envelope
from faultlens.events.topics import TELEMETRY_TOPICS
from faultlens.streams.admin import ensure_topics
from faultlens.streams.broker import answers
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import DeliveryError, Outgoing, Producer, RefusalVoice

log = logging.getLogger(__name__)

# Short client timeouts: the agent must notice a dead broker in seconds and spool, not block a
# minute inside kafka-python (its default max_block_ms is 60 s).
_PRODUCER_OVERRIDES = {"max_block_ms": 3000, "request_timeout_ms": 5000, "reconnect_backoff_max_ms": 2000}
_DRAIN_CHUNK = 2000
# Records waiting for the publisher thread. It normally keeps up within milliseconds; a thread
# stuck in a client call that ignores its timeout must not grow the agent's memory without end:
# past this many, droppable records (samples, beats) are refused and counted; faults still queue.
MAX_QUEUED = 200_000


@dataclass
class PublisherStats:
    published: int = 0  # accepted from sources
    delivered: int = 0  # acknowledged by the broker (spooled ones included once sent)
    spooled: int = 0  # went through the spool
    unencodable: int = 0  # a source handed an event that cannot be serialised
    lost: int = 0  # could be neither sent nor spooled (spool unwritable)
    outages: int = 0
    queue_dropped: int = 0  # droppable records refused because the queue to the publisher was full
    rejected: int = 0  # refused for good by the client or the broker (too large, invalid topic...): dropped


class Publisher:
    """``publish(event)`` from any thread; ``start()`` / ``stop()`` around the agent's life."""

    def __init__(self, settings: KafkaSettings, spool: Spool, *, retry_s: float = 1.0,
                 send_timeout_s: float = 10.0, create_topics: bool = True):
        self.settings = settings
        self.spool = spool
        self.retry_s = retry_s
        self.send_timeout_s = send_timeout_s
        self.create_topics = create_topics
        self.stats = PublisherStats()
        self._queue: queue.SimpleQueue[tuple[Outgoing, bool] | None] = queue.SimpleQueue()
        self._producer: Producer | None = None
        self._next_try = 0.0
        self._stop = threading.Event()
        self._refusals = RefusalVoice(log, "publisher", "dropped, the rest goes on")
        self._thread = threading.Thread(target=self._loop, name="publisher", daemon=True)

    # --- from sources ----------------------------------------------------------------------------
    def publish(self, event: Envelope) -> bool:
        try:
            out = Outgoing.event(event)
        except (TypeError, ValueError) as exc:
            self.stats.unencodable += 1
            log.error("cannot encode %s/%s event from %s: %s", event.source, event.kind, event.node, exc)
            return False
        droppable = is_droppable(event.source, event.kind)
        if droppable and self._queue.qsize() >= MAX_QUEUED:
            self.stats.queue_dropped += 1
            if self.stats.queue_dropped == 1 or self.stats.queue_dropped % 10_000 == 0:
                log.error("publisher is %d records behind; dropping samples (%d so far), keeping faults",
                          MAX_QUEUED, self.stats.queue_dropped)
            return False
        self.stats.published += 1
        self._queue.put((out, droppable))
        return True

    def health(self) -> dict[str, object]:
        """For the heartbeat (``health.publisher``): counters, the queue, whether a broker answers."""
        s = self.stats
        return {"connected": self._producer is not None, "queued": self._queue.qsize(), "published": s.published,
                "delivered": s.delivered, "spooled": s.spooled, "lost": s.lost, "queue_dropped": s.queue_dropped,
                "rejected": s.rejected, "outages": s.outages}

    @property
    def connected(self) -> bool:
        return self._producer is not None

    def status(self) -> str:
        """For heartbeats: "ok" or what is wrong."""
        pending = len(self.spool)
        if self._stop.is_set() and not self._thread.is_alive():
            return f"stopped ({pending} waiting in the spool)"
        if self._producer is None:
            return f"broker unreachable, spooling ({pending} waiting)"
        return "ok" if not pending else f"sending spool ({pending} waiting)"

    # --- life ----------------------------------------------------------------------------------
    def start(self) -> "Publisher":
        self._thread.start()
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """Send what can be sent within ``timeout``; the rest stays in the spool for the next run."""
        self._stop.set()
        self._queue.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("publisher did not finish within %.0fs; unsent records stay in %s", timeout, self.spool.path)

    def _loop(self) -> None:
        self._try_connect()  # so the first events go straight out, not through the spool
        while True:
            batch, stopping = self._take()
            try:
                self._handle(batch)
            except Exception:  # never let one bad batch end the agent's only way out
                log.exception("publisher: unexpected error; spooling the batch")
                self._to_spool(batch)
                self._disconnect()
            if stopping:
                self._finish()
                return

    def _take(self) -> tuple[list[tuple[Outgoing, bool]], bool]:
        batch: list[tuple[Outgoing, bool]] = []
        stopping = False
        try:
            item = self._queue.get(timeout=0.1)
            while True:
                if item is None:
                    stopping = True
                else:
                    batch.append(item)
                if len(batch) >= _DRAIN_CHUNK:
                    break
                item = self._queue.get_nowait()
        except queue.Empty:
            pass
        return batch, stopping or self._stop.is_set() and self._queue.empty()

    def _handle(self, batch: list[tuple[Outgoing, bool]]) -> None:
        if self._producer is not None and not len(self.spool):
            if batch and not self._send([o for o, _ in batch]):
                self._to_spool(batch)
            return
        # Order: while anything waits in the spool, new records queue up behind it.
        self._to_spool(batch)
        if self._producer is None:
            self._try_connect()
        if self._producer is not None:
            self._drain_one_chunk()

    def _finish(self) -> None:
        """On stop: one last drain attempt, then close; unsent records stay spooled."""
        leftovers: list[tuple[Outgoing, bool]] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                leftovers.append(item)
        self._handle(leftovers)
        deadline = time.monotonic() + self.send_timeout_s
        while self._producer is not None and len(self.spool) and time.monotonic() < deadline:
            if not self._drain_one_chunk():
                break
        if len(self.spool):
            log.warning("%d record(s) stay in the spool %s for the next run", len(self.spool), self.spool.path)
        self._disconnect(quiet=True)
        self.spool.close()

    # --- Kafka ---------------------------------------------------------------------------------
    def _send(self, records: list[Outgoing]) -> bool:
        assert self._producer is not None
        try:
            self._producer.send_all(records)
            self._producer.flush(timeout=self.send_timeout_s)
        except DeliveryError as exc:
            if not exc.only_rejected:
                return self._lost(exc)
            # Everything else was acknowledged: the refused records are dropped, the batch is done.
            self.stats.rejected += len(exc.rejected)
            self.stats.delivered += len(records) - len(exc.rejected)
            self._refusals.say(exc.rejected, time.monotonic())
            return True
        except KafkaError as exc:
            return self._lost(exc)
        self.stats.delivered += len(records)
        return True

    def _lost(self, exc: Exception) -> bool:
        """A batch not acknowledged: the broker is taken as gone (a refused record in it is sent
        again with the rest, and dropped once it is all that fails)."""
        log.warning("broker stopped answering (%s); spooling until it is back", exc)
        self._disconnect()
        return False

    def _drain_one_chunk(self) -> bool:
        chunk = self.spool.peek(_DRAIN_CHUNK)
        if not chunk:
            return False
        if not self._send([Outgoing(r.topic, r.key, r.value) for r in chunk]):
            return False
        self.spool.ack(len(chunk))
        if not len(self.spool):
            log.info("spool sent; %d record(s) went through it so far", self.stats.spooled)
        return True

    def _to_spool(self, batch: list[tuple[Outgoing, bool]]) -> None:
        for out, droppable in batch:
            try:
                self.spool.append(SpooledRecord(out.topic, out.key, out.value), droppable)
            except OSError as exc:
                # Disk full or spool unwritable while the broker is away: nothing left to hold
                # the record. Counted and logged loudly, and the publisher keeps running.
                self.stats.lost += 1
                if self.stats.lost == 1 or self.stats.lost % 1000 == 0:
                    log.error("spool %s unwritable (%s): %d record(s) lost", self.spool.path, exc, self.stats.lost)
                continue
            self.stats.spooled += 1

    def _try_connect(self) -> None:
        now = time.monotonic()
        if now < self._next_try:
            return
        self._next_try = now + self.retry_s
        if not self.settings.bootstrap or not answers(self.settings.bootstrap, 0.5):
            return
        if self.create_topics:
            # A broker that came back empty (the embedded one forgets topics) gets them again. An
            # agent without the right to create topics still sends to the ones that exist.
            try:
                ensure_topics(self.settings, TELEMETRY_TOPICS)
            except (KafkaError, OSError) as exc:
                log.debug("could not create the telemetry topics: %s", exc)
        try:
            # Its failed sends are spooled or said here (an outage, a refusal): not each at ERROR.
            self._producer = Producer(self.settings, failure_level=logging.DEBUG, **_PRODUCER_OVERRIDES)
        except (KafkaError, OSError, ValueError) as exc:
            log.debug("broker not ready yet: %s", exc)
            self._producer = None
            return
        log.info("connected to the broker at %s (%d record(s) spooled)", self.settings.bootstrap, len(self.spool))

    def _disconnect(self, quiet: bool = False) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        if not quiet:
            self.stats.outages += 1
        try:
            # Records still inside kafka-python are in the spool already: don't wait for them.
            producer.close(timeout=0 if not quiet else 5)
        except KafkaError:
            pass
        self._next_try = time.monotonic() + self.retry_s
