"""Rebalance bookkeeping of :class:`streams.runner.loop.GroupRunner`: the client's callbacks, brought
onto the loop's thread; where each partition's reading resumes after a rebalance (kept partitions
where their handing on stopped, partitions taken over ``rebuild_s`` back, to rebuild the
handler's state); and whether a rebalance is under way.

A :class:`RebalanceBook` is owned by the runner and holds only this state; the runner tells the
other parts (the event-time order, the progress announcer, the handler) what a rebalance did.
Everything but :meth:`RebalanceBook.seek` is pure and tested alone (tests/streams/test_runner_parts.py).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable, Collection, Protocol

from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import KafkaError
from kafka.structs import TopicPartition

from faultlens.streams.kafka_client import Consumer

log = logging.getLogger(__name__)

# How long after a rebalance a member announces no progress downstream.
REBALANCE_SETTLE_S = 3.0


class RebalanceTarget(Protocol):
    """What the listener tells: the runner, which applies a rebalance to all its parts."""

    rebalances: RebalanceQueue

    def _assigned(self, partitions: Collection[TopicPartition]) -> None: ...

    def _revoked(self, partitions: Collection[TopicPartition]) -> None: ...


class RebalanceListener(ConsumerRebalanceListener):
    """The client's callbacks, handed to the runner on its loop's thread (see :class:`RebalanceQueue`)."""

    def __init__(self, runner: RebalanceTarget):
        self.runner = runner

    def on_partitions_revoked(self, revoked) -> None:
        self.runner.rebalances.event(False, revoked, self.runner)

    def on_partitions_assigned(self, assigned) -> None:
        self.runner.rebalances.event(True, assigned, self.runner)


class RebalanceQueue:
    """Rebalance callbacks that come on another thread than the loop's, applied by the loop.

    confluent-kafka (and kafka-python 2) call them inside poll(), on the loop's thread; kafka-python
    3 calls them on its IO thread, beside the loop. There they are queued and applied by the loop
    right after its next poll: run beside the loop, the bookkeeping raced it (resume points taken
    from a merge the loop was changing), and a 36-job backlog lost a node-stage member's heartbeats
    across a rebalance (issue 32; none with confluent-kafka)."""

    def __init__(self) -> None:
        self.loop_thread: int | None = None
        self._queue: collections.deque[tuple[bool, list[TopicPartition]]] = collections.deque()

    def event(self, assigned: bool, partitions: Collection[TopicPartition], target: RebalanceTarget) -> None:
        if self.loop_thread is None or threading.get_ident() == self.loop_thread:
            (target._assigned if assigned else target._revoked)(partitions)
        else:
            self._queue.append((assigned, list(partitions)))

    def apply(self, target: RebalanceTarget) -> bool:
        """Apply the callbacks queued by another thread, in order; whether there were any."""
        applied = False
        while self._queue:
            assigned, partitions = self._queue.popleft()
            (target._assigned if assigned else target._revoked)(partitions)
            applied = True
        return applied


class RebalanceBook:
    """Where each partition resumes, which must be rebuilt, and since when a rebalance is on."""

    def __init__(self, rebuild_s: float):
        # State a handler keeps (windows, pending hang rounds, dedup) lives in memory: a partition
        # that comes to this member (a rebalance, a restart) is read again from `rebuild_s` of
        # broker time before its committed offset, so that state is rebuilt from retained input.
        # What comes out again carries the ids it had (they derive from the input): downstream
        # stores and remediation drop the copies.
        self.rebuild_s = rebuild_s
        self.to_rebuild: set[TopicPartition] = set()
        # A partition a rebalance takes away and gives straight back (an eager rebalance revokes
        # everything) is not read again: the handler's state already holds it, and reading it
        # twice would count its events twice (a node rule's "2 NIC alerts in 5 min" fired again
        # on the first alert re-read). It resumes where its handing on stopped.
        self.next_offset: dict[TopicPartition, int] = {}  # past the last offset read
        self.resume_at: dict[TopicPartition, int] = {}  # revoked: where handing on stopped
        self.to_resume: dict[TopicPartition, int] = {}  # kept through a rebalance: seek there
        self.revoked_last: set[TopicPartition] = set()
        # A partition taken over and read again from before the group's commit: nothing is committed
        # below that commit until the handing on passes it. Committing the rebuild's start moved a
        # group's commit back (a takeover's 273 to 0 for the seconds its re-read took): a restart
        # then would read again all the group had diagnosed, and rebuild_s before it besides.
        self.commit_floor: dict[TopicPartition, int] = {}
        # Since when a revocation awaits its next assignment (None: not rebalancing). No idle stop
        # then, for a while (kafka-python keeps revoked members in the loop while the join goes
        # on; a member stopping there left the records it had held to a new owner that, in a
        # group emptying at the end of a run, never came).
        self.rebalancing: float | None = None
        self.assignments = 0  # how many assignments this member was given (a bounded run's idle count restarts)

    def assigned(self, assigned: Collection[TopicPartition]) -> set[TopicPartition]:
        """Partitions given to this member; returns those that moved (left it, or came to it from
        another), not those a rebalance gave straight back."""
        kept = {tp: self.resume_at[tp] for tp in assigned if tp in self.resume_at}
        self.resume_at.clear()
        self.rebalancing = None
        self.to_resume.update(kept)
        moved = (self.revoked_last - set(assigned)) | (set(assigned) - set(kept))
        self.revoked_last = set()
        self.commit_floor = {tp: at for tp, at in self.commit_floor.items() if tp in kept}
        if self.rebuild_s > 0:
            self.to_rebuild |= set(assigned) - set(kept)
        self.assignments += 1
        return moved

    def revoked(self, revoked: Collection[TopicPartition], now: float,
                held_offset: Callable[[TopicPartition], int | None] | None) -> None:
        """Partitions taken from this member. ``held_offset`` (event time only: the merge's first
        record still held of a partition) says where handing on stopped; without it no resume
        point is kept."""
        if self.rebalancing is None:
            self.rebalancing = now
        unbuilt = self.to_rebuild & set(revoked)  # nothing of them handed on yet: rebuilt if they come back
        self.to_rebuild -= set(revoked)
        self.revoked_last |= set(revoked)
        if held_offset is None:
            return
        for tp in revoked:
            # Where this member's handing on stopped: the first record still held, or the next
            # one to read (or a resume still pending, when nothing was read since).
            held = held_offset(tp)
            pending = self.to_resume.pop(tp, None)
            read_to = self.next_offset.pop(tp, pending)
            at = held if held is not None else read_to
            if at is not None and tp not in unbuilt:
                self.resume_at[tp] = at

    def above_floor(self, offsets: dict[TopicPartition, Any]) -> dict[TopicPartition, Any]:
        """``offsets`` (to commit) without those below their partition's commit floor; a floor
        reached is forgotten."""
        for tp, at in list(offsets.items()):
            floor = self.commit_floor.get(tp)
            if floor is None:
                continue
            if at.offset < floor:
                del offsets[tp]
            else:
                del self.commit_floor[tp]
        return offsets

    @property
    def seeks_pending(self) -> bool:
        return bool(self.to_rebuild or self.to_resume)

    def pending(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` is still to be sought (what a poll brought of it comes again after)."""
        return tp in self.to_rebuild or tp in self.to_resume

    def seek(self, consumer: Consumer) -> None:
        """Seek partitions kept through a rebalance to where their handing on stopped, and newly
        assigned ones back by ``rebuild_s``; runs in the loop, where the consumer may block on the
        broker."""
        resume, self.to_resume = self.to_resume, {}
        for tp, offset in resume.items():
            if tp in consumer.assignment():
                consumer.seek(tp, offset)
        parts, self.to_rebuild = [tp for tp in self.to_rebuild if tp in consumer.assignment()], set()
        if not parts:
            return
        since_ms = int((time.time() - self.rebuild_s) * 1000)
        try:
            found = consumer.offsets_for_times({tp: since_ms for tp in parts})
        except (KafkaError, ValueError) as exc:  # a broker without timestamp lookups
            log.warning("cannot rebuild state from retained input (%s); starting from the commit", exc)
            return
        committed = {tp: consumer.committed(tp) for tp in parts}
        first = consumer.beginning_offsets(parts)
        for tp in parts:
            # Where the group left off (the start, for a group that never committed)...
            base = committed[tp]
            if base is None:
                base = first.get(tp, 0)
            at = found.get(tp)
            # ... or earlier, by `rebuild_s` of broker time.
            start = min(at.offset, base) if at is not None else base
            consumer.seek(tp, start)
            self.commit_floor.pop(tp, None)
            if start < base:
                self.commit_floor[tp] = base
                log.info("%s[%d]: re-reading %d record(s) to rebuild state", tp.topic, tp.partition, base - start)
