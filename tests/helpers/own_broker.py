"""A broker of the test's own, for tests that kill it (SIGKILL) and start it again on its address:
the session's broker (tests/kafka_fixtures.py) serves every other test and must not be killed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from faultlens.streams.admin import ensure_topics
from faultlens.streams.broker import EmbeddedBroker
from faultlens.streams.config import KafkaSettings


@contextmanager
def own_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A started broker with faultlens's topics, stopped at the end (whatever the test left of it);
    the test is skipped where FAULTLENS_TEST_BOOTSTRAP points the tests at a shared cluster."""
    if os.environ.get("FAULTLENS_TEST_BOOTSTRAP"):
        pytest.skip("kills its broker: needs one of its own, not the shared cluster FAULTLENS_TEST_BOOTSTRAP names")
    b = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    ensure_topics(KafkaSettings(bootstrap=b.bootstrap))
    try:
        yield b
    finally:
        b.stop()
