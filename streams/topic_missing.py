"""A topic that does not exist, told from a broker that does not answer.

On a broker that creates no topics (``auto.create.topics.enable=false``, as managed clusters
often run), kafka-python waits its ``max_block_ms`` for a missing topic's metadata and then raises
the same ``KafkaTimeoutError`` as when no broker answers: every writer then took a missing topic
for an outage and kept retrying (the trainer's "broker lost", the runner reading again from its
last commit for ever). librdkafka says ``_UNKNOWN_TOPIC`` itself. Here the kafka-python wait is
read afterwards: the broker answered a metadata request during it, and still listed no such topic.
"""

from __future__ import annotations

import time

from kafka.errors import KafkaError

# Where the project says how to make its topics (names, partitions, settings).
CREATE_HINT = "create it as docs/kafka.md lists it (`faultlens broker` creates every faultlens topic on the embedded broker)"


class TopicMissingError(KafkaError):
    """The broker answers and has no such topic; it will not create it. Writing to it again
    would fail again: a refusal for good (streams/producer.py's "unknown topic"), never an outage."""

    retriable = False

    def __init__(self, topic: str) -> None:
        self.topic = topic
        super().__init__(f"topic {topic!r} does not exist on the broker, which creates none: {CREATE_HINT}")


def monotonic_ms() -> float:
    """kafka-python's clock for its metadata refreshes (ClusterMetadata, 3.x)."""
    return time.monotonic() * 1000


def absent_after_wait(metadata: object, topic: str, waited_since_ms: float) -> bool:
    """Whether ``metadata`` (kafka-python's ClusterMetadata) shows the broker answered a metadata
    request since ``waited_since_ms`` (:func:`monotonic_ms`) without ``topic`` in it. False where it
    cannot tell (no answer: the broker is down; a client that keeps no such time): an outage then,
    retried as before."""
    answered = getattr(metadata, "_last_successful_refresh_ms", None)
    partitions_for_topic = getattr(metadata, "partitions_for_topic", None)
    if not isinstance(answered, (int, float)) or partitions_for_topic is None:
        return False
    return answered >= waited_since_ms and partitions_for_topic(topic) is None
