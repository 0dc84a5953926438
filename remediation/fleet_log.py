"""The fleet records on the compacted ``fleet`` topic, one message per machine (key: the machine).

Every remediation member reads the whole topic at start (so a restarted member, or one given
other jobs by a rebalance, knows every machine's past) and keeps reading its tail at each tick
(remediation.consumer), so a fault another member recorded, or a person's resume, reaches it within
a tick. A member publishes a machine's merged record whenever it adds to it; records are merged,
never replaced, so two members writing the same machine at once lose nothing once each has read
the other. `faultlens nodes list|show|resume` read and write the same topic.
"""

from __future__ import annotations

import logging
import time

from kafka import TopicPartition
from kafka.errors import KafkaError

from faultlens.events import topics
from faultlens.events.fleet_record import MachineRecord
from faultlens.streams.config import KafkaSettings
from faultlens.streams.kafka_client import open_consumer
from faultlens.streams.producer import Producer
from faultlens.streams.reader_ends import short_of_end

log = logging.getLogger(__name__)

REFRESH_S = 2.0  # the longest one tick's read of what others published may take


class FleetLog:
    def __init__(self, settings: KafkaSettings, topic: str = topics.FLEET, read_timeout_s: float = 60.0):
        self.settings = settings
        self.topic = topic
        self.read_timeout_s = read_timeout_s
        self.path = f"topic {topic}"
        self.errors: list[str] = []
        self._consumer = None
        self._producer: Producer | None = None

    def load(self) -> dict[str, MachineRecord]:
        """Every machine's record, read from the start to the end offsets of now."""
        records: dict[str, MachineRecord] = {}
        try:
            consumer = self._open()
            parts = consumer.assignment() or set()
            if parts:
                consumer.seek_to_beginning(*parts)
            self._read_to_end(consumer, records, self.read_timeout_s)
        except KafkaError as exc:
            self._report(f"fleet record {self.path} unreadable: {exc}; going on with no machine's past")
        return records

    def refresh(self, timeout_s: float = REFRESH_S) -> dict[str, MachineRecord]:
        """What was published since the last read (by any member, or by a person), up to the end
        offsets of now; nothing new costs one offsets request."""
        records: dict[str, MachineRecord] = {}
        if self._consumer is None:
            return records
        try:
            self._read_to_end(self._consumer, records, timeout_s)
        except KafkaError as exc:
            log.warning("fleet record %s: %s; read again at the next tick", self.path, exc)
        return records

    def save(self, records: dict[str, MachineRecord]) -> None:
        """Publish ``records``; raises OSError when the broker does not take them."""
        try:
            if self._producer is None:
                self._producer = Producer(self.settings)
            for node, record in records.items():
                self._producer.send(self.topic, node.encode(), record.encode())
            self._producer.flush(10.0)
        except (KafkaError, OSError) as exc:
            raise OSError(f"publishing {len(records)} fleet record(s): {exc}") from exc

    def close(self) -> None:
        for client in (self._producer, self._consumer):
            if client is not None:
                client.close()
        self._producer = self._consumer = None

    # ---------------------------------------------------------------------------------------------
    def _open(self):
        if self._consumer is None:
            consumer = open_consumer(self.settings, None)
            parts = [TopicPartition(self.topic, p) for p in sorted(consumer.partitions_for_topic(self.topic) or ())]
            consumer.assign(parts)
            self._consumer = consumer
        return self._consumer

    def _read_to_end(self, consumer, records: dict[str, MachineRecord], timeout_s: float) -> None:
        parts = list(consumer.assignment() or ())
        ends = {tp: end for tp, end in consumer.end_offsets(parts).items() if end}
        deadline = time.monotonic() + timeout_s
        while any(short_of_end(consumer, tp, end) for tp, end in ends.items()):
            if time.monotonic() >= deadline:
                log.warning("fleet record %s: not read to its end in %.0fs; the rest at the next read", self.path,
                            timeout_s)
                return
            self._take(consumer.poll(timeout_ms=100), records)

    def _take(self, polled, records: dict[str, MachineRecord]) -> int:
        n = 0
        for batch in polled.values():
            for m in batch:
                n += 1
                if m.key is None or m.value is None:
                    continue
                node = m.key.decode("utf-8", "replace")
                try:
                    record = MachineRecord.decode(m.value)
                except ValueError as exc:  # InvalidEvent is a ValueError
                    self._report(f"fleet record {self.path} offset {m.offset} ({node}): {exc}; skipped")
                    continue
                if record.node != node:
                    self._report(f"fleet record {self.path} offset {m.offset}: key {node!r} holds {record.node!r}; skipped")
                    continue
                if node in records:
                    records[node].merge(record)
                else:
                    records[node] = record
        return n

    def _report(self, message: str) -> None:
        self.errors.append(message)
        log.error("%s", message)


def read_fleet(settings: KafkaSettings, topic: str = topics.FLEET) -> tuple[dict[str, MachineRecord], list[str]]:
    """Every machine's record and what could not be read (`faultlens nodes list|show`)."""
    log_ = FleetLog(settings, topic, read_timeout_s=30.0)
    try:
        return log_.load(), log_.errors
    finally:
        log_.close()
