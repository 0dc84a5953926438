"""The consumer-group runner: poll a batch, decode, hand it to a pure handler, produce the
handler's outputs, and only then commit (at-least-once).

A message that does not decode, or that makes the handler raise, goes to ``dead-letter`` with
the reason; the messages around it are processed as usual. A handler that raises on a whole
batch is retried one record at a time, so one poisoned event never costs its neighbours.
Duplicates after a crash are possible by design; downstream dedups by event id.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol

import orjson
from kafka import KafkaConsumer
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import CommitFailedError, KafkaError

from streams import topics
from streams.config import KafkaSettings
from streams.events import InvalidEvent, decode
from streams.producer import DeliveryError, Outgoing, Producer

log = logging.getLogger(__name__)

DEAD_LETTER_TOPIC = topics.DEAD_LETTER
_MAX_DEAD_VALUE = 64 * 1024

Decoder = Callable[[bytes | None], Any]


@dataclass(frozen=True, slots=True)
class Record:
    """One consumed message after decoding; ``value`` is what the topic's decoder returned."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: Any
    timestamp_ms: int


class FatalHandlerError(RuntimeError):
    """Raised by a handler when it cannot work at all (its store is gone, say): the runner stops
    without committing, so the batch is read again after a restart instead of dead-lettered."""


class Handler(Protocol):
    def handle(self, records: list[Record]) -> Iterable[Outgoing]: ...


@dataclass
class RunnerStats:
    records_in: int = 0
    dead_letters: int = 0
    outputs: int = 0
    batches: int = 0
    commits: int = 0
    redeliveries: int = 0
    lag: int = 0  # messages behind the partitions' high-water marks, refreshed every few seconds
    last_loop_s: float = 0.0
    started_at: float = field(default_factory=time.time)


def dead_letter(topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                reason: str, group: str | None) -> Outgoing:
    """The dead-letter record for a message nobody could read: the reason, where it came from, its bytes."""
    text = None if value is None else value[:_MAX_DEAD_VALUE].decode("utf-8", errors="replace")
    body = {
        "reason": reason,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "key": None if key is None else key.decode("utf-8", errors="replace"),
        "group": group,
        "ts": time.time(),
        "value": text,
        "truncated": value is not None and len(value) > _MAX_DEAD_VALUE,
    }
    return Outgoing(DEAD_LETTER_TOPIC, key, orjson.dumps(body))


class _Assigned(ConsumerRebalanceListener):
    def __init__(self, ready: threading.Event):
        self.ready = ready

    def on_partitions_revoked(self, revoked) -> None:
        pass

    def on_partitions_assigned(self, assigned) -> None:
        self.ready.set()


class GroupRunner:
    """Runs one consumer-group member until :meth:`stop`, SIGTERM/SIGINT, or a run limit."""

    def __init__(
        self,
        settings: KafkaSettings,
        group: str,
        topics: Iterable[str],
        handler: Handler | Callable[[list[Record]], Iterable[Outgoing]],
        decoders: Mapping[str, Decoder] | Decoder = decode,
        *,
        producer: Producer | None = None,
        poll_timeout_ms: int = 200,
        max_records: int = 2000,
        tick_interval_s: float = 1.0,
    ):
        self.settings = settings
        self.group = group
        self.topics = list(topics)
        self._handle = handler.handle if hasattr(handler, "handle") else handler
        self._tick = getattr(handler, "tick", None)
        self._decoders = decoders
        self._own_producer = producer is None
        self.producer = producer or Producer(settings)
        self.poll_timeout_ms = poll_timeout_ms
        self.max_records = max_records
        self.tick_interval_s = tick_interval_s
        self.stats = RunnerStats()
        self.ready = threading.Event()
        self._stop = threading.Event()
        self.consumer: KafkaConsumer | None = None

    # --- control ----------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    def _install_signals(self) -> dict:
        """Stop on SIGTERM/SIGINT; returns the handlers they replace, restored after the run."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: self.stop())
        return previous

    # --- decoding ---------------------------------------------------------------------------
    def _decoder(self, topic: str) -> Decoder:
        if callable(self._decoders):
            return self._decoders
        return self._decoders.get(topic, decode)

    def _split(self, polled) -> tuple[list[Record], list[Outgoing]]:
        good: list[Record] = []
        dead: list[Outgoing] = []
        for tp, messages in polled.items():
            dec = self._decoder(tp.topic)
            for m in messages:
                try:
                    value = dec(m.value)
                except (InvalidEvent, ValueError, TypeError, KeyError) as exc:
                    dead.append(dead_letter(tp.topic, tp.partition, m.offset, m.key, m.value, f"invalid: {exc}", self.group))
                    continue
                good.append(Record(tp.topic, tp.partition, m.offset, m.key, value, m.timestamp))
        return good, dead

    def _run_handler(self, records: list[Record]) -> list[Outgoing]:
        if not records:
            return []
        try:
            return list(self._handle(records))
        except FatalHandlerError:
            raise
        except Exception:  # noqa: BLE001 - isolate the record that breaks the handler
            log.exception("handler failed on a batch of %d; retrying one by one", len(records))
        out: list[Outgoing] = []
        for r in records:
            try:
                out.extend(self._handle([r]))
            except FatalHandlerError:
                raise
            except Exception as exc:  # noqa: BLE001
                raw = _reencode(r.value)
                out.append(dead_letter(r.topic, r.partition, r.offset, r.key, raw,
                                       f"handler failed: {type(exc).__name__}: {exc}", self.group))
        return out

    # --- the loop ---------------------------------------------------------------------------
    def _consumer(self) -> KafkaConsumer:
        consumer = KafkaConsumer(**{**self.settings.consumer_kwargs(self.group), "max_poll_records": self.max_records})
        consumer.subscribe(self.topics, listener=_Assigned(self.ready))
        return consumer

    def run(self, *, max_records_total: int | None = None, idle_stop_s: float | None = None,
            handle_signals: bool = True) -> RunnerStats:
        """Process until stopped; ``max_records_total``/``idle_stop_s`` bound a run (tests, replays)."""
        previous_signals = self._install_signals() if handle_signals else {}
        self.consumer = consumer = self._consumer()
        last_data = time.monotonic()
        last_tick = last_lag = 0.0
        try:
            while not self._stop.is_set():
                t0 = time.monotonic()
                polled = consumer.poll(timeout_ms=self.poll_timeout_ms)
                out: list[Outgoing] = []
                good: list[Record] = []
                if polled:
                    good, dead = self._split(polled)
                    out.extend(dead)
                    out.extend(self._run_handler(good))
                    self.stats.dead_letters += len(dead) + sum(1 for o in out[len(dead):] if o.topic == DEAD_LETTER_TOPIC)
                    last_data = time.monotonic()
                if self._tick and time.monotonic() - last_tick >= self.tick_interval_s:
                    last_tick = time.monotonic()
                    out.extend(self._tick(time.time()))
                if polled or out:
                    if not self._deliver_and_commit(consumer, polled, out):
                        continue
                    self.stats.records_in += sum(len(v) for v in polled.values())
                    self.stats.batches += 1 if polled else 0
                self.stats.last_loop_s = time.monotonic() - t0
                if time.monotonic() - last_lag >= 5.0:
                    last_lag = time.monotonic()
                    self.stats.lag = self._lag(consumer)
                if max_records_total is not None and self.stats.records_in >= max_records_total:
                    break
                if not self.ready.is_set():
                    last_data = time.monotonic()  # idle time counts from joining the group
                elif idle_stop_s is not None and time.monotonic() - last_data >= idle_stop_s:
                    break
        finally:
            self._close()
            for sig, handler in previous_signals.items():
                signal.signal(sig, handler)
        return self.stats

    def _deliver_and_commit(self, consumer: KafkaConsumer, polled, out: list[Outgoing]) -> bool:
        try:
            self.stats.outputs += self.producer.send_all(out)
            self.producer.flush()
        except (DeliveryError, KafkaError) as exc:
            # Outputs not acknowledged: do not commit, rewind to the batch start, try again.
            log.error("could not deliver %d outputs (%s); re-reading the batch", len(out), exc)
            for tp, messages in polled.items():
                consumer.seek(tp, messages[0].offset)
            self.stats.redeliveries += 1
            time.sleep(1.0)
            return False
        if polled:
            try:
                consumer.commit()
                self.stats.commits += 1
            except (CommitFailedError, KafkaError) as exc:
                # A rebalance took the partitions away: the new owner re-reads from the last commit.
                log.warning("commit failed (%s); those records will be delivered again", exc)
        return True

    @staticmethod
    def _lag(consumer: KafkaConsumer) -> int:
        # highwater() is what the last fetch reported: no extra request on the hot path.
        lag = 0
        for tp in consumer.assignment():
            high = consumer.highwater(tp)
            if high is not None:
                lag += max(0, high - consumer.position(tp))
        return lag

    def _close(self) -> None:
        try:
            if self.consumer is not None:
                self.consumer.close(autocommit=False)
        finally:
            if self._own_producer:
                self.producer.close()


def _reencode(value: Any) -> bytes | None:
    """Bytes for a dead letter of an already-decoded value."""
    if value is None:
        return None
    to_dict = getattr(value, "to_dict", None)
    try:
        return orjson.dumps(to_dict() if to_dict else value, default=str)
    except TypeError:
        return repr(value).encode()

