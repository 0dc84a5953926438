"""A bounded run's idle stop after a stall of the process itself (a starved or descheduled member,
SIGSTOP): the stall is not quiet. In F1's reproduction (session 25) a member stopped for 20 s came
back to a poll that returned nothing, took the stop for 23 s of quiet with its lag, as its last
fetch had reported it, at 0, and stopped at once, the records written meanwhile unread.
Kafka-free: a consumer stand-in whose one poll "stalls" (the process not running) for longer than
the idle stop, after which the fetch brings the records written meanwhile."""

from __future__ import annotations

import time
from types import SimpleNamespace

from kafka.structs import TopicPartition

from faultlens.streams.config import KafkaSettings
from faultlens.streams.idle_stop import STALL_S
from faultlens.streams.runner.loop import GroupRunner
from faultlens.streams.runner.rebalance import RebalanceListener

TP = TopicPartition("t", 0)


class _StallingConsumer:
    """Records 0-2 first; then empty polls; one poll stalls (the process stopped); the records
    written meanwhile come at the second poll after it. Its highwater is what its last fetch said."""

    def __init__(self, stall_at: int, stall_s: float):
        self.stall_at, self.stall_s = stall_at, stall_s
        self.polls = 0
        self._position = 0
        self._high = 3
        self.listener = None

    def subscribe(self, topics, listener=None):
        self.listener = listener

    def assignment(self):
        return {TP}

    def poll(self, timeout_ms):
        self.polls += 1
        if self.polls == 1:
            self.listener.on_partitions_assigned([TP])
            return self._batch(0, 3)
        if self.polls == self.stall_at:
            time.sleep(self.stall_s)  # the process did not run: the poll's timeout long past
            return {}
        if self.polls == self.stall_at + 2:
            self._high = 6
            return self._batch(3, 6)
        time.sleep(timeout_ms / 1000)
        return {}

    def _batch(self, start, stop):
        self._position = stop
        return {TP: [SimpleNamespace(offset=o, key=b"k", value=b"v%d" % o, timestamp=0) for o in range(start, stop)]}

    def highwater(self, tp):
        return self._high

    def position(self, tp):
        return self._position

    def commit(self, offsets=None):
        pass

    def close(self, autocommit=False):
        pass


class _NoProducer:
    def send_all(self, out):
        return 0

    def flush(self, timeout=None):
        pass

    def close(self):
        pass


def test_a_stall_of_the_process_is_not_quiet_and_the_records_after_it_are_read():
    seen: list[int] = []
    runner = GroupRunner(KafkaSettings(bootstrap="unused:9092"), "g", ["t"],
                         lambda records: seen.extend(r.offset for r in records) or [],
                         decoders=lambda raw: raw, producer=_NoProducer(), poll_timeout_ms=50)
    consumer = _StallingConsumer(stall_at=8, stall_s=STALL_S + 0.5)  # 5 quiet polls first: enough of them
    runner._consumer = lambda: consumer.subscribe(["t"], RebalanceListener(runner)) or consumer
    stats = runner.run(idle_stop_s=1.0, handle_signals=False)
    assert seen == [0, 1, 2, 3, 4, 5]
    assert stats.records_in == 6
