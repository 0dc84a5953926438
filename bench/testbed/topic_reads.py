"""Reading what consumers wrote to a topic, for the broker tests and the benches: the records of one
job, decoded, other tests' garbage skipped (the session broker is shared), either as they stand now
(:func:`job_records`) or once a condition holds (:func:`wait_for_records`, which waits on progress).

A message is decoded only if it can be of the job: its bytes hold the job's name as a JSON string
(:func:`job_needle`). Decoding every message of a session broker's topic cost ~7.8 µs a message
(an 8-GPU sample), the look ~0.4 µs; telemetry topics hold every earlier test's records. The key
does not say: telemetry is keyed by node, and a fleet wave's diagnosis goes under each job of its
part (diagnosis/engine/fleet_waves.py) with its own job in the value, read as that job's.
"""

from __future__ import annotations

import re
import time

from faultlens.streams.config import KafkaSettings


def job_records(settings: KafkaSettings, topic: str, decoder, job: str | None = None, *,
                idle_s: float = 0.5, timeout_s: float = 120.0) -> list:
    """Every record of ``topic`` that ``decoder`` reads, of ``job`` when given. Records that do not
    decode are skipped: tests share the session broker, and some put garbage on a topic on purpose.

    The read ends at the end offsets it found when it began (streams/reader.py), so ``timeout_s`` is
    only a bound for a broker that does not answer: a 10 s cut on telemetry.train, which every
    trainer test fills, ended a read before the records a test wanted on a loaded CI machine."""
    from faultlens.streams.reader import read_topic

    needle = job_needle(job)
    read = (_of_job(decoder, m.value, job, needle)
            for m in read_topic(settings, topic, idle_s=idle_s, timeout_s=timeout_s))
    return [value for value in read if value is not None]


# A name every JSON writer writes as it is: nothing escaped (a quote, a backslash, a control
# character; non-ASCII under ensure_ascii; "/" for some writers).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.:@+=-]+")


def job_needle(job: str | None) -> bytes | None:
    """The bytes every message of ``job`` holds: its name as a JSON string; None (decode every
    message) for any job, or a name a writer might escape."""
    if job is None or not _PLAIN_NAME.fullmatch(job):
        return None
    return b'"' + job.encode() + b'"'


def _of_job(decoder, raw: bytes | None, job: str | None, needle: bytes | None):
    """``raw`` decoded if it is a record of ``job`` (of any job when None), else None; not decoded
    when it cannot be (``needle``, :func:`job_needle`)."""
    from faultlens.events.envelope import InvalidEvent

    if needle is not None and raw is not None and needle not in raw:
        return None
    try:
        value = decoder(raw)
    except InvalidEvent:
        return None
    return value if job is None or value.job == job else None


def wait_for_records(settings: KafkaSettings, topic: str, decoder, job: str | None, predicate, *,
                     timeout_s: float = 30.0, progress=None, limit_s: float = 1800.0) -> list:
    """The records of ``job`` on ``topic`` (as :func:`job_records` reads them) once
    ``predicate(records)`` holds: everything that was on the topic when the wait began, then what
    comes, each record read once. Without ``progress``, all of them read by ``timeout_s``; with it,
    all of them read once ``progress(records)`` stayed the same for ``timeout_s`` (the wait goes on
    while what it watches moves: tests/progress.py), or by ``limit_s`` in all.

    One reader for the whole wait. test_agent_e2e re-read the topic from its start every few
    seconds, each read cut off after 3 s: on a session broker whose telemetry.nccl other tests had
    filled, on a loaded machine, no read reached the end, and the test failed with "no
    nccl_timeout within 30 s" though the agent had sent it within a second (200k records and four
    CPU burners on 2 cores: a 3 s read got 66-107k of them; read once, the event came in 10 s)."""
    from kafka.structs import TopicPartition

    from faultlens.streams.kafka_client import open_consumer
    from faultlens.streams.reader_ends import short_of_end

    start = moved = time.monotonic()
    seen = progress(()) if progress is not None else None
    out: list = []
    needle = job_needle(job)
    consumer = open_consumer(settings, None)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        # What was there when the wait began is read before the predicate is asked: a test
        # judges the latest record it waited for, not an early one that happened to come first.
        first = consumer.beginning_offsets(parts)
        behind = {tp: end for tp, end in consumer.end_offsets(parts).items() if end > first.get(tp, 0)}
        while True:
            for tp, records in consumer.poll(timeout_ms=200).items():
                out += [v for r in records if (v := _of_job(decoder, r.value, job, needle)) is not None]
                # Past the listed end and the fetch's high watermark: the embedded broker lists
                # its last batch's start, which a poll may hand out only in part (reader_ends.py)
                if tp in behind and not short_of_end(consumer, tp, behind[tp]):
                    del behind[tp]
            if not behind and predicate(out):
                break
            now = time.monotonic()
            if progress is None:
                if now - start >= timeout_s:
                    break
                continue
            if (current := progress(out)) != seen:
                seen, moved = current, now
            if now - moved >= timeout_s or now - start >= limit_s:
                break
    finally:
        consumer.close()
    return out
