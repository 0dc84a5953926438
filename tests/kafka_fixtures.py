"""A real embedded broker (Tansu) for integration tests: one per test session, topics created."""

from __future__ import annotations

import dataclasses
import itertools
import os
from pathlib import Path

import pytest

# The topic reads the tests and the benches share (re-exported: tests import them from here).
from bench.testbed.topic_reads import job_records, wait_for_records  # noqa: F401
from faultlens.streams.admin import ensure_topics
from faultlens.streams.broker import EmbeddedBroker
from faultlens.streams.config import KafkaSettings
from tests.leak_check import SESSION_CHILDREN

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
        if b.proc is not None:
            SESSION_CHILDREN.add(b.proc.pid)
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


@pytest.fixture(params=["kafka-python", "confluent"])
def client_settings(request, kafka_settings) -> KafkaSettings:
    """The session broker's settings with each Kafka client in turn (streams/kafka_client.py):
    a test that takes this runs once with kafka-python and once with confluent-kafka."""
    from faultlens.streams.kafka_client import confluent_available

    if request.param == "confluent" and not confluent_available():
        pytest.skip("confluent-kafka is not installed (pip install 'faultlens[fast]')")
    return dataclasses.replace(kafka_settings, client=request.param)
