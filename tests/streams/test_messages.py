"""Both clients' records are what streams/messages.py says a read message is: each field the
Protocols name is on kafka-python's ConsumerRecord and the confluent adapter's Message by that name
(code typed as one client's NamedTuple read the other's fields by position once compiled)."""

from __future__ import annotations

from kafka.consumer.fetcher import ConsumerRecord

from faultlens.streams.confluent_consumer import Message
from faultlens.streams.messages import PolledMessage, ReadMessage

FIELDS = {"topic": "jobs", "partition": 3, "offset": 41, "key": b"k", "value": b"v", "timestamp": 1700000000123}


def _named(protocol: type) -> set[str]:
    return {
        name
        for klass in protocol.__mro__
        if klass.__module__ == ReadMessage.__module__
        for name, attr in vars(klass).items()
        if isinstance(attr, property)
    }


def test_the_protocols_name_the_six_fields():
    assert _named(PolledMessage) == {"offset", "key", "value", "timestamp"}
    assert _named(ReadMessage) == set(FIELDS)


def test_each_client_s_record_gives_each_field_by_its_name():
    kafka_python = ConsumerRecord(
        FIELDS["topic"],
        FIELDS["partition"],
        0,
        FIELDS["offset"],
        FIELDS["timestamp"],
        0,
        FIELDS["key"],
        FIELDS["value"],
        [],
        None,
        1,
        1,
        -1,
    )
    confluent = Message(**FIELDS)
    for record in (kafka_python, confluent):
        assert {name: getattr(record, name) for name in FIELDS} == FIELDS
    # Not the same positions: a read by index (a compiled NamedTuple's) would take the wrong field.
    assert kafka_python[4] == FIELDS["timestamp"] and confluent[4] == FIELDS["value"]
