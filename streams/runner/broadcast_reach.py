"""How far a live member must read its broadcast topics (`jobs`) before it hands on the group's
records that came with them: as far as the broker held them when those records came.

The broadcast reader counts itself caught up by the high watermark its last fetch carried. A job's
topology and its first steps written together reach the broker together; the group's fetch brings
the steps while the broadcast's last fetch, answered just before, still says `jobs` ends where it
did: the steps were judged without the topology ("no topology for job X", a record-only
'unknown'/'none' finding naming one machine: 1 run in 5 of the live 2+2 fleet-waves e2e at load
11-19). A backlog read never saw it (`jobs` is read whole before the data it precedes).

So after a poll that brought the group's records, the broker is asked where the broadcast
partitions end (one ListOffsets request, at most every REACH_EVERY_S), and those records wait
until the broadcast reader has reached that end. Records that came after the last ask wait for
the next one, unless the broker took them over COVER_SLACK_S before it: what was written before
them was there to be listed. A backlog's records are that old, so a member reading one asks about
once (asked for every poll's records, a node stage read a 75k-message backlog at 0.71-0.83x its
rate). A broker that does not answer is said once and not asked again for REACH_BACKOFF_S: data
goes on as the last fetch's high watermark says, as before. Event time is not touched: this only
says when the merge may release (streams/runner/event_time.py).
"""

from __future__ import annotations

import logging
import time
from typing import Mapping, Sequence

from kafka import KafkaConsumer
from kafka.errors import KafkaError
from kafka.structs import TopicPartition

from faultlens.streams.kafka_client import Consumer
from faultlens.streams.runner.types import Record, broker_time

log = logging.getLogger(__name__)

# How often the broker is asked at most: records that came after an ask wait up to this long (and
# a round trip) for the next one. A member fed live asks about 7 times a second, a quiet one never.
REACH_EVERY_S = 0.15
# How long one ask may take (kafka-python's default request timeout is 30 s; librdkafka's adapter
# waits 10 s), and how long after a failed one no ask is made and nothing waits for one.
REACH_TIMEOUT_MS = 2_000
REACH_BACKOFF_S = 30.0
# How much older than an ask a record's broker time must be for that ask to cover it: the
# writer's clock (a record's CreateTime) and this host's may disagree by this much.
COVER_SLACK_S = 2.0


def short_of(positions: Mapping[TopicPartition, int | None], ends: Mapping[TopicPartition, int]) -> list[TopicPartition]:
    """The partitions whose reader's position is below the end the broker listed (no position yet:
    nothing read). On the embedded broker a listed end is the last batch's first offset + 1
    (streams/reader_ends.py): past it, the rest of that batch is waited for by the high watermark
    the fetch that brought it carried (EventTimeOrder.partition_caught_up)."""
    return [tp for tp, end in ends.items() if (positions.get(tp) or 0) < end]


def covered(newest_s: float | None, asked_wall: float) -> bool:
    """Whether an ask made at wall time ``asked_wall`` listed what was written before records whose
    newest broker time is ``newest_s`` (None: some record's time is unknown, taken as now)."""
    return newest_s is not None and newest_s < asked_wall - COVER_SLACK_S


def ask_due(unasked: bool, now: float, asked_at: float, quiet_until: float) -> bool:
    """Whether to ask the broker now: records came since the last ask, which is REACH_EVERY_S old,
    and no failed ask is being waited out."""
    return unasked and now >= quiet_until and now - asked_at >= REACH_EVERY_S


class BroadcastReach:
    """The broadcast topics' ends as last asked, and whether group records came after that ask."""

    def __init__(self) -> None:
        self.ends: dict[TopicPartition, int] = {}
        self.asked_at = float("-inf")  # monotonic time of the last ask
        self.asked_wall = float("-inf")  # its wall time, to compare with records' broker times
        self.unasked = False  # group records came after the last ask: they wait for the next
        self._quiet_until = 0.0  # after a failed ask: neither asked nor waited for until then
        self._said = False

    def came(self, now: float, records: Sequence[Record]) -> None:
        """The group's poll brought ``records`` at monotonic time ``now``."""
        if self.unasked or now < self._quiet_until:
            return
        if not covered(broker_time(max(r.timestamp_ms or 0 for r in records)), self.asked_wall):
            self.unasked = True

    def ask(self, broadcast: Consumer, now: float) -> None:
        """Ask where ``broadcast``'s partitions end, if records came since the last ask and it is due."""
        if not ask_due(self.unasked, now, self.asked_at, self._quiet_until):
            return
        parts = list(broadcast.assignment())
        try:
            if isinstance(broadcast, KafkaConsumer):
                ends = broadcast.end_offsets(parts, timeout_ms=REACH_TIMEOUT_MS)
            else:
                ends = broadcast.end_offsets(parts)
        except (KafkaError, ValueError) as exc:
            if not self._said:
                self._said = True
                log.warning(
                    "the broker did not say where the broadcast topics end (%s): records are handed on "
                    "as far as their last fetch says they were read, not asked again for %.0fs",
                    exc,
                    REACH_BACKOFF_S,
                )
            self._quiet_until = now + REACH_BACKOFF_S
            self.unasked = False
            return
        self.ends.update(ends)
        self.asked_at, self.asked_wall, self.unasked = now, time.time(), False

    def short(self, broadcast: Consumer) -> bool:
        """Whether ``broadcast`` has yet to read to the ends last asked."""
        if not self.ends:
            return False
        return bool(short_of({tp: broadcast.position(tp) for tp in self.ends}, self.ends))
