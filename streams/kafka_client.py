"""Two Kafka clients behind one interface: kafka-python (the default) and confluent-kafka (librdkafka,
the fast path; ``pip install 'faultlens[fast]'``). ``--client`` / ``FAULTLENS_CLIENT`` picks one.

The interface is the part of kafka-python's ``KafkaConsumer`` the runner, the reader and the
benches use (so the kafka-python backend is ``KafkaConsumer`` itself): ``subscribe`` with a
rebalance listener, ``assign``, ``poll`` returning ``{TopicPartition: [message, ...]}``, ``commit``
of explicit offsets, ``committed``, ``position``, ``highwater``, ``pause``/``resume``, ``seek``,
``offsets_for_times``, ``beginning_offsets``, ``close``. Partitions are kafka-python
``TopicPartition``s, messages carry ``topic, partition, offset, key, value, timestamp``, and every
client error is a ``kafka.errors.KafkaError`` (``CommitFailedError`` when a rebalance took the
partitions), so the callers handle both clients alike.

Rebalance listeners must not block on the broker with either client: kafka-python 3 calls them
from its coordinator, and the runner keeps them to bookkeeping (streams/runner/loop.py).
"""

from __future__ import annotations

from kafka import KafkaConsumer

from faultlens.streams.client_start import start_client
from faultlens.streams.config import CLIENTS, KafkaSettings

# The adapters live beside this module (one job each); callers import their names from here.
from faultlens.streams.confluent_config import confluent_available, confluent_config  # noqa: F401
from faultlens.streams.confluent_consumer import ConfluentConsumer, Message
from faultlens.streams.kafka_close_race import quiet_close_race
from faultlens.streams.producer_backends import ConfluentProducer, KafkaPythonProducer, OnFailure

__all__ = ["CLIENTS", "Consumer", "Message", "open_consumer", "open_producer", "confluent_available"]
quiet_close_race()  # kafka-python's close races its own IO thread (see that module)


# --- consumers --------------------------------------------------------------------------------
class KafkaPythonConsumer(KafkaConsumer):
    """kafka-python's consumer, with resume mended for kafka-python 3.

    kafka-python 3 keeps the records it had fetched for a partition that gets paused (KAFKA-7548)
    and hands them back after ``resume``, but only at a poll that finds its in-line slot empty
    (None); a slot holding an already drained batch is not None, so the kept records are never
    handed back, and the partition, counted as still buffered, is never fetched again. The
    event-time runner pauses the partitions that run ahead and resumes them when the others catch
    up: on 3.0.12 that stalled the node stage for good (0 records for as long as it ran). Before
    each poll a drained slot is emptied while resumed records wait, as the client itself does
    when its next fetch arrives; versions that keep no such records are left alone."""

    def poll(self, *args, **kwargs):
        fetcher = getattr(self, "_fetcher", None)
        parked = getattr(fetcher, "_paused_partition_records", None)
        if parked:
            slot = fetcher._next_partition_records
            if slot is not None and not slot and any(not self._subscription.is_paused(tp) for tp in parked):
                fetcher._next_partition_records = None
        return super().poll(*args, **kwargs)

    def subscribe(self, topics=(), pattern=None, listener=None):
        """kafka-python's subscribe, with a changed subscription's rejoin mended for 3.0.12.

        A changed subscription makes the member rejoin because it differs from the one it joined
        with, but the JoinGroup request records the new one as joined: once that request outlasts
        the poll that sent it (Tansu holds a join 3 s), the next polls see nothing to rejoin for,
        never wait on the join again, and the assignment that comes back is never applied. The
        member sat without partitions for good (test_runner_pause_rebalance[kafka-python] skipped
        as "a rebalance's limbo" in 5 of 6 runs). Asked for explicitly, the rejoin is awaited
        until its assignment is applied."""
        super().subscribe(topics=topics, pattern=pattern, listener=listener)
        request_rejoin = getattr(getattr(self, "_coordinator", None), "request_rejoin", None)
        if callable(request_rejoin):
            request_rejoin()

    def position(self, partition, timeout_ms=None):
        """kafka-python's position, without its refresh when the partition's position is known.

        The event-time runner asks every assigned partition's position once a loop (is it read to
        its end?). kafka-python 3 runs its committed-offset refresh, reset and leader-epoch
        validation steps first on every call, each under a lock: 10 % of the `diagnose` process's
        busy time on a 192k-message backlog (bench/bench_floor.py, py-spy), for the offset its
        state already holds. Where a position is held and no reset or validation is pending, that
        offset is the answer those steps would have led to; anything else goes the long way."""
        subscription = getattr(self, "_subscription", None)
        state = getattr(subscription, "assignment", {}).get(partition) if subscription is not None else None
        if (state is not None and getattr(state, "has_valid_position", False) is True
                and getattr(state, "reset_strategy", True) is None
                and getattr(state, "_awaiting_validation", True) is False):
            return state.position.offset
        return super().position(partition, timeout_ms=timeout_ms)


def open_consumer(settings: KafkaSettings, group: str | None, *, max_records: int = 2000,
                  fetch_max_wait_ms: int | None = None):
    """A consumer of ``settings.client`` (not subscribed): ``group`` None reads without a group;
    ``fetch_max_wait_ms`` shortens the broker's wait for data (a command listener)."""
    if settings.client == "confluent":
        return ConfluentConsumer(settings, group, max_records, fetch_max_wait_ms)
    kwargs = {**settings.consumer_kwargs(group), "max_poll_records": max_records}
    if fetch_max_wait_ms is not None:
        kwargs["fetch_max_wait_ms"] = fetch_max_wait_ms
    if group is None:
        kwargs["enable_auto_commit"] = False
    return start_client(KafkaPythonConsumer, **kwargs)  # a failed bootstrap leaves no IO thread


# --- producers --------------------------------------------------------------------------------
def open_producer(settings: KafkaSettings, on_failure: OnFailure, **overrides):
    """A producer of ``settings.client`` with one interface: ``send``, ``send_many``, ``poll``,
    ``partitions``, ``flush``, ``close``."""
    if settings.client == "confluent":
        return ConfluentProducer(settings, on_failure, **overrides)
    return KafkaPythonProducer(settings, on_failure, **overrides)


# What open_consumer returns: either client, one interface (the module doc).
Consumer = KafkaConsumer | ConfluentConsumer  # KafkaPythonConsumer is a KafkaConsumer
