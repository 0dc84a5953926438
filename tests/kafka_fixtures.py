"""A real embedded broker (Tansu) for integration tests: one per test session, topics created."""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
from pathlib import Path

import pytest

from faultlens.streams.admin import ensure_topics
from faultlens.streams.broker import EmbeddedBroker
from faultlens.streams.config import KafkaSettings

_groups = itertools.count()


@pytest.fixture(scope="session")
def broker(tmp_path_factory) -> EmbeddedBroker:
    """The session's broker; FAULTLENS_TEST_BOOTSTRAP points the tests at a real cluster instead."""
    external = os.environ.get("FAULTLENS_TEST_BOOTSTRAP")
    if external:
        class _External:
            bootstrap = external
        yield _External()  # type: ignore[misc]
        return
    log = Path(tmp_path_factory.mktemp("broker")) / "tansu.log"
    with EmbeddedBroker(log_path=log) as b:
        ensure_topics(KafkaSettings(bootstrap=b.bootstrap))
        yield b


@pytest.fixture
def kafka_settings(broker) -> KafkaSettings:
    return KafkaSettings(bootstrap=broker.bootstrap)


@pytest.fixture
def own_kafka_settings(tmp_path) -> KafkaSettings:
    """A broker of the test's own, empty: for tests whose consumers must see only that test's
    topics from the start (the session broker holds every earlier test's messages)."""
    external = os.environ.get("FAULTLENS_TEST_BOOTSTRAP")
    if external:
        pytest.skip("needs a broker of its own; FAULTLENS_TEST_BOOTSTRAP points at a shared cluster")
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as b:
        settings = KafkaSettings(bootstrap=b.bootstrap)
        ensure_topics(settings)
        yield settings


@pytest.fixture
def group_name(request) -> str:
    """A consumer group no other test uses (Tansu keeps offsets for the whole session)."""
    return f"test-{request.node.name[:40]}-{os.getpid()}-{next(_groups)}"


@pytest.fixture
def fresh_topic(kafka_settings, request):
    """A topic of its own for a test that must not see other tests' messages."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    def make(partitions: int = 3) -> str:
        name = f"t-{request.node.name[:40]}-{next(_groups)}".replace("[", "-").replace("]", "")
        admin = KafkaAdminClient(**kafka_settings.common_kwargs())
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])
        finally:
            admin.close()
        return name

    return make


def job_records(settings: KafkaSettings, topic: str, decoder, job: str | None = None, *,
                idle_s: float = 0.5, timeout_s: float = 120.0) -> list:
    """Every record of ``topic`` that ``decoder`` reads, of ``job`` when given. Records that do not
    decode are skipped: tests share the session broker, and some put garbage on a topic on purpose.

    The read ends at the end offsets it found when it began (streams/reader.py), so ``timeout_s`` is
    only a bound for a broker that does not answer: a 10 s cut on telemetry.train, which every
    trainer test fills, ended a read before the records a test wanted on a loaded CI machine."""
    from faultlens.streams.reader import read_topic

    read = (_of_job(decoder, m.value, job) for m in read_topic(settings, topic, idle_s=idle_s, timeout_s=timeout_s))
    return [value for value in read if value is not None]


def _of_job(decoder, raw: bytes, job: str | None):
    """``raw`` decoded if it is a record of ``job`` (of any job when None), else None."""
    from faultlens.events.envelope import InvalidEvent

    try:
        value = decoder(raw)
    except InvalidEvent:
        return None
    return value if job is None or value.job == job else None


@pytest.fixture(params=["kafka-python", "confluent"])
def client_settings(request, kafka_settings) -> KafkaSettings:
    """The session broker's settings with each Kafka client in turn (streams/kafka_client.py):
    a test that takes this runs once with kafka-python and once with confluent-kafka."""
    from faultlens.streams.kafka_client import confluent_available

    if request.param == "confluent" and not confluent_available():
        pytest.skip("confluent-kafka is not installed (pip install 'faultlens[fast]')")
    return dataclasses.replace(kafka_settings, client=request.param)


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

    start = moved = time.monotonic()
    seen = progress(()) if progress is not None else None
    out: list = []
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
                out += [v for r in records if (v := _of_job(decoder, r.value, job)) is not None]
                if tp in behind and records[-1].offset + 1 >= behind[tp]:
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
