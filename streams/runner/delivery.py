"""The runner's end of each batch: the handler's outputs sent and, when a commit is due
(streams.runner.commit), awaited and the offsets handed on committed; outputs not acknowledged
make every partition be read again from its last commit (at-least-once).

An output refused for good (a diagnosis, command or dead letter over the client's or the broker's
size limit, an invalid topic, no authorization: streams.producer.rejection_kind) is no broker
lost: read again it would be made and refused again, a consumer stuck in a loop. When every
failure of a flush is such a refusal, the other outputs were acknowledged; each refused one goes
to the dead-letter topic in a small form (:func:`refused_output`), counted in
``refused_outputs``, said in one WARNING per kind, and the offsets commit. A dead letter refused
in turn is logged and let go.

:class:`~streams.runner.loop.GroupRunner` is a :class:`Delivery`: the loop calls these once per
batch and at the end of a run.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Collection, Mapping

import orjson
from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import TopicPartition

from faultlens.streams.kafka_client import Consumer
from faultlens.streams.producer import DeliveryError, Outgoing, Producer, RefusalVoice, Rejected
from faultlens.streams.runner.commit import CommitSchedule
from faultlens.streams.runner.event_time import EventTimeOrder
from faultlens.streams.runner.rebalance import RebalanceBook
from faultlens.streams.runner.types import DEAD_LETTER_TOPIC, RunnerStats

log = logging.getLogger(__name__)

# A refused output's dead letter: its first bytes and its top-level fields, each cut short, so
# that it fits where the output did not.
REFUSED_HEAD_BYTES = 4096
REFUSED_FIELDS = 32
REFUSED_FIELD_CHARS = 256
# Said per process: every runner's refusals share the log.
_REFUSALS = RefusalVoice(log, "runner", "dead-lettered in a short form, the rest goes on")


def refused_output(rejected: Rejected, group: str | None) -> Outgoing:
    """The dead letter of an output refused for good: where it was going, why it was refused, its
    size, its top-level scalar fields (a diagnosis's job, class, nodes' count...) and its first
    bytes, all cut short."""
    value = rejected.value
    fields: dict[str, Any] = {}
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        for name, v in parsed.items():
            if len(fields) >= REFUSED_FIELDS:
                break
            if isinstance(v, str):
                fields[str(name)[:REFUSED_FIELD_CHARS]] = v[:REFUSED_FIELD_CHARS]
            elif v is None or isinstance(v, (bool, int, float)):
                fields[str(name)[:REFUSED_FIELD_CHARS]] = v
    body = {
        "reason": f"output refused for good: {rejected.kind}",
        "topic": rejected.topic,
        "size": len(value),
        "group": group,
        "ts": time.time(),
        "fields": fields,
        "value": value[:REFUSED_HEAD_BYTES].decode("utf-8", errors="replace"),
        "truncated": len(value) > REFUSED_HEAD_BYTES,
    }
    node = fields.get("node")
    return Outgoing(DEAD_LETTER_TOPIC, node.encode() if isinstance(node, str) else None, orjson.dumps(body))


class Delivery:
    """Sending and committing, over the parts the runner holds."""

    stats: RunnerStats
    producer: Producer
    commits: CommitSchedule
    order: EventTimeOrder | None
    rebalance: RebalanceBook
    group: str

    def _deliver_and_commit(self, consumer: Consumer, polled: Mapping, out: list[Outgoing]) -> bool:
        """Send ``out``; when a commit is due (streams.runner.commit), wait until everything sent is
        acknowledged and commit what was handed on. False when outputs were not acknowledged:
        every partition is then read again from its last commit."""
        try:
            self.stats.outputs += self.producer.send_all(out)
            if not self.commits.sent(bool(polled), time.monotonic()):
                return True
            self._flush_outputs()
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

    def _flush_outputs(self) -> None:
        """Wait until every output sent is acknowledged; those refused for good are dead-lettered
        instead. Raises what is not acknowledged otherwise."""
        try:
            self.producer.flush()
        except DeliveryError as exc:
            if not exc.only_rejected:
                raise
            self._dead_letter_refused(exc.rejected)

    def _dead_letter_refused(self, rejected: list[Rejected]) -> None:
        self.stats.refused_outputs += len(rejected)
        _REFUSALS.say(rejected, time.monotonic())
        self.producer.send_all(refused_output(r, self.group) for r in rejected)
        try:
            self.producer.flush()
        except DeliveryError as exc:
            if not exc.only_rejected:
                raise  # not acknowledged: read again, refused again, dead-lettered again
            # Never a loop: what cannot even be said short is let go, said here.
            log.error("the dead letters of %d refused output(s) were refused too (%s); going on",
                      len(exc.rejected), exc)
            self.stats.dead_letters += len(rejected) - len(exc.rejected)
            return
        self.stats.dead_letters += len(rejected)

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
