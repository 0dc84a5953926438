"""What a bounded run does when its group's join does not complete (the runner's base beside
:class:`~streams.runner.delivery.Delivery`).

A member without an assignment never idle-stops while its group's committed offsets are behind
the end of its input: once its join is stuck (streams.idle_stop.JoinWait) it stops only where the
group committed everything, and otherwise joins again as a fresh member, a bounded number of
times (session 25: a member stopped past its session came back kicked, the others left its join
mid-way, Tansu never completed it, and the member gave up with 5,836 records of 18 partitions
unread)."""

from __future__ import annotations

import logging
from typing import Collection

from kafka.structs import TopicPartition

from faultlens.streams.kafka_client import Consumer

log = logging.getLogger(__name__)

# How long a bounded run's question "has the group committed its input to the end?" may take.
GROUP_DONE_TIMEOUT_MS = 5000


class JoinRecovery:
    """Leaving a stuck join: stop at the input's end, or join again, or give up and say so."""

    topics: Collection[str]
    rejoins: int = 0

    def stuck_join(self, consumer: Consumer, grace_s: float, max_rejoins: int) -> tuple[bool | None, Consumer]:
        """After a join stuck past ``grace_s``: ``(True, c)`` stop, the input is at its end;
        ``(False, c)`` stop with it unread (no ``done`` in the last word); ``(None, c)`` go on
        polling with ``c``, a fresh member."""
        if self._group_done(consumer):
            log.info("no assignment after %.0fs in a join, and the group committed its input "
                     "to the end: stopping", grace_s)
            return True, consumer
        if self.rejoins >= max_rejoins:
            log.error("joined the group %d times without an assignment, its input not "
                      "committed to the end: stopping with it unread", self.rejoins + 1)
            return False, consumer
        self.rejoins += 1
        log.warning("no assignment after %.0fs in a join and the group's input is not "
                    "committed to the end: joining again as a fresh member (%d of %d)",
                    grace_s, self.rejoins, max_rejoins)
        return None, self._rejoin(consumer)

    def _rejoin(self, consumer: Consumer) -> Consumer:
        """The runner's: close ``consumer`` and subscribe a fresh member (GroupRunner._rejoin)."""
        raise NotImplementedError

    def _group_done(self, consumer: Consumer) -> bool:
        """Whether the group committed every partition of this member's topics to its end (then a
        member without an assignment has nothing left to read); False when the broker cannot say."""
        try:
            parts = [TopicPartition(t, p) for t in self.topics for p in sorted(consumer.partitions_for_topic(t) or ())]
            if not parts:
                return False
            ends = consumer.end_offsets(parts)
            for tp in parts:
                try:
                    committed = consumer.committed(tp, timeout_ms=GROUP_DONE_TIMEOUT_MS)
                except TypeError:  # a client whose committed() takes no timeout (confluent)
                    committed = consumer.committed(tp)
                if (committed if committed is not None else 0) < ends.get(tp, 0):
                    return False
            return True
        except Exception as exc:  # noqa: BLE001 - not knowing is not done
            log.info("cannot tell whether the group committed its input to the end (%s)", exc)
            return False
