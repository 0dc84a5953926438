"""A partition whose fetch came but waits unparsed in kafka-python's queue is not caught up (T13).

kafka-python sets a partition's ``highwater`` when it parses a fetch, which it does only when that
partition's records are next to be handed out: in a large backlog a fetch can wait in the queue
behind other partitions', the high watermark still the previous fetch's, the position at it, and
the partition read as caught up with a batch unread. Stand-ins with kafka-python's own fetcher
fields (a CompletedFetch's ``topic_partition`` and ``partition_data.high_watermark``)."""

from __future__ import annotations

import collections
import time
from types import SimpleNamespace

from kafka import TopicPartition
from kafka.consumer.fetcher import CompletedFetch

from faultlens.streams.reader_ends import fetched_end, queued_highwater
from faultlens.streams.runner.event_time import EventTimeOrder

TP, OTHER = TopicPartition("telemetry.gpu", 0), TopicPartition("telemetry.gpu", 1)


def _fetch(tp: TopicPartition, high: int) -> CompletedFetch:
    return CompletedFetch(tp, 0, 11, SimpleNamespace(high_watermark=high), None)


class _Consumer:
    """kafka-python's consumer as fetched_end reads it: parsed high watermark, position, queued fetches."""

    def __init__(self, parsed: int | None, position: int, queued=(), parked=None) -> None:
        self._parsed, self._position = parsed, position
        self._fetcher = SimpleNamespace(_completed_fetches=collections.deque(queued), _paused_completed_fetches=parked or {})

    def highwater(self, tp):
        return self._parsed

    def position(self, tp):
        return self._position

    def assignment(self):
        return {TP}


def test_a_queued_fetch_s_high_watermark_counts():
    consumer = _Consumer(parsed=500, position=500, queued=[_fetch(OTHER, 9000), _fetch(TP, 2500)])
    assert fetched_end(consumer, TP) == 2500
    assert queued_highwater(consumer._fetcher, OTHER) == 9000
    parked = _Consumer(parsed=500, position=500, parked={TP: _fetch(TP, 700)})
    assert fetched_end(parked, TP) == 700


def test_nothing_queued_or_an_empty_fetch_leaves_the_parsed_one():
    assert fetched_end(_Consumer(parsed=500, position=500), TP) == 500
    assert fetched_end(_Consumer(parsed=500, position=500, queued=[_fetch(TP, 500)]), TP) == 500  # a quiet one
    assert fetched_end(_Consumer(parsed=None, position=0, queued=[_fetch(TP, 40)]), TP) == 40  # its first fetch
    assert queued_highwater(None, TP) is None  # a client that keeps no such queue


def test_the_event_time_order_does_not_take_it_for_caught_up():
    order = object.__new__(EventTimeOrder)
    now = time.monotonic()
    assert order.partition_caught_up(_Consumer(parsed=500, position=500), TP, now)
    assert not order.partition_caught_up(_Consumer(parsed=500, position=500, queued=[_fetch(TP, 2500)]), TP, now)
