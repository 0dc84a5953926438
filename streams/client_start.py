"""Starting a kafka-python client so that a start that fails leaves nothing running.

kafka-python 3's consumer and admin client start their IO thread (``kafka-io-<client id>``, a
daemon) before they bootstrap; a bootstrap that fails (no broker at the address, one that does
not answer in ``bootstrap_timeout_ms``) raises out of ``__init__`` with that thread still running
for good, and the half-made client is out of reach: nobody can close it. Measured on 3.0.12
against a port nobody listens on: the consumer and the admin client each left their thread alive,
the producer (which starts no IO thread before its bootstrap) nothing. A client started here is
built through a factory that keeps the network client it made, and closes that on a failed start.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


def start_client(cls: Callable[..., T], /, *args: Any, **configs: Any) -> T:
    """``cls(*args, **configs)`` for a kafka-python client class (KafkaConsumer, KafkaAdminClient,
    KafkaProducer or a subclass); if that raises, the network client it made is closed (its IO
    thread stopped and joined, its sockets closed) before the error goes on."""
    made: list[Any] = []
    make = configs.get("kafka_client") or getattr(cls, "DEFAULT_CONFIG", {})["kafka_client"]

    def keep(**kwargs: Any) -> Any:
        client = make(**kwargs)
        made.append(client)
        return client

    try:
        return cls(*args, **{**configs, "kafka_client": keep})
    except BaseException:
        for client in made:
            try:
                client.close()
            except Exception:  # the start's own error is the one to raise
                log.debug("closing a client whose start failed", exc_info=True)
        raise
