"""The consumer-group runner: poll a batch, decode, hand it to a pure handler, produce the
handler's outputs, and only then commit (at-least-once).

With ``event_time=True`` (the diagnosis consumer) records are handed on in event-time order
across every assigned partition and topic, not in arrival order: a :class:`WatermarkMerge` holds
each record until no partition can still deliver an earlier one, pauses partitions that run
ahead, and only offsets already handed on are committed. An :class:`EventClock` places each record
in time first, so a sender stamped in the future or a node with a skewed clock cannot drag a job
forward (streams/event_time.py). The runner's side of that order (the merge against a live
consumer, broadcast topics, commits and progress announcements) is streams/runner_event_time.py.
Messages of ``deferred_topics`` are read only as far as placing them needs until the merge lets
them go (streams/intake.py). A message over ``max_message_bytes`` is a dead letter with its
size, never decoded.

A message that does not decode, or that makes the handler raise, goes to ``dead-letter`` with
the reason; the messages around it are processed as usual. A handler that raises on a whole
batch is retried one record at a time, so one poisoned event never costs its neighbours.
Duplicates after a crash are possible by design; downstream dedups by event id.
"""

from __future__ import annotations

import collections
import inspect
import logging
import signal
import threading
import time
from typing import Callable, Iterable, Mapping

from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import TopicPartition

from faultlens.streams.config import KafkaSettings
from faultlens.streams.event_time import DEFAULT_MAX_SKEW_S, EventClock, WatermarkMerge, WriterWord
from faultlens.streams.events import decode
from faultlens.streams.gc_policy import tune_for_streaming
from faultlens.streams.intake import Intake
from faultlens.streams.kafka_client import Consumer, open_consumer
from faultlens.streams.producer import DeliveryError, Outgoing, Producer
from faultlens.streams.idle_stop import IdleStop
from faultlens.streams.runner_event_time import EventTimeMode
from faultlens.streams.runner_rebalance import RebalanceListener, RebalanceMode
# What handlers import from here (they were defined here first).
from faultlens.streams.runner_types import (  # noqa: F401
    DEAD_LETTER_TOPIC, DEFAULT_MAX_MESSAGE_BYTES, Decoder, FatalHandlerError, Handler, Record, RunnerStats,
    broker_time, dead_letter, record_bytes,
)

log = logging.getLogger(__name__)

# How long a rebalance holds off a bounded run's idle stop (see _rebalancing): joins on a healthy
# broker take seconds; one not done by then is stuck (seen with kafka-python 3 on Tansu when the
# only other member left mid-join), and the member stops, committing where its handing on stopped.
REBALANCE_IDLE_GRACE_S = 30.0
# How often a member that keeps reading waits for its outputs to be acknowledged and commits.
# Waiting after every batch kept a member idle for the broker's round trip each time (measured on
# the node stage: an eighth to a sixth of its wall time); in between, outputs are only sent. A
# crash re-reads at most this much more input (at-least-once either way: nothing is committed
# before the outputs of everything before it are acknowledged). Kafka Streams commits
# at-least-once work every 30 s by default; a caught-up member commits at once.
COMMIT_INTERVAL_S = 0.5


class GroupRunner(RebalanceMode, EventTimeMode):
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
        event_time: bool = False,
        max_idle_s: float = 2.0,
        max_skew_s: float = DEFAULT_MAX_SKEW_S,
        judge_clocks: bool = True,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        broadcast_topics: Iterable[str] = (),
        watermark_of: Callable[[Record], WriterWord | None] | None = None,
        # (progress, (reads, of) or None, behind, idle) → the announcements to send
        on_progress: Callable[[float, tuple[tuple[str, ...], int] | None, bool, bool],
                              Iterable[Outgoing]] | None = None,
        rebuild_s: float = 0.0,
        commit_interval_s: float = COMMIT_INTERVAL_S,
        deferred_topics: Iterable[str] = (),
    ):
        self.settings = settings
        self.group = group
        self.topics = list(topics)
        self._handle = handler.handle if hasattr(handler, "handle") else handler
        self._tick = getattr(handler, "tick", None)
        # A clock that can leave the jobs with records still held alone ticks whenever the input is
        # live (streams/runner_event_time.py: _tick_gate); another only when nothing is held at all.
        self._tick_takes_busy = self._tick is not None and "busy" in inspect.signature(self._tick).parameters
        # A clock that can be told which input partitions' upstream writers all fell silent keeps
        # their jobs' time where the writers stopped (issue 32).
        self._tick_takes_upstream = self._tick is not None and "upstream" in inspect.signature(self._tick).parameters
        self._on_assigned = getattr(handler, "on_assigned", None)
        # A handler whose state is kept per input partition hears which partitions left this
        # member or came to it from another (state rebuilt from retained input), not those a
        # rebalance gave straight back.
        self._on_moved = getattr(handler, "partitions_moved", None)
        self._revoked_last: set[TopicPartition] = set()
        self._own_producer = producer is None
        self.producer = producer or Producer(settings)
        self.poll_timeout_ms = poll_timeout_ms
        self.max_records = max_records
        self.tick_interval_s = tick_interval_s
        self.stats = RunnerStats()
        self.ready = threading.Event()
        self._stop = threading.Event()
        self.consumer: Consumer | None = None
        self.merge: WatermarkMerge[Record] | None = WatermarkMerge(max_idle_s) if event_time else None
        self.intake = Intake(decoders, max_message_bytes, group, self.stats,
                             EventClock(max_skew_s, judge_peers=judge_clocks) if event_time else None, self.merge, watermark_of,
                             deferred_topics)
        self._paused: set[TopicPartition] = set()
        # Set by an assignment: the client's pause flags may disagree with _paused (see
        # _resync_pauses), mended by the loop before it reads on.
        self._pauses_unsynced = False
        self._assignments = 0  # how many assignments this member was given (a bounded run's idle count restarts)
        self._assigned_at: dict[TopicPartition, float] = {}
        self._unfetched_warned: set[TopicPartition] = set()
        # Rebalance callbacks that came on another thread than the loop's (kafka-python 3's IO
        # thread), applied by the loop: see _rebalance_event.
        self._loop_thread: int | None = None
        self._rebalance_queue: collections.deque = collections.deque()
        # End offsets of partitions assigned and never fetched from, per consumer (absent: not
        # asked since the last assignment): streams/runner_event_time.py, _partition_caught_up.
        self._unfetched_end: dict[int, dict[TopicPartition, int]] = {}
        # Topics every member reads in full, outside the group (the compacted `jobs`): not
        # committed, read from the start by each member (event_time mode only).
        self.broadcast_topics = [t for t in broadcast_topics if t not in self.topics]
        self._broadcast: Consumer | None = None
        self._broadcast_wait_after = 0.0  # monotonic time before which no loop waits for it
        self.on_progress = on_progress  # announce this member's progress downstream (node stage)
        self._announced: float | None = None
        self._announced_idle: bool | None = None  # None: nothing said since the last hello
        self._announced_wall = 0.0
        self._input_partitions: tuple[int | None, float] = (None, 0.0)  # (how many, when counted)
        # After a rebalance: say "I write here too, from nothing yet" at once, then keep quiet a
        # moment, so a member that kept its partitions cannot announce progress past the records
        # a new owner is about to write (the stage downstream holds at the last word it heard).
        self._hello = False
        self._settle_until = 0.0
        # State a handler keeps (windows, pending hang rounds, dedup) lives in memory: a partition
        # that comes to this member (a rebalance, a restart) is read again from `rebuild_s` of
        # broker time before its committed offset, so that state is rebuilt from retained input.
        # What comes out again carries the ids it had (they derive from the input): downstream
        # stores and remediation drop the copies.
        self.rebuild_s = rebuild_s
        self._to_rebuild: set[TopicPartition] = set()
        # A partition a rebalance takes away and gives straight back (an eager rebalance revokes
        # everything) is not read again: the handler's state already holds it, and reading it
        # twice would count its events twice (a node rule's "2 NIC alerts in 5 min" fired again
        # on the first alert re-read). It resumes where its handing on stopped.
        self._next_offset: dict[TopicPartition, int] = {}  # past the last offset read
        self._resume_at: dict[TopicPartition, int] = {}  # revoked: where handing on stopped
        self._to_resume: dict[TopicPartition, int] = {}  # kept through a rebalance: seek there
        # Since when a revocation awaits its next assignment (None: not rebalancing). No idle stop
        # then, up to REBALANCE_IDLE_GRACE_S (kafka-python keeps revoked members in the loop
        # while the join goes on; a member stopping there left the records it had held to a new
        # owner that, in a group emptying at the end of a run, never came).
        self._rebalancing: float | None = None
        self.commit_interval_s = commit_interval_s
        self._settled_at = 0.0  # monotonic time of the last flush and commit
        self._unsettled = False  # records handed on whose outputs were sent, not yet acknowledged

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
                out.append(dead_letter(r.topic, r.partition, r.offset, r.key, record_bytes(r),
                                       f"handler failed: {type(exc).__name__}: {exc}", self.group))
        return out

    # --- the loop ---------------------------------------------------------------------------
    def _consumer(self) -> Consumer:
        consumer = open_consumer(self.settings, self.group, max_records=self.max_records)
        consumer.subscribe(self.topics, listener=RebalanceListener(self))
        if self.broadcast_topics and self.merge is not None:
            self._broadcast = open_consumer(self.settings, None, max_records=self.max_records)
            parts = [TopicPartition(t, p) for t in self.broadcast_topics
                     for p in sorted(self._broadcast.partitions_for_topic(t) or ())]
            self._broadcast.assign(parts)
            self._broadcast.seek_to_beginning(*parts)
            self.merge.assign(parts, time.time(), follower=True)
            now = time.monotonic()
            self._assigned_at.update({tp: now for tp in parts})
        return consumer

    # --- the run ----------------------------------------------------------------------------
    def run(self, *, max_records_total: int | None = None, idle_stop_s: float | None = None,
            handle_signals: bool = True) -> RunnerStats:
        """Process until stopped; ``max_records_total``/``idle_stop_s`` bound a run (tests, replays)."""
        previous_signals = self._install_signals() if handle_signals else {}
        tune_for_streaming()
        self._loop_thread = threading.get_ident()
        self.consumer = consumer = self._consumer()
        self._settled_at = time.monotonic()
        idle = IdleStop(idle_stop_s) if idle_stop_s is not None else None
        if idle is not None:
            idle.start(self._settled_at)
        assignments = self._assignments
        last_tick = last_lag = 0.0
        try:
            while not self._stop.is_set():
                t0 = time.monotonic()
                polled = consumer.poll(timeout_ms=self.poll_timeout_ms)
                if self._apply_rebalances():
                    # what this poll brought of partitions no longer ours is their new owner's
                    owned = consumer.assignment()
                    polled = {tp: m for tp, m in polled.items() if tp in owned}
                if self._pauses_unsynced:
                    self._resync_pauses(consumer)
                if self._to_rebuild or self._to_resume:
                    # Partitions just assigned are read from where they must start: what this poll
                    # brought of them comes again after the seek.
                    polled = {tp: m for tp, m in polled.items()
                              if tp not in self._to_rebuild and tp not in self._to_resume}
                    self._rebuild(consumer)
                if self.merge is not None:
                    for tp, messages in polled.items():
                        if messages:
                            self._next_offset[tp] = messages[-1].offset + 1
                out: list[Outgoing] = []
                good: list[Record] = []
                if polled:
                    good, dead = self.intake.split(polled)
                    out.extend(dead)
                    self.stats.dead_letters += len(dead)
                if self.merge is not None:
                    good = self._released(self._ordered(consumer, good), out)
                self._handle_into(good, out)
                if self._tick and time.monotonic() - last_tick >= self.tick_interval_s:
                    busy = self._tick_gate(consumer)
                    if busy is not None:
                        last_tick = time.monotonic()
                        out.extend(self._tick_handler(consumer, busy))
                out.extend(self._announce())
                if polled or out:
                    if not self._deliver_and_commit(consumer, polled, out):
                        continue
                    self.stats.records_in += sum(len(v) for v in polled.values())
                    self.stats.batches += 1 if polled else 0
                elif self._unsettled:
                    self._deliver_and_commit(consumer, {}, [])  # caught up: commit now
                self.stats.last_loop_s = time.monotonic() - t0
                if time.monotonic() - last_lag >= 5.0:
                    last_lag = time.monotonic()
                    self.stats.lag = self._lag(consumer)
                if max_records_total is not None and self.stats.records_in >= max_records_total:
                    break
                if idle is None:
                    continue
                now = time.monotonic()
                if (not self.ready.is_set() or assignments != self._assignments
                        or (self._rebalancing is not None and now - self._rebalancing < REBALANCE_IDLE_GRACE_S)):
                    assignments = self._assignments
                    idle.start(now)  # idle time counts from joining the group, and from each assignment
                else:
                    idle.polled(now, bool(polled))
                    if idle.due(now, lambda: self._drained(consumer)):
                        break
            self._finish(consumer)
        finally:
            self._close()
            for sig, handler in previous_signals.items():
                signal.signal(sig, handler)
        return self.stats

    def _tick_handler(self, consumer: Consumer, busy: frozenset[str]) -> list[Outgoing]:
        now = time.time()
        if not self._tick_takes_busy:
            return list(self._tick(now))
        if not self._tick_takes_upstream or self.merge is None:
            return list(self._tick(now, busy=busy))
        upstream = self.merge.stopped_upstream(now, self._caught_up(consumer))
        return list(self._tick(now, busy=busy, upstream=upstream))

    def _released(self, records: list[Record], out: list[Outgoing]) -> list[Record]:
        """What the merge let go of, each deferred record read whole (streams.intake)."""
        before = len(out)
        records = self.intake.complete(records, out)
        self.stats.dead_letters += len(out) - before
        return records

    def _handle_into(self, records: list[Record], out: list[Outgoing]) -> None:
        if not records:
            return
        produced = self._run_handler(records)
        self.stats.dead_letters += sum(1 for o in produced if o.topic == DEAD_LETTER_TOPIC)
        out.extend(produced)

    def _finish(self, consumer: Consumer) -> None:
        """End of a run: what the merge still holds is handed on (nothing more is coming to this
        member), its outputs delivered and the offsets committed."""
        self._apply_rebalances()
        if self.merge is None:
            if self._unsettled:
                self._deliver_and_commit(consumer, {}, [])
            return
        out: list[Outgoing] = []
        if self.merge.held:
            self._handle_into(self._released(self._ordered(consumer, [], drain=True), out), out)
        self._announced_wall = self._settle_until = 0.0  # the last word on progress goes out now
        out.extend(self._announce())
        if out or self._unsettled:
            self._deliver_and_commit(consumer, {}, out)

    def _deliver_and_commit(self, consumer: Consumer, polled, out: list[Outgoing]) -> bool:
        """Send ``out``; when a commit is due (see COMMIT_INTERVAL_S; at once for a call with
        nothing ``polled``: caught up, or the end), wait until everything sent is acknowledged and
        commit what was handed on. False when outputs were not acknowledged: every partition is
        then read again from its last commit."""
        try:
            self.stats.outputs += self.producer.send_all(out)
            self._unsettled = self._unsettled or bool(polled)
            if polled and time.monotonic() - self._settled_at < self.commit_interval_s:
                return True
            self.producer.flush()
        except (DeliveryError, KafkaError) as exc:
            # Outputs not acknowledged: commit nothing; what was read since the last commit comes
            # again (the handler recognises what it already saw by event id).
            log.error("could not deliver outputs (%s); re-reading from the last commit", exc)
            self.stats.redeliveries += 1
            self._unsettled = False
            assigned = list(consumer.assignment())
            if self.merge is not None:
                # Held records go too.
                self.merge.revoke(assigned)
                self.merge.assign(assigned, time.time())
            for tp in assigned:
                committed = consumer.committed(tp)
                consumer.seek(tp, committed if committed is not None else 0)
            time.sleep(1.0)
            return False
        self._settled_at = time.monotonic()
        unsettled, self._unsettled = self._unsettled, False
        if self.merge is not None:
            self._commit_handed_on(consumer, consumer.assignment())
            return True
        if unsettled:
            try:
                consumer.commit()
                self.stats.commits += 1
            except (CommitFailedError, KafkaError) as exc:
                # A rebalance took the partitions away: the new owner re-reads from the last commit.
                log.warning("commit failed (%s); those records will be delivered again", exc)
        return True

    def _drained(self, consumer: Consumer) -> bool:
        """Whether every partition of this member was read to its end, as far as the client can
        tell (event time: the broker asked about partitions never fetched from). Mid-rebalance
        the partitions the client still lists are no longer this member's to read."""
        if self._rebalancing is not None:
            return True
        if self.merge is not None:
            return all(self._caught_up(consumer).values())
        return self._lag(consumer) == 0

    @staticmethod
    def _lag(consumer: Consumer) -> int:
        # highwater() is what the last fetch reported: no extra request on the hot path.
        lag = 0
        for tp in consumer.assignment():
            high = consumer.highwater(tp)
            if high is not None:
                lag += max(0, high - consumer.position(tp))
        return lag

    def _close(self) -> None:
        try:
            if self._broadcast is not None:
                self._broadcast.close(autocommit=False)
            if self.consumer is not None:
                self.consumer.close(autocommit=False)
        finally:
            if self._own_producer:
                self.producer.close()
