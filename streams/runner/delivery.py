"""The runner's end of each batch: the handler's outputs sent and, when a commit is due
(streams.runner.commit), awaited and the offsets handed on committed; outputs not acknowledged
make every partition be read again from its last commit (at-least-once).

:class:`~streams.runner.loop.GroupRunner` is a :class:`Delivery`: the loop calls these once per
batch and at the end of a run.
"""

from __future__ import annotations

import logging
import time
from typing import Collection, Mapping

from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import TopicPartition

from faultlens.streams.kafka_client import Consumer
from faultlens.streams.producer import DeliveryError, Outgoing, Producer
from faultlens.streams.runner.commit import CommitSchedule
from faultlens.streams.runner.event_time import EventTimeOrder
from faultlens.streams.runner.rebalance import RebalanceBook
from faultlens.streams.runner.types import RunnerStats

log = logging.getLogger(__name__)


class Delivery:
    """Sending and committing, over the parts the runner holds."""

    stats: RunnerStats
    producer: Producer
    commits: CommitSchedule
    order: EventTimeOrder | None
    rebalance: RebalanceBook

    def _deliver_and_commit(self, consumer: Consumer, polled: Mapping, out: list[Outgoing]) -> bool:
        """Send ``out``; when a commit is due (streams.runner.commit), wait until everything sent is
        acknowledged and commit what was handed on. False when outputs were not acknowledged:
        every partition is then read again from its last commit."""
        try:
            self.stats.outputs += self.producer.send_all(out)
            if not self.commits.sent(bool(polled), time.monotonic()):
                return True
            self.producer.flush()
        except (DeliveryError, KafkaError) as exc:
            # Outputs not acknowledged: commit nothing; what was read since the last commit comes
            # again (the handler recognises what it already saw by event id).
            log.error("could not deliver outputs (%s); re-reading from the last commit", exc)
            self.stats.redeliveries += 1
            self.commits.failed()
            assigned = list(consumer.assignment())
            if self.order is not None:
                self.order.redeliver(assigned)
            for tp in assigned:
                committed = consumer.committed(tp)
                consumer.seek(tp, committed if committed is not None else 0)
            time.sleep(1.0)
            return False
        unsettled = self.commits.settled(time.monotonic())
        if self.order is not None:
            self._commit_handed_on(consumer, consumer.assignment())
        elif unsettled:
            self._commit(consumer, None)
        return True

    def _commit_handed_on(self, consumer: Consumer | None, partitions: Collection[TopicPartition]) -> None:
        """Commit, per partition, up to the first record still held (or the position)."""
        if consumer is None or self.order is None:
            return
        offsets = self.rebalance.above_floor(self.order.handed_on(consumer, partitions, self.rebalance.resume_at))
        if offsets:
            self._commit(consumer, offsets)

    def _commit(self, consumer: Consumer, offsets: Mapping | None) -> None:
        try:
            if offsets is None:
                consumer.commit()
            else:
                consumer.commit(offsets)
            self.stats.commits += 1
        except (CommitFailedError, KafkaError) as exc:
            # A rebalance took the partitions away: the new owner re-reads from the last commit.
            log.warning("commit failed (%s); those records will be delivered again", exc)
