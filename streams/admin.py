"""Topic creation: make every registered topic exist with its partitions and config."""

from __future__ import annotations

import logging
from typing import Iterable

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from faultlens.events.topics import TOPICS
from faultlens.streams.client_start import start_client
from faultlens.streams.config import KafkaSettings
from faultlens.streams.kafka_close_race import quiet_close_race

log = logging.getLogger(__name__)
quiet_close_race()  # kafka-python's close races its own IO thread (see that module)


def ensure_topics(settings: KafkaSettings, names: Iterable[str] | None = None) -> list[str]:
    """Create the missing topics among ``names`` (default: all). Returns the ones created."""
    wanted = list(names or TOPICS)
    admin = start_client(KafkaAdminClient, **settings.common_kwargs(), request_timeout_ms=15000)
    try:
        existing = set(admin.list_topics())
        missing = [n for n in wanted if n not in existing]
        if not missing:
            return []
        specs = [settings.topic_spec(n) for n in missing]
        new = [NewTopic(s.name, s.partitions, settings.replication_factor, topic_configs=s.config) for s in specs]
        try:
            admin.create_topics(new)
        except TopicAlreadyExistsError:
            pass  # another process won the race; the topic is there, which is all we need
        except KafkaError as exc:
            # One bad topic config should not hide which ones did get created.
            log.warning("creating topics %s: %s; trying one by one", missing, exc)
            for topic in new:
                try:
                    admin.create_topics([topic])
                except TopicAlreadyExistsError:
                    pass
        log.info("created topics %s", ", ".join(missing))
        return missing
    finally:
        admin.close()
