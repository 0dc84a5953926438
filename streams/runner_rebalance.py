"""The rebalance side of :class:`streams.runner.GroupRunner`: the client's callbacks, applied on the
loop's thread; where each partition's reading resumes after a rebalance (kept partitions where
their handing on stopped, partitions taken over ``rebuild_s`` back, to rebuild the handler's
state); and the pause flags the clients keep across one.

Apart from the runner's loop because it is bookkeeping the loop only calls into. :class:`RebalanceMode`
is a mixin of GroupRunner and works on the state its ``__init__`` sets up (``merge``,
``_resume_at``, ``_to_resume``, ``_to_rebuild``, ``_paused``, the announcement fields).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import KafkaError

from faultlens.streams.kafka_client import Consumer

if TYPE_CHECKING:  # the runner imports this module; the name is for the checker only
    from faultlens.streams.runner import GroupRunner

log = logging.getLogger(__name__)

# How long after a rebalance a member announces no progress downstream.
REBALANCE_SETTLE_S = 3.0


class RebalanceListener(ConsumerRebalanceListener):
    def __init__(self, runner: "GroupRunner"):
        self.runner = runner

    def on_partitions_revoked(self, revoked) -> None:
        self.runner._rebalance_event(False, revoked)

    def on_partitions_assigned(self, assigned) -> None:
        self.runner._rebalance_event(True, assigned)


class RebalanceMode:
    """GroupRunner's methods for rebalances (see the module doc)."""

    def _rebalance_event(self, assigned: bool, partitions) -> None:
        """A rebalance callback. confluent-kafka (and kafka-python 2) call it inside poll(), on the
        loop's thread; kafka-python 3 calls it on its IO thread, beside the loop. There it is queued
        and applied by the loop right after its next poll: run beside the loop, the bookkeeping raced
        it (resume points taken from a merge the loop was changing), and a 36-job backlog lost a
        node-stage member's heartbeats across a rebalance (issue 32; none with confluent-kafka)."""
        if self._loop_thread is None or threading.get_ident() == self._loop_thread:
            (self._assigned if assigned else self._revoked)(partitions)
        else:
            self._rebalance_queue.append((assigned, list(partitions)))

    def _apply_rebalances(self) -> bool:
        """Apply the rebalance callbacks queued by another thread, in order; whether there were any."""
        applied = False
        while self._rebalance_queue:
            assigned, partitions = self._rebalance_queue.popleft()
            (self._assigned if assigned else self._revoked)(partitions)
            applied = True
        return applied

    def _assigned(self, assigned) -> None:
        if self._on_assigned is not None:
            self._on_assigned(assigned)  # bookkeeping only: this runs inside the client's rebalance callback
        kept = {tp: self._resume_at[tp] for tp in assigned if tp in self._resume_at}
        self._resume_at.clear()
        self._rebalancing = None
        self._to_resume.update(kept)
        moved = (self._revoked_last - set(assigned)) | (set(assigned) - set(kept))
        self._revoked_last = set()
        if self._on_moved is not None and moved:
            self._on_moved(moved)
        if self.rebuild_s > 0:
            self._to_rebuild |= set(assigned) - set(kept)
        self._hello = True
        self._assignments += 1
        # the hello wipes this member's word downstream: its progress is said again
        self._announced = self._announced_idle = None
        self._settle_until = time.monotonic() + REBALANCE_SETTLE_S
        if self.merge is not None:
            self.merge.assign(assigned, time.time())
            now = time.monotonic()
            self._assigned_at.update({tp: now for tp in assigned})
            self._unfetched_end.clear()
            self._pauses_unsynced = True
        self.ready.set()

    def _revoked(self, revoked) -> None:
        self._settle_until = time.monotonic() + REBALANCE_SETTLE_S
        if self._rebalancing is None:
            self._rebalancing = time.monotonic()
        unbuilt = self._to_rebuild & set(revoked)  # nothing of them handed on yet: rebuilt if they come back
        self._to_rebuild -= set(revoked)
        self._revoked_last |= set(revoked)
        if self.merge is None or not revoked:
            return
        for tp in revoked:
            # Where this member's handing on stopped: the first record still held, or the next
            # one to read (or a resume still pending, when nothing was read since).
            held = self.merge.lowest_held_offset(tp)
            pending = self._to_resume.pop(tp, None)
            read_to = self._next_offset.pop(tp, pending)
            at = held if held is not None else read_to
            if at is not None and tp not in unbuilt:
                self._resume_at[tp] = at
        # What is held goes back to the partition's next owner: the commit stays below it (see
        # _commit_handed_on). A listener may not block on the broker, so nothing is committed here.
        dropped = self.merge.revoke(revoked)
        self._paused -= set(revoked)
        if dropped:
            log.info("rebalance: %d held record(s) of %d partition(s) left for their new owner", dropped, len(revoked))

    def _resync_pauses(self, consumer: Consumer) -> None:
        """Resume every assigned partition this member does not hold paused. A revocation forgets
        the pauses of the partitions it takes (their merge state goes with them), but kafka-python
        3 and librdkafka both keep a partition's pause flag when the next assignment gives it
        straight back (an eager rebalance revokes everything): such a partition was never fetched
        again, and a node-stage member sat idle beside thousands of unread records for good
        (issue 32). Resuming a partition that is not paused costs nothing with either client;
        librdkafka takes a resume of one it has not started yet (its flag is cleared)."""
        self._pauses_unsynced = False
        stale = [tp for tp in consumer.assignment() if tp not in self._paused]
        if stale:
            consumer.resume(*stale)

    def _rebuild(self, consumer: Consumer) -> None:
        """Seek partitions kept through a rebalance to where their handing on stopped, and newly
        assigned ones back by ``rebuild_s`` (see __init__); runs in the loop, where the consumer
        may block on the broker."""
        resume, self._to_resume = self._to_resume, {}
        for tp, offset in resume.items():
            if tp in consumer.assignment():
                consumer.seek(tp, offset)
        parts, self._to_rebuild = [tp for tp in self._to_rebuild if tp in consumer.assignment()], set()
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
            base = committed[tp] if committed[tp] is not None else first.get(tp, 0)
            at = found.get(tp)
            # ... or earlier, by `rebuild_s` of broker time.
            start = min(at.offset, base) if at is not None else base
            consumer.seek(tp, start)
            if start < base:
                log.info("%s[%d]: re-reading %d record(s) to rebuild state", tp.topic, tp.partition, base - start)
