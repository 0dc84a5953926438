"""confluent-kafka's side of the settings: whether the package is there, and our
:class:`~streams.config.KafkaSettings` in librdkafka's words.

Its own module because the confluent consumer and producer adapters (streams.confluent_consumer,
streams.producer_backends) both start from it, and streams.kafka_client re-exports it.
"""

from __future__ import annotations

import logging
from typing import Any

from faultlens.streams.config import KafkaSettings


def confluent_available() -> bool:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return False
    return True


def load_confluent():
    """The confluent_kafka module, or a clear error for ``--client confluent`` without it."""
    try:
        import confluent_kafka
    except ImportError:
        raise ValueError("--client confluent needs the confluent-kafka package "
                         "(pip install 'faultlens[fast]')") from None
    return confluent_kafka


# --- settings in librdkafka's words -----------------------------------------------------------
def confluent_config(settings: KafkaSettings) -> dict[str, Any]:
    """The librdkafka properties for ``settings`` (the same settings kafka-python gets)."""
    if not settings.bootstrap:
        raise ValueError("no bootstrap address resolved (see streams.broker.resolve_bootstrap)")
    conf: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap,
        "client.id": settings.client_id,
        "security.protocol": settings.security_protocol.lower(),
        # Tansu (and any broker on one machine) is reached on 127.0.0.1: skip IPv6 lookups.
        "broker.address.family": "v4" if "127.0.0.1" in settings.bootstrap else "any",
        # librdkafka's own log lines go through logging, not straight to stderr
        "logger": logging.getLogger("faultlens.streams.librdkafka"),
    }
    if settings.sasl_mechanism:
        conf["sasl.mechanism"] = settings.sasl_mechanism
        conf["sasl.username"] = settings.sasl_username
        conf["sasl.password"] = settings.password()
    for ours, theirs in (("ssl_cafile", "ssl.ca.location"), ("ssl_certfile", "ssl.certificate.location"),
                         ("ssl_keyfile", "ssl.key.location")):
        if getattr(settings, ours):
            conf[theirs] = getattr(settings, ours)
    return conf
