"""A replay goes out a batch at a time (streams.replay.trace_message_batches, publish_batches): the
messages are byte for byte what encode() writes, keyed and partitioned as one send at a time would,
and a failure still stops the replay."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import faultlens.streams.replay as replay
from faultlens.events.envelope import Envelope, encode
from faultlens.events.topics import topic_for
from faultlens.events.trace import SCHEMA, TraceError, write_trace
from faultlens.streams.producer import DeliveryError, Producer
from faultlens.streams.reader import read_topic
from faultlens.streams.replay import publish_batches, replay_settings, trace_message_batches, trace_messages

T0 = 1_790_000_000.0


def _odd_events() -> list[Envelope]:
    """Values where a column-wise encoder could part from orjson: unicode names and data, escapes
    inside data, floats that print in exponent form, NaN as a string (JSON has no NaN), deep nesting,
    empty containers, big and negative integers, and times with every number of decimals."""
    nested = {"a": [{"b": [1, 2.5, {"c": None}], "d": {}}, [], "x"], "e": {"f": {"g": {"h": [True, False]}}}}
    data = [
        {"gpus": [{"index": 0, "util": 97.5, "temp_c": "NaN", "power_w": 1e-7, "mem_used_mb": 81920}]},
        {"line": "Xid 79: GPU has fallen off the bus \u2014 «ошибка» 温度 ✓ 🚀", "path": 'C:\\tmp\\"q"'},
        {"ctl": "tab\tnewline\nnul\u0000 bell\u0007 sep\u2028", "big": 2**62, "neg": -17, "tiny": 5e-324},
        {"huge": 1.7976931348623157e308, "third": 1 / 3, "zero": -0.0, "e": 1e16, "f": 123456789.123456789},
        nested,
        {},
        {"ranks": [{"rank": r, "node": f"n{r:03d}"} for r in range(8)], "tp": 8},
    ]
    stamps = [T0, T0 + 1e-6, T0 + 0.1, T0 + 0.123456789, T0 + 1 / 3, T0 + 10.5, T0 + 11]
    names = ["nöde-1", "节点-2", "n3", "n-4 ä", "n5", "n6", "-"]
    sources = [("gpu", "sample"), ("kernel", "line"), ("nccl", "line"), ("train", "step"), ("net", "sample"),
               ("summary", "window"), ("job", "topology")]
    return [Envelope(v=1, id=f"id-{i}-é", ts=ts, job="作业-α", node=node, source=source, kind=kind, data=d)
            for i, (ts, node, (source, kind), d) in enumerate(zip(stamps, names, sources, data, strict=True))]


@pytest.fixture(params=[1, 3, 4096], ids=["rows1", "rows3", "rows4096"])
def batch_rows(request, monkeypatch) -> int:
    monkeypatch.setattr(replay, "BATCH_ROWS", request.param)
    return request.param


def test_batches_are_byte_for_byte_what_encode_writes(tmp_path, batch_rows):
    events = _odd_events()
    path = tmp_path / "odd.parquet"
    write_trace(path, events)
    batches = list(trace_message_batches(path))
    assert [len(b) for b in batches] == [min(batch_rows, len(events) - i) for i in range(0, len(events), batch_rows)]
    got = [m for b in batches for m in b.messages()]
    assert [(m.ts, m.topic, m.key, m.value) for m in got] == [(e.ts, topic_for(e), e.key, encode(e)) for e in events]
    assert all(type(m.value) is bytes and type(m.key) is bytes for m in got)  # what both clients take
    assert got[-1].key == "作业-α".encode()  # a job record is keyed by its job
    assert list(trace_messages(path)) == got


def test_rows_that_need_the_slow_way_keep_their_place(tmp_path, batch_rows):
    """A name that needs escaping sends its batch the envelope way; order and bytes stay the same."""
    events = _odd_events()
    events[2] = dataclasses.replace(events[2], node='n"3\\')
    path = tmp_path / "mixed.parquet"
    write_trace(path, events)
    got = [(m.topic, m.key, m.value) for b in trace_message_batches(path) for m in b.messages()]
    assert got == [(topic_for(e), e.key, encode(e)) for e in events]


def test_a_bad_row_sends_nothing_of_its_batch_and_names_the_row(tmp_path, monkeypatch):
    monkeypatch.setattr(replay, "BATCH_ROWS", 2)
    good = {"v": 1, "job": "j", "node": "n1", "source": "gpu", "kind": "sample", "data": "{}"}
    rows = [{**good, "id": f"e{i}", "ts": T0 + i} for i in range(5)]
    rows[3]["data"] = '{"gpus": [1,'  # row 3: truncated JSON, in the second batch (rows 2-3)
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path)
    batches = trace_message_batches(path)
    first = next(batches)
    assert [m.value for m in first.messages()][1].startswith(b'{"v":1,"id":"e1"')
    with pytest.raises(TraceError, match="row 3: data is not valid JSON"):
        next(batches)


def test_replay_compresses_with_lz4_unless_told_otherwise():
    from faultlens.streams.config import KafkaSettings

    for client in ("kafka-python", "confluent"):
        assert replay_settings(KafkaSettings(bootstrap="h:1", client=client)).compression == "lz4"
        for chosen in ("none", "gzip", "zstd"):
            settings = KafkaSettings(bootstrap="h:1", client=client, compression=chosen)
            assert replay_settings(settings) is settings


class _FailingClient:
    """The producer interface where the broker refuses every record of a topic."""

    def __init__(self, refused: str, on_failure):
        self.refused, self.on_failure, self.batches = refused, on_failure, 0

    def send_many(self, topics, keys, values):
        self.batches += 1
        for topic in topics:
            if topic == self.refused:
                self.on_failure(topic, "MESSAGE_TOO_LARGE")

    def poll(self):
        pass

    def flush(self, timeout):
        pass

    def close(self, timeout):
        pass


def test_a_refused_record_stops_the_replay_at_the_next_batch(monkeypatch):
    """At-least-once with no flush per batch: a failure the client reported is raised after the
    batch it came in, before more of the trace goes out."""
    from faultlens.streams.config import KafkaSettings

    clients = []
    monkeypatch.setattr("faultlens.streams.producer.open_producer",
                        lambda settings, on_failure, **kw: clients.append(_FailingClient("telemetry.log", on_failure))
                        or clients[-1])
    monkeypatch.setattr(replay, "ensure_topics", lambda settings: None)
    batches = [replay.MessageBatch([T0], ["telemetry.gpu"], [b"n1"], [b"{}"]),
               replay.MessageBatch([T0, T0], ["telemetry.gpu", "telemetry.log"], [b"n1", b"n2"], [b"{}", b"{}"]),
               replay.MessageBatch([T0], ["telemetry.gpu"], [b"n1"], [b"{}"])]
    seen = []
    with pytest.raises(DeliveryError, match="telemetry.log: MESSAGE_TOO_LARGE"):
        publish_batches(KafkaSettings(bootstrap="h:1"), batches, 0.0, seen.append)
    assert clients[0].batches == 2 and seen == [1]


@pytest.mark.broker
def test_send_many_puts_each_key_where_one_send_at_a_time_does(client_settings, fresh_topic):
    """kafka-python's send_many picks partitions itself (murmur2, once per key): the same ones as
    its partitioner; confluent-kafka's are librdkafka's either way."""
    topic = fresh_topic(5)
    keys = [f"node-{i:03d}".encode() for i in range(40)] + ["节点".encode(), b"job-1"]
    with Producer(client_settings) as producer:
        producer.send_many([topic] * len(keys), keys, [b"many"] * len(keys))
        for key in keys:
            producer.send(topic, key, b"one")
        producer.flush()
    where: dict[bytes, dict[bytes, int]] = {b"many": {}, b"one": {}}
    for m in read_topic(client_settings, topic, idle_s=1.0, timeout_s=20):
        where[m.value][m.key] = m.partition
    assert where[b"many"] == where[b"one"] and len(where[b"one"]) == len(keys)
    assert len(set(where[b"one"].values())) > 1


@pytest.mark.parametrize("name", ['n"1', "n\\1", "n\x011", "n\x1f1", "n\x7f1", "nö\u20281", "n 1"])
def test_every_name_comes_out_as_encode_writes_it(tmp_path, name):
    """Quotes, backslashes and control characters must be escaped (the batch goes the envelope
    way); DEL, non-ASCII and U+2028 are not escaped by orjson and may take the column-wise way."""
    events = [dataclasses.replace(e, node=name if e.source != "job" else e.node, id=f"{e.id}-{name}")
              for e in _odd_events()]
    path = tmp_path / "names.parquet"
    write_trace(path, events)
    assert [m.value for m in trace_messages(path)] == [encode(e) for e in events]


def test_the_column_checks_see_only_their_slice_of_the_buffers():
    """A batch sliced out of a bigger one shares its buffers: a bad name outside the slice must not
    count, one inside must."""
    good = {"v": 1, "ts": T0, "job": "j", "source": "gpu", "kind": "sample", "data": "{}"}
    rows = [{**good, "id": f"e{i}", "node": 'n"bad' if i in (0, 5) else f"n{i}"} for i in range(6)]
    batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    assert not replay._batch_is_plain(batch)
    assert replay._batch_is_plain(batch.slice(1, 4))
    assert not replay._batch_is_plain(batch.slice(1, 5))
    assert not replay._batch_is_plain(batch.slice(0, 1))


@pytest.mark.broker
def test_a_paced_replay_sends_the_same_events_as_a_full_speed_one(client_settings, tmp_path):
    """--speed K goes one message at a time (publish_messages), not batch by batch: the same rows
    arrive, in order."""
    import uuid

    from faultlens.events.trace import iter_trace
    from faultlens.simulator import SimConfig, simulate
    from faultlens.streams.record import collect
    from faultlens.streams.replay import replay_trace

    job = f"job-paced-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "sim.parquet"
    write_trace(path, simulate(SimConfig(nodes=2, gpus=2, seed=3, job=job), duration=60).events())
    stats = replay_trace(client_settings, path, speed=600, show_progress=False)
    original = list(iter_trace(path))
    assert stats.events == len(original) and stats.seconds >= (original[-1].ts - original[0].ts) / 600
    recorded, _ = collect(client_settings, job=job, idle_s=3.0)
    assert recorded == original
