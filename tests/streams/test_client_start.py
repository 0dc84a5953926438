"""A kafka-python client whose start is refused (its bootstrap to a port nobody listens on fails)
leaves no thread behind (streams/client_start.py): kafka-python 3's consumer and admin client
start their IO thread before the bootstrap and, unhelped, left it running for good."""

from __future__ import annotations

import threading

import pytest
from kafka import KafkaAdminClient
from kafka.errors import KafkaError

from faultlens.streams.broker import free_port
from faultlens.streams.client_start import start_client
from faultlens.streams.config import KafkaSettings
from faultlens.streams.kafka_client import KafkaPythonConsumer, open_producer

REFUSED_MS = 300  # the bootstrap's own deadline: how long a start may try a port nobody listens on


@pytest.fixture
def nobody() -> KafkaSettings:
    return KafkaSettings(bootstrap=f"127.0.0.1:{free_port()}", client_id="refused-start")


def _kafka_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("kafka-") or "refused-start" in t.name}


def _refused(start) -> set[str]:
    """The kafka threads left alive once ``start`` has raised (the close joins them: no wait)."""
    before = _kafka_threads()
    with pytest.raises(KafkaError):
        start()
    return {t.name for t in _kafka_threads() - before if t.is_alive()}


def test_a_consumer_refused_at_its_start_leaves_no_io_thread(nobody):
    kwargs = {**nobody.consumer_kwargs(None), "bootstrap_timeout_ms": REFUSED_MS}
    assert _refused(lambda: start_client(KafkaPythonConsumer, **kwargs)) == set()


def test_an_admin_client_refused_at_its_start_leaves_no_io_thread(nobody):
    kwargs = {**nobody.common_kwargs(), "bootstrap_timeout_ms": REFUSED_MS}
    assert _refused(lambda: start_client(KafkaAdminClient, **kwargs)) == set()


def test_a_producer_refused_at_its_start_leaves_no_thread(nobody):
    assert _refused(lambda: open_producer(nobody, lambda *a: None, bootstrap_timeout_ms=REFUSED_MS)) == set()


def test_a_client_that_starts_is_handed_back_with_its_own_factory_kept():
    """A caller's own kafka_client factory is the one used (the wrapper only keeps what it made)."""
    made = []

    class Client:
        DEFAULT_CONFIG = {"kafka_client": None}

        def __init__(self, **configs):
            self.net = configs["kafka_client"](x=1)

    def factory(**kwargs):
        made.append(kwargs)
        return object()

    client = start_client(Client, kafka_client=factory)
    assert made == [{"x": 1}] and client.net is not None
