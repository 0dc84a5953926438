"""One active member among replicas: a lease held through a one-partition topic's consumer group.

`faultlens diagnose --stage all` judges a job from all of its telemetry, so a group of it can run
only one member: three replicas splitting the telemetry partitions each saw a third of a job's
machines (a switch wave of 8 went unseen, a member evicted a healthy machine on its one flap).
Replicas still make sense as hot standbys: each joins the group ``<group>.lease`` on the topic
``<group>.lease`` (one partition, no records); the member the broker assigns that partition is
the active one and runs the pipeline, the others consume nothing until a rebalance hands them
the partition: the active member left (its consumer closed on exit) or died (its session timed
out, ``session_timeout_ms``).

Kafka assigns partitions, not time-bound locks: an active member cut off from the broker learns
it lost the partition only when it reaches the broker again, so for up to a session timeout two
members can act. Where that matters, the partition's loss stops the pipeline at once
(:meth:`Lease.watch`) and the sticky assignor keeps the lease where it is when a standby joins
(range or round-robin would hand it to whichever member id sorts first).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.errors import TopicAlreadyExistsError
from kafka.structs import TopicPartition

from faultlens.streams.client_start import start_client
from faultlens.streams.config import KafkaSettings

log = logging.getLogger(__name__)

POLL_MS = 500


def lease_name(group: str) -> str:
    """The lease topic and its consumer group, both named after the group the lease guards."""
    return f"{group}.lease"


class _Listener(ConsumerRebalanceListener):
    """Whether the last assignment (not a revocation: an eager rebalance revokes everything, and
    the partition may come straight back) gave this member the lease."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease

    def on_partitions_revoked(self, revoked) -> None:
        pass

    def on_partitions_assigned(self, assigned) -> None:
        self.lease._assigned(self.lease.partition in set(assigned))


class Lease:
    """The lease of ``group``: :meth:`acquire` waits for it, :meth:`watch` keeps it (and says when
    it is lost), :meth:`release` hands it on at once. kafka-python is used whatever ``--client``
    says: the lease reads nothing, and its sticky assignor is what keeps it in place."""

    def __init__(self, settings: KafkaSettings, group: str) -> None:
        self.topic = lease_name(group)
        self.partition = TopicPartition(self.topic, 0)
        self.settings = settings
        self.held = False
        self.joined = False  # given a first assignment, with the lease or without
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._on_lost: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None
        _ensure_topic(settings, self.topic)
        kwargs = {**settings.consumer_kwargs(self.topic), "partition_assignment_strategy": (StickyPartitionAssignor,)}
        self._consumer = start_client(KafkaConsumer, **kwargs)
        self._consumer.subscribe([self.topic], listener=_Listener(self))

    def _assigned(self, mine: bool) -> None:
        if self.held and not mine:
            log.error("lost the lease %s to another member: stopping so that only one member acts", self.topic)
            self.lost.set()
            if self._on_lost is not None:
                self._on_lost()
        self.held = mine
        self.joined = True

    def join(self, stop: threading.Event | None = None) -> bool:
        """Poll until the group's first assignment (or ``stop``); whether it gave this member the lease."""
        while not self.joined and not (stop is not None and stop.is_set()):
            self._consumer.poll(timeout_ms=POLL_MS)
        return self.held

    def acquire(self, wait_s: float | None = None, stop: threading.Event | None = None) -> bool:
        """Poll until this member holds the lease (True), ``stop`` is set or ``wait_s`` passes (False)."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while not self.held:
            if (stop is not None and stop.is_set()) or (deadline is not None and time.monotonic() >= deadline):
                return False
            self._consumer.poll(timeout_ms=POLL_MS)
        return True

    def watch(self, on_lost: Callable[[], None]) -> None:
        """Keep the lease on a thread of its own (its polls keep the member in its group while the
        pipeline runs); ``on_lost`` is called there if a rebalance gives it to another member."""
        self._on_lost = on_lost
        self._thread = threading.Thread(target=self._keep, name=f"lease-{self.topic}", daemon=True)
        self._thread.start()

    def _keep(self) -> None:
        while not self._stop.is_set() and not self.lost.is_set():
            self._consumer.poll(timeout_ms=POLL_MS)

    def release(self) -> None:
        """Leave the lease's group: a standby is assigned the partition without waiting for a timeout."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=POLL_MS / 1000 * 4 + 5)
        self._consumer.close()


def await_lease(lease: Lease, wait_s: float | None, stop: threading.Event) -> bool:
    """Stand by until this member holds the lease (`faultlens diagnose --stage all`, `faultlens up`);
    False once ``stop`` is set or ``wait_s`` after joining."""
    held = lease.join(stop)
    if not held and not stop.is_set():
        log.warning("standing by: another member of the group holds %s (one active stage-all member per "
                    "group); taking over when it leaves", lease.topic)
        held = lease.acquire(wait_s, stop)
    if held:
        log.warning("holding %s: this member runs the pipeline", lease.topic)
    return held


def _ensure_topic(settings: KafkaSettings, topic: str) -> None:
    admin = start_client(KafkaAdminClient, **settings.common_kwargs(), request_timeout_ms=15000)
    try:
        if topic not in set(admin.list_topics()):
            admin.create_topics([NewTopic(topic, 1, settings.replication_factor)])
    except TopicAlreadyExistsError:
        pass  # another replica created it first
    finally:
        admin.close()
