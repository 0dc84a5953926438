"""One way for every command to reach Kafka: settings from flags/env/config, a bootstrap address
(given, or the embedded broker registered on this machine; `up` and `demo` start and register one
when there is none), and the topics it needs."""

from __future__ import annotations

import argparse
import contextlib
from typing import Iterable, Iterator

from faultlens.streams.admin import ensure_topics
from faultlens.streams.broker import resolve_bootstrap
from faultlens.streams.config import KafkaSettings


@contextlib.contextmanager
def connected(args: argparse.Namespace, topics: Iterable[str] | None = None, *,
              create_topics: bool = True, start_broker: bool = False) -> Iterator[KafkaSettings]:
    """Settings with a resolved bootstrap; a broker started here stops when the block ends.

    The bootstrap comes from ``--bootstrap``, then ``FAULTLENS_BOOTSTRAP``, then the config file,
    and only then from the embedded broker, so a deployment's environment is never overridden.
    Raises ValueError (bad settings) or streams.broker.BrokerError (no broker, or none could be started).
    """
    settings = KafkaSettings.from_args(args)
    settings.bootstrap, owned = resolve_bootstrap(settings.bootstrap, start=start_broker)
    try:
        if create_topics:
            ensure_topics(settings, topics)
        yield settings
    finally:
        if owned is not None:
            owned.stop()
