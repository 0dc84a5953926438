"""A trace's rows become messages without building envelopes (streams.replay.trace_messages):
the bytes are the ones encode() writes, and a bad row still stops the replay naming its row."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlens.events.envelope import Envelope, encode
from faultlens.events.topics import topic_for
from faultlens.events.trace import SCHEMA, TraceError, iter_trace, write_trace
from faultlens.simulator import SimConfig, simulate
from faultlens.streams.replay import trace_messages


def _row(**over):
    row = {"v": 1, "id": "e1", "ts": 1_790_000_000.5, "job": "j", "node": "n1", "source": "gpu", "kind": "sample",
           "data": '{"gpus":[{"index":0,"util":97.5}]}'}
    row.update(over)
    return row


def _write(path, rows):
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path)
    return path


def test_messages_are_what_encode_writes_for_a_simulated_trace(tmp_path):
    run = simulate(SimConfig(nodes=3, gpus=2, seed=11, job="job-msg"), faults=1, duration=240)
    path = tmp_path / "sim.parquet"
    write_trace(path, run.events())
    events = list(iter_trace(path))
    messages = list(trace_messages(path))
    assert len(messages) == len(events) > 100
    for m, e in zip(messages, events, strict=True):
        assert (m.topic, m.key, m.value, m.ts) == (topic_for(e), e.key, encode(e), e.ts)
    assert any(m.topic == "jobs" and m.key == b"job-msg" for m in messages)  # job records keyed by job


def test_names_that_need_escaping_are_encoded_as_json(tmp_path):
    path = _write(tmp_path / "esc.parquet", [_row(node='n"1\\x'), _row(id="e2")])
    first = next(trace_messages(path))
    event = Envelope(v=1, id="e1", ts=1_790_000_000.5, job="j", node='n"1\\x', source="gpu", kind="sample",
                     data={"gpus": [{"index": 0, "util": 97.5}]})
    assert first.value == encode(event) and first.key == 'n"1\\x'.encode()


@pytest.mark.parametrize("bad, message", [
    (_row(ts=5.0), "row 1: ts"),
    (_row(source="bogus"), "row 1: source"),
    (_row(node="  "), "row 1: node"),
    (_row(data="[1, 2]"), "row 1: data"),
])
def test_a_bad_row_stops_the_replay_naming_it(tmp_path, bad, message):
    path = _write(tmp_path / "bad.parquet", [_row(), bad, _row(id="e3")])
    with pytest.raises(TraceError, match=message):
        list(trace_messages(path))


def test_data_that_only_looks_like_an_object_goes_out_and_is_dead_lettered_by_its_reader(tmp_path):
    """The price of never parsing data on the way out: a row whose data is braces around garbage is
    sent, and the consumer's decode names it (the runner dead-letters it with this reason)."""
    from faultlens.events.envelope import InvalidEvent, decode

    path = _write(tmp_path / "braces.parquet", [_row(), _row(id="e2", data="{not json}")])
    messages = list(trace_messages(path))
    assert len(messages) == 2
    decode(messages[0].value)
    with pytest.raises(InvalidEvent, match="not valid JSON"):
        decode(messages[1].value)
