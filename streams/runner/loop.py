"""The consumer-group runner: poll a batch, decode, hand it to a pure handler, produce the
handler's outputs, and only then commit (at-least-once).

The runner is the loop and the Kafka edge; what it decides with is in parts it owns, each with
its own state (docs/streaming.md, "The runner's parts"):

- :class:`~streams.runner.options.RunnerOptions`: every tunable, one frozen value;
- :class:`~streams.runner.handler.HandlerParts`: what the handler takes, by the Protocols it meets;
- :class:`~streams.intake.Intake`: decoding, dead letters of what cannot be read, event-time placing;
- :class:`~streams.runner.event_time.EventTimeOrder` (``event_time=True``, the diagnosis consumer):
  records handed on in event-time order across every assigned partition and topic, not in arrival
  order; a :class:`WatermarkMerge` holds each record until no partition can still deliver an
  earlier one, pauses partitions that run ahead, and only offsets already handed on are committed;
- :class:`~streams.runner.rebalance.RebalanceBook`: where each partition resumes after a rebalance;
- :class:`~streams.runner.progress.ProgressAnnouncer`: this member's word downstream (node stage);
- :class:`~streams.runner.commit.CommitSchedule`: when outputs are awaited and offsets committed.
- :class:`~streams.runner.delivery.Delivery` (the runner's base): outputs sent, awaited and offsets
  committed when the schedule says so.
- :class:`~streams.runner.join.JoinRecovery` (the runner's other base): a bounded run's stuck join left.

A message that does not decode, or that makes the handler raise, goes to ``dead-letter`` with
the reason; the messages around it are processed as usual. A handler that raises on a whole
batch is retried one record at a time, so one poisoned event never costs its neighbours.
Duplicates after a crash are possible by design; downstream dedups by event id.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
import time
from typing import Any, Callable, Collection, Mapping

from kafka.structs import TopicPartition

from faultlens.events.envelope import decode
from faultlens.events.event_clock import EventClock
from faultlens.events.event_time import UpstreamStop, WatermarkMerge
from faultlens.streams.config import KafkaSettings
from faultlens.streams.gc_policy import tune_for_streaming
from faultlens.streams.idle_stop import IdleStop, JoinWait
from faultlens.streams.intake import Intake
from faultlens.streams.kafka_client import Consumer, open_consumer
from faultlens.streams.producer import Outgoing, Producer
from faultlens.streams.runner.broker_watch import BrokerWatch
from faultlens.streams.runner.commit import CommitSchedule
from faultlens.streams.runner.delivery import Delivery
from faultlens.streams.runner.event_time import EventTimeOrder
from faultlens.streams.runner.handler import HandleFn, HandlerParts
from faultlens.streams.runner.join import JoinRecovery
from faultlens.streams.runner.options import COMMIT_INTERVAL_S, ProgressCallback, RunnerOptions  # noqa: F401
from faultlens.streams.runner.progress import ProgressAnnouncer
from faultlens.streams.runner.rebalance import RebalanceBook, RebalanceListener, RebalanceQueue

# What handlers import from here (they were defined here first).
from faultlens.streams.runner.types import (  # noqa: F401
    DEAD_LETTER_TOPIC,
    DEFAULT_MAX_MESSAGE_BYTES,
    Decoder,
    FatalHandlerError,
    Handler,
    Record,
    RunnerStats,
    broker_time,
    dead_letter,
    record_bytes,
)

log = logging.getLogger(__name__)

# How long a bounded run waits in a group's join (see RebalanceBook.rebalancing), counted in polls
# (streams.idle_stop.JoinWait), before it takes the join for stuck: joins on a healthy broker take
# seconds; one not done by then is stuck (seen with kafka-python 3 on Tansu when the only other
# member left mid-join, or when a member stopped past its session came back kicked). A member
# without an assignment never idle-stops while its group's committed offsets are behind the end of
# its input: it rejoins with a fresh member, up to MAX_REJOINS times, and finishes its input
# (session 25: a kicked member gave up here with 5,836 records of 18 partitions unread).
REBALANCE_IDLE_GRACE_S = 30.0
MAX_REJOINS = 3
# How often a bounded run refreshes its lag (highwater() is what the last fetch reported).
LAG_EVERY_S = 5.0


class GroupRunner(Delivery, JoinRecovery):
    """Runs one consumer-group member until :meth:`stop`, SIGTERM/SIGINT, or a run limit.

    ``options`` (:class:`RunnerOptions`), or its fields as keyword arguments (``event_time=True``):
    a name that is no option is a TypeError."""

    def __init__(self, settings: KafkaSettings, group: str, topics: Collection[str],
                 handler: Handler | HandleFn, decoders: Mapping[str, Decoder] | Decoder = decode, *,
                 producer: Producer | None = None, options: RunnerOptions | None = None, **overrides: Any):
        self.options = o = RunnerOptions.of(options, **overrides)
        self.settings = settings
        self.group = group
        self.topics = list(topics)
        self.handler = HandlerParts.of(handler)
        self._own_producer = producer is None
        self.producer = producer or Producer(settings)
        self.stats = RunnerStats()
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._stop_drained = threading.Event()
        # A bounded run's idle stop, asked whether siblings are through too (diagnose --workers: a
        # member that left first had its partitions taken over and read again by one still reading).
        self.idle_together: Callable[[bool], bool] | None = None
        self.consumer: Consumer | None = None
        merge: WatermarkMerge[Record | None] | None = WatermarkMerge(o.max_idle_s) if o.event_time else None
        clock = EventClock(o.max_skew_s, judge_peers=o.judge_clocks) if o.event_time else None
        self.intake = Intake(decoders, o.max_message_bytes, group, self.stats, clock, merge, o.watermark_of,
                             o.deferred_topics)
        self.order = None if merge is None else EventTimeOrder(
            merge, self.intake, self.stats, [t for t in o.broadcast_topics if t not in self.topics])
        self.rebalance = RebalanceBook(o.rebuild_s)
        self.rebalances = RebalanceQueue()
        self.progress = ProgressAnnouncer(o.on_progress, self.topics)
        self.commits = CommitSchedule(o.commit_interval_s)
        self.broker_watch = BrokerWatch(settings.bootstrap if settings is not None else None)  # an unreachable broker said in our words

    @property
    def merge(self) -> WatermarkMerge[Record | None] | None:
        """The event-time merge (None in arrival order)."""
        return self.order.merge if self.order is not None else None

    @property
    def on_progress(self) -> ProgressCallback | None:
        return self.progress.on_progress

    @on_progress.setter
    def on_progress(self, callback: ProgressCallback | None) -> None:
        # The node stage knows what to announce only once its producer knows the partitions of
        # `summaries`: it is set after the runner is built (diagnosis/edge/consumer.py).
        self.progress.on_progress = callback

    # --- control ----------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    def stop_when_drained(self) -> None:
        """Stop once every partition of this member is read to its end, as an idle stop does, but
        without waiting for the idle time: what comes next has no writer left (the launch of
        ``diagnose --workers``, whose node-stage children all stopped)."""
        self._stop_drained.set()

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
        handle = self.handler.handle
        try:
            return list(handle(records))
        except FatalHandlerError:
            raise
        except Exception:  # noqa: BLE001 - isolate the record that breaks the handler
            log.exception("handler failed on a batch of %d; retrying one by one", len(records))
        out: list[Outgoing] = []
        for r in records:
            try:
                out.extend(handle([r]))
            except FatalHandlerError:
                raise
            except Exception as exc:  # noqa: BLE001
                out.append(dead_letter(r.topic, r.partition, r.offset, r.key, record_bytes(r),
                                       f"handler failed: {type(exc).__name__}: {exc}", self.group))
        return out

    # --- rebalances: the book, then every part it concerns ----------------------------------
    def _assigned(self, assigned: Collection[TopicPartition]) -> None:
        handler = self.handler
        if handler.on_assigned is not None:
            handler.on_assigned(assigned)  # bookkeeping only: this runs inside the client's rebalance callback
        moved = self.rebalance.assigned(assigned)
        if handler.on_moved is not None and moved:
            handler.on_moved(moved)
        self.progress.assigned(time.monotonic())
        if self.order is not None:
            self.order.assigned(assigned)
        self.ready.set()

    def _revoked(self, revoked: Collection[TopicPartition]) -> None:
        self.progress.revoked(time.monotonic())
        order = self.order
        self.rebalance.revoked(revoked, time.monotonic(), order.merge.lowest_held_offset if order else None)
        if order is not None and revoked:
            order.revoked(revoked)

    # --- the loop ---------------------------------------------------------------------------
    def _consumer(self) -> Consumer:
        consumer = self._group_consumer()
        if self.order is not None:
            self.order.open_broadcast(self.settings, self.options.max_records)
        return consumer

    def _group_consumer(self) -> Consumer:
        """A fresh member of the group, subscribed (it joins at its first polls)."""
        consumer = open_consumer(self.settings, self.group, max_records=self.options.max_records)
        consumer.subscribe(self.topics, listener=RebalanceListener(self))
        return consumer

    def _rejoin(self, consumer: Consumer) -> Consumer:
        """Leave a join that does not complete and join again as a fresh member: what was handed on
        is committed where the group still takes it, the old member closed, a new one subscribed.
        The book still holds where each partition revoked from this member resumes."""
        if self.commits.unsettled:
            self._deliver_and_commit(consumer, {}, [])
        try:
            consumer.close(autocommit=False)
        except Exception as exc:  # noqa: BLE001 - a member stuck in a join may not close cleanly
            log.warning("closing the member stuck in its join failed (%s); joining again anyway", exc)
        self.rebalances.apply(self)
        self.consumer = consumer = self._group_consumer()
        return consumer

    def run(self, *, max_records_total: int | None = None, idle_stop_s: float | None = None,
            handle_signals: bool = True) -> RunnerStats:
        """Process until stopped; ``max_records_total``/``idle_stop_s`` bound a run (tests, replays)."""
        previous_signals = self._install_signals() if handle_signals else {}
        tune_for_streaming()
        self.rebalances.loop_thread = threading.get_ident()
        self.consumer = consumer = self._consumer()
        self.commits.start(time.monotonic())
        idle = IdleStop(idle_stop_s, poll_s=self.options.poll_timeout_ms / 1000) if idle_stop_s is not None else None
        if idle is not None:
            idle.start(self.commits.settled_at)
        join = JoinWait(REBALANCE_IDLE_GRACE_S, poll_s=self.options.poll_timeout_ms / 1000)
        self.rejoins = 0
        order, book, stats = self.order, self.rebalance, self.stats
        poll_timeout_ms, tick_interval_s = self.options.poll_timeout_ms, self.options.tick_interval_s
        ticks = self.handler.ticks
        self._idle_assignments = book.assignments
        last_tick = last_lag = 0.0
        ended = False  # stopped because the input ended (idle or drained), not asked to or bounded
        try:
            quiet = 0
            while not self._stop.is_set():
                t0 = time.monotonic()
                drain_armed = self._stop_drained.is_set()
                polled = consumer.poll(timeout_ms=poll_timeout_ms)
                self.broker_watch.polled(bool(polled), time.monotonic())
                if self.rebalances.apply(self):
                    # what this poll brought of partitions no longer ours is their new owner's
                    owned = consumer.assignment()
                    polled = {tp: m for tp, m in polled.items() if tp in owned}
                if order is not None and order.pauses_unsynced:
                    order.resync_pauses(consumer)
                if book.seeks_pending:
                    # Partitions just assigned are read from where they must start: what this poll
                    # brought of them comes again after the seek.
                    polled = {tp: m for tp, m in polled.items() if not book.pending(tp)}
                    book.seek(consumer)
                if order is not None:
                    for tp, messages in polled.items():
                        if messages:
                            book.next_offset[tp] = messages[-1].offset + 1
                out: list[Outgoing] = []
                good: list[Record] = []
                if polled:
                    if stats.first_read_at is None:
                        stats.first_read_at = time.time()
                    good, dead = self.intake.split(polled)
                    out.extend(dead)
                    stats.dead_letters += len(dead)
                if order is not None:
                    good = self._released(order.ordered(consumer, good), out)
                self._handle_into(good, out)
                if ticks and time.monotonic() - last_tick >= tick_interval_s:
                    busy = order.tick_gate(consumer, self.handler.tick_held is not None) if order else frozenset()
                    if busy is not None:
                        last_tick = time.monotonic()
                        out.extend(self._tick_handler(consumer, busy))
                out.extend(self._announce())
                if polled or out:
                    if not self._deliver_and_commit(consumer, polled, out):
                        continue
                    stats.records_in += sum(len(v) for v in polled.values())
                    stats.batches += 1 if polled else 0
                elif self.commits.unsettled:
                    self._deliver_and_commit(consumer, {}, [])  # caught up: commit now
                stats.last_loop_s = time.monotonic() - t0
                if time.monotonic() - last_lag >= LAG_EVERY_S:
                    last_lag = time.monotonic()
                    stats.lag = self._lag(consumer)
                if max_records_total is not None and stats.records_in >= max_records_total:
                    break
                if drain_armed:
                    # Two empty polls begun after the request, caught up both times: a fetch sent
                    # before it may not have seen the last records, and their end with it.
                    settled = not polled and self.ready.is_set() and book.rebalancing is None
                    quiet = quiet + 1 if settled and self._drained(consumer) else 0
                    if quiet >= 2:
                        ended = True
                        break
                if idle is None:
                    continue
                verdict, consumer = self._idle_verdict(consumer, idle, join, bool(polled))
                if verdict is not None:
                    ended = verdict  # False: a stuck join given up, not the input's end: no `done`
                    break
            self._finish(consumer, done=ended)
        finally:
            self._close()
            for sig, handler in previous_signals.items():
                signal.signal(sig, handler)
        return self.stats

    def _idle_verdict(self, consumer: Consumer, idle: IdleStop, join: JoinWait,
                      polled: bool) -> tuple[bool | None, Consumer]:
        """A bounded run's stop after a poll: ``(None, c)`` go on polling with ``c``; ``(True, c)``
        the input's end (idle, or the group committed it all); ``(False, c)`` a stuck join given up."""
        book, now = self.rebalance, time.monotonic()
        if not self.ready.is_set() or book.rebalancing is not None:
            # In a join: no idle stop while the group has input left (an assignment will
            # come, or this member's join is stuck and it joins again).
            self._idle_assignments = book.assignments
            idle.start(now)
            if self.idle_together is not None:
                self.idle_together(False)  # siblings do not stop while partitions move
            join.polled(now)
            if not join.stuck:
                return None, consumer
            join.reset()
            return self.stuck_join(consumer, REBALANCE_IDLE_GRACE_S, MAX_REJOINS)
        join.reset()
        self.rejoins = 0
        if self._idle_assignments != book.assignments:
            self._idle_assignments = book.assignments
            idle.start(now)  # idle time counts from joining the group, and from each assignment
            return None, consumer
        idle.polled(now, polled)
        due = idle.due(now, functools.partial(self._drained, consumer))
        if self.idle_together is not None:
            due = self.idle_together(due)
        return (True if due else None), consumer

    def _tick_gate(self, consumer: Consumer) -> frozenset[str] | None:
        """None when the handler's clock may not tick now; else the jobs it must leave alone."""
        if self.order is None:
            return frozenset()
        return self.order.tick_gate(consumer, self.handler.tick_held is not None)

    def _tick_handler(self, consumer: Consumer, busy: frozenset[str]) -> list[Outgoing]:
        now = time.time()
        tick_held = self.handler.tick_held
        if tick_held is not None:
            upstream: Mapping[TopicPartition, UpstreamStop] = (
                self.order.upstream(consumer) if self.order is not None else {})
            return list(tick_held(now, busy, upstream))
        assert self.handler.tick is not None
        return list(self.handler.tick(now))

    def _announce(self) -> list[Outgoing]:
        order = self.order
        if order is None:
            return []
        return self.progress.announce(self.consumer, order.merge, self.rebalance.rebalancing is not None,
                                      lambda: order.behind(self.consumer))

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
        self.commits.handed_on()  # their offsets are committed at the next settle (streams.runner.commit)
        self.stats.last_handled_at = time.time()
        self.stats.dead_letters += sum(1 for o in produced if o.topic == DEAD_LETTER_TOPIC)
        out.extend(produced)

    def _finish(self, consumer: Consumer, done: bool = False) -> None:
        """End of a run: what the merge still holds is handed on (nothing more is coming to this
        member), its outputs delivered and the offsets committed. ``done``: the run stopped because
        its input ended: the handler judges what only more wall time would have (``input_ended``,
        streams/runner/handler.py), and its last word on progress says so."""
        self.rebalances.apply(self)
        if self.order is None:
            if self.commits.unsettled:
                self._deliver_and_commit(consumer, {}, [])
            return
        out: list[Outgoing] = []
        if self.order.merge.held:
            self._handle_into(self._released(self.order.ordered(consumer, [], drain=True), out), out)
        if done and self.handler.input_ended is not None:
            out.extend(self.handler.input_ended(time.time(), self.order.upstream(consumer)))
        self.progress.last_word(done)  # the last word on progress goes out now
        out.extend(self._announce())
        if out or self.commits.unsettled:
            self._deliver_and_commit(consumer, {}, out)

    def _drained(self, consumer: Consumer) -> bool:
        """Whether every partition of this member was read to its end, as far as the client can
        tell (event time: the broker asked about partitions never fetched from). Mid-rebalance
        the partitions the client still lists are no longer this member's to read."""
        if self.rebalance.rebalancing is not None:
            return True
        if self.order is not None:
            return all(self.order.caught_up(consumer).values())
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
            if self.order is not None:
                self.order.close()
            if self.consumer is not None:
                self.consumer.close(autocommit=False)
        finally:
            if self._own_producer:
                self.producer.close()
