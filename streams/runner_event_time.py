"""The event-time mode of :class:`streams.runner.GroupRunner` (``event_time=True``, the diagnosis
consumer), against a live consumer: records held in the :class:`~streams.event_time.WatermarkMerge`
until no partition can deliver an earlier one, partitions that run ahead paused, the broadcast
topics (`jobs`) read in full beside the group, only offsets already handed on committed, and this
member's progress announced downstream.

Apart from the runner's loop because it is the part that the arrival-order runner never uses;
the merge and clock themselves are pure and live in streams/event_time.py. :class:`EventTimeMode`
is a mixin of GroupRunner and works on the state its ``__init__`` sets up (``merge``, ``intake``,
``stats``, ``_broadcast``, ``_paused``, ``_assigned_at``, the announcement fields).
"""

from __future__ import annotations

import logging
import time

import orjson
from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition

from faultlens.streams.kafka_client import Consumer
from faultlens.streams.producer import Outgoing
from faultlens.streams.runner_types import Record, broker_time

log = logging.getLogger(__name__)

# How long an assigned partition that was never fetched from holds event time back.
UNFETCHED_WAIT_S = 30.0
# How long one loop waits for a broadcast topic (`jobs`) to catch up before it releases data.
BROADCAST_CATCH_UP_S = 1.0
# A member with no new progress still says so this often: downstream takes a writer silent for
# WatermarkMerge.writer_ttl_s (15 s) as gone, and must hear whether it is still behind.
KEEPALIVE_S = 5.0
# A partition with unread input whose latest record read is older than this is a backlog.
BEHIND_S = 10.0


class EventTimeMode:
    """GroupRunner's methods for event-time order (see the module doc)."""

    # --- broadcast topics -------------------------------------------------------------------
    def _poll_broadcast(self) -> list[Record]:
        if self._broadcast is None:
            return []
        polled = self._broadcast.poll(timeout_ms=0)
        # A broadcast topic never sets the pace, so its records must be in hand before the data
        # after them is released: a restart's new topology read late maps the ranks of the next
        # stall onto machines that left. A caught-up `jobs` costs nothing here; one behind (a
        # member that starts, or reads faster than its broadcast fetches) is waited for briefly.
        start = time.monotonic()
        if start >= self._broadcast_wait_after:
            while self._broadcast_behind():
                if time.monotonic() - start >= BROADCAST_CATCH_UP_S:
                    # Something keeps it behind (a broker that answers slowly): go on, and do not
                    # stall every loop on it.
                    log.warning("broadcast topics still behind after %.1fs; going on", BROADCAST_CATCH_UP_S)
                    self._broadcast_wait_after = start + 30.0
                    break
                for tp, messages in self._broadcast.poll(timeout_ms=50).items():
                    polled.setdefault(tp, []).extend(messages)
        if not polled:
            return []
        self.stats.records_in += sum(len(v) for v in polled.values())
        good, dead = self.intake.split(polled)
        for d in dead:
            log.warning("broadcast topic: %s", orjson.loads(d.value).get("reason"))
        return good

    def _broadcast_behind(self) -> bool:
        """Whether a broadcast partition has records its consumer has not handed out yet (or,
        freshly assigned, has not been fetched from at all)."""
        now = time.monotonic()
        return not all(self._partition_caught_up(self._broadcast, tp, now) for tp in self._broadcast.assignment())
    # --- event-time order -------------------------------------------------------------------
    def _caught_up(self, consumer: Consumer) -> dict[TopicPartition, bool]:
        now = time.monotonic()
        out = {tp: self._partition_caught_up(consumer, tp, now) for tp in consumer.assignment()}
        if self._broadcast is not None:
            out.update({tp: self._partition_caught_up(self._broadcast, tp, now) for tp in self._broadcast.assignment()})
        return out

    def _partition_caught_up(self, consumer: Consumer, tp: TopicPartition, now: float) -> bool:
        high = consumer.highwater(tp)
        if high is None:
            # Nothing fetched from it yet: it may hold the earliest events of all. After a while
            # the broker is asked how far it goes: an empty partition is caught up, one with data
            # waits for its fetch, however long a starved consumer takes (taken as caught up after
            # 30 s, a partition's unread telemetry fell behind its peers' and a node stage handed
            # the peers' heartbeats on without its nodes': issue 32). Only a broker that cannot
            # say lets the wait end.
            if now - self._assigned_at.get(tp, now) < UNFETCHED_WAIT_S:
                return False
            end = self._end_offsets(consumer).get(tp)
            if end is None:
                if tp not in self._unfetched_warned:
                    self._unfetched_warned.add(tp)
                    log.warning("%s:%d assigned %.0fs ago, never fetched from, and the broker did not say how "
                                "far it goes: no longer waited for in event time", tp.topic, tp.partition,
                                UNFETCHED_WAIT_S)
                return True
            try:
                return consumer.position(tp) >= end
            except KafkaError:
                return False
        return consumer.position(tp) >= high

    def _end_offsets(self, consumer: Consumer) -> dict[TopicPartition, int]:
        """The broker's end offsets of ``consumer``'s partitions never fetched from, asked once per
        assignment (one request for all of them)."""
        known = self._unfetched_end.get(id(consumer))
        if known is None:
            unfetched = [tp for tp in consumer.assignment() if consumer.highwater(tp) is None]
            try:
                known = dict(consumer.end_offsets(unfetched)) if unfetched else {}
            except (KafkaError, ValueError) as exc:
                log.warning("end offsets of %d unfetched partition(s) unknown (%s)", len(unfetched), exc)
                known = {}
            self._unfetched_end[id(consumer)] = known
        return known

    def _ordered(self, consumer: Consumer, good: list[Record], drain: bool = False) -> list[Record]:
        """Hold ``good`` in the merge and return what may go, in event-time order; pause the
        partitions that ran ahead and resume those that fell behind."""
        assert self.merge is not None
        now = time.time()
        add = self.merge.add
        tps: dict[tuple[str, int], TopicPartition] = {}  # one per partition, not one per record
        for r in [*good, *self._poll_broadcast()]:
            tp = tps.get((r.topic, r.partition))
            if tp is None:
                tp = tps[(r.topic, r.partition)] = TopicPartition(r.topic, r.partition)
            add(tp, r.offset, r.event_ts, r, now, broker_time(r.timestamp_ms))
        if drain:
            out = self.merge.drain()
        elif not consumer.assignment():
            # Not in the group yet: the broadcast topics alone must not set the pace (a restart at
            # the end of `jobs` would run ahead of all the telemetry before it).
            out = []
        else:
            out = self.merge.release(now, self._caught_up(consumer))
        out = [r for r in out if r is not None]  # watermark records only hold their offset
        pause = self.merge.to_pause() - self._paused
        resume = self.merge.to_resume() & self._paused
        if pause:
            consumer.pause(*pause)
            self._paused |= pause
        if resume:
            consumer.resume(*resume)
            self._paused -= resume
        self.stats.held = self.merge.held
        return out

    def _commit_handed_on(self, consumer: Consumer | None, partitions) -> None:
        """Commit, per partition, up to the first record still held (or the position)."""
        merge = self.merge
        if consumer is None or merge is None:
            return
        offsets = {}
        for tp in partitions:
            # kafka-python keeps revoked partitions in its assignment until the join completes,
            # and its position runs past the records the merge held and let go of: commit where
            # handing on stopped, or nothing (a member stopping mid-rebalance committed past
            # them, and a next owner starting at the commit never read them).
            if tp in self._resume_at:
                offsets[tp] = OffsetAndMetadata(self._resume_at[tp], "", -1)
                continue
            if not merge.tracks(tp):
                continue
            low = merge.lowest_held_offset(tp)
            try:
                pos = low if low is not None else consumer.position(tp)
            except KafkaError:
                continue
            offsets[tp] = OffsetAndMetadata(pos, "", -1)
        if not offsets:
            return
        try:
            consumer.commit(offsets)
            self.stats.commits += 1
        except (CommitFailedError, KafkaError) as exc:
            log.warning("commit failed (%s); those records will be delivered again", exc)
    def _announce(self) -> list[Outgoing]:
        """This member's progress, for the stage downstream: after its outputs, at most once a
        second, and every KEEPALIVE_S while it has none to report (it is alive, whether it is still
        behind on its input, whether it is idle: caught up and quiet, holding nothing back)."""
        if self.on_progress is None or self.merge is None:
            return []
        hello: list[Outgoing] = []
        if self._hello:
            self._hello = False
            hello = list(self.on_progress(float("-inf"), self._reads(), True, False))
        if time.monotonic() < self._settle_until or self._rebalancing is not None:
            # Revoked and not yet given partitions again: its merge is empty ("idle") and the
            # client still lists the old assignment as what it reads. Said then, that word let the
            # job stage take one member's records for all there was (issue 32, starved: a join
            # that took 8 s on a starved host). Silent, its last word before the rebalance binds.
            return hello
        progress, idle = self.merge.progress, self.merge.idle
        if progress is None and not idle:
            return hello  # nothing handed on yet, and something still to come
        since = time.monotonic() - self._announced_wall
        grew = progress is not None and (self._announced is None or progress > self._announced)
        if self._announced_idle is not None and (since < 1.0 or (
                not grew and idle == self._announced_idle and since < KEEPALIVE_S)):
            return hello
        if grew:
            self._announced = progress
        self._announced_idle, self._announced_wall = idle, time.monotonic()
        said = self._announced if self._announced is not None else float("-inf")
        behind = self._behind()
        return hello + list(self.on_progress(said, self._reads(), behind, idle and not behind))

    def _behind(self, caught_up: dict[TopicPartition, bool] | None = None) -> bool:
        """Whether this member is reading a backlog: some partition has unread input and what was
        last read of it is over BEHIND_S old by the broker's clock (or nothing was read of it yet).
        A member keeping up with a busy stream always has a little unread input: that is not it.
        ``caught_up``: :meth:`_caught_up`, where the caller has it already."""
        consumer = self.consumer
        if consumer is None or self.merge is None:
            return False
        if caught_up is None:
            caught_up = self._caught_up(consumer)
        now = time.time()
        for tp in consumer.assignment():
            if not caught_up.get(tp, True):
                read = self.merge.frontier(tp)
                if read is None or now - read > BEHIND_S:
                    return True
        return False

    def _reads(self) -> tuple[tuple[str, ...], int] | None:
        """The input partitions this member reads, and how many its group reads in all (None while
        the topics' metadata is unknown): downstream waits until every one has a writer."""
        consumer = self.consumer
        if consumer is None:
            return None
        now = time.monotonic()
        total, asked = self._input_partitions
        if total is None or now - asked > 30.0:
            # A metadata request per topic (confluent-kafka asks the broker): not every second.
            try:
                counts = [consumer.partitions_for_topic(topic) for topic in self.topics]
            except KafkaError as exc:
                log.debug("partition counts unknown (%s): progress said without them", exc)
                counts = []
            total = sum(len(c) for c in counts) if counts and all(counts) else None
            self._input_partitions = (total, now)
        if total is None:
            return None
        own = sorted(f"{tp.topic}:{tp.partition}" for tp in consumer.assignment() if tp.topic in self.topics)
        return tuple(own), total

    def _input_settled(self, consumer: Consumer) -> bool:
        """Whether the wall clock may stand in for event time for every job at once: nothing is
        held back, no partition has unread input, and no upstream writer has (while a backlog is
        read anywhere upstream, only the input moves time). The gate of a handler whose ``tick``
        cannot be told which jobs still have records held (see :meth:`_tick_gate`)."""
        if self.merge is None:
            return True
        if self.merge.held:
            return False
        caught_up = self._caught_up(consumer)
        return all(caught_up.values()) and not self.merge.upstream_behind(time.time(), caught_up)

    def _input_live(self, consumer: Consumer) -> bool:
        """Whether the wall clock may stand in for the event time of a job with nothing held: no
        partition has a backlog (unread input whose latest record read is over BEHIND_S old), and
        no upstream writer is behind. A busy stream always has a little unread input and records
        held for the partitions behind it; waiting for a moment with neither (the old gate) left a
        job whose every node died unjudged for as long as another job kept streaming."""
        if self.merge is None:
            return True
        caught_up = self._caught_up(consumer)
        return not self._behind(caught_up) and not self.merge.upstream_behind(time.time(), caught_up)

    def _held_jobs(self) -> frozenset[str]:
        """The jobs with records still held in the merge: their time waits for those records."""
        if self.merge is None or not self.merge.held:
            return frozenset()
        return frozenset(getattr(r.value, "job", None) for r in self.merge.held_items() if r is not None)

    def _tick_gate(self, consumer: Consumer) -> frozenset[str] | None:
        """None when the handler's clock may not tick now; else the jobs it must leave alone."""
        if self._tick_takes_busy:
            return self._held_jobs() if self._input_live(consumer) else None
        return frozenset() if self._input_settled(consumer) else None
