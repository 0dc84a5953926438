"""Parquet traces and their labels: round trips, streaming row groups, and clear errors."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlens.events.envelope import Envelope, encode, number
from faultlens.events.trace import (
    SCHEMA,
    TraceError,
    iter_trace,
    labels_path,
    read_labels,
    trace_order,
    trace_rows,
    write_labels,
    write_trace,
)
from faultlens.streams.replay import paced

T0 = 1767225600.0


def _events(n: int) -> list[Envelope]:
    out = [Envelope(ts=T0, job="j", node="-", source="job", kind="topology", id="topo",
                    data={"tp": 1, "pp": 1, "dp": 1, "ranks": [{"rank": 0, "node": "n000", "tp": 0, "pp": 0, "dp": 0}]})]
    for i in range(n):
        out.append(Envelope(ts=T0 + i * 0.5, job="j", node=f"n{i % 3:03d}", source="train", kind="step", id=f"e{i}",
                            data={"rank": i % 3, "step": i, "loss": number(float("nan")) if i == 7 else 2.5 - i * 1e-3,
                                  "nested": {"a": [1, 2, {"b": None}]}, "text": "ünïcode ✓"}))
    return out


def test_round_trip_is_exact_and_streams_in_row_groups(tmp_path):
    events = _events(1000)
    path = tmp_path / "t.parquet"
    assert write_trace(path, events, row_group_rows=128) == len(events)
    assert pq.ParquetFile(path).metadata.num_row_groups == 8
    assert trace_rows(path) == len(events)
    back = list(iter_trace(path, batch_rows=100))
    assert [encode(e) for e in back] == [encode(e) for e in events]
    assert back[8].data["loss"] == "nan"


def test_out_of_order_events_are_refused_and_leave_no_file(tmp_path):
    events = _events(5)
    events[3], events[4] = events[4], events[3]
    path = tmp_path / "bad.parquet"
    with pytest.raises(TraceError, match="earlier than the one before"):
        write_trace(path, events)
    assert not path.exists() and not list(tmp_path.iterdir())


def test_a_bad_row_is_named(tmp_path):
    path = tmp_path / "bad-row.parquet"
    rows = {"v": [1, 1, 1], "id": ["a", "b", "c"], "ts": [T0, T0 + 1, T0 + 2], "job": ["j"] * 3,
            "node": ["n"] * 3, "source": ["gpu", "martian", "gpu"], "kind": ["sample"] * 3, "data": ["{}"] * 3}
    pq.write_table(pa.table(rows, schema=SCHEMA), path)
    it = iter_trace(path)
    assert next(it).id == "a"
    with pytest.raises(TraceError, match=r"row 1: source: unknown source 'martian'"):
        next(it)
    rows["source"][1] = "gpu"
    rows["data"][2] = "{not json"
    pq.write_table(pa.table(rows, schema=SCHEMA), path)
    with pytest.raises(TraceError, match=r"row 2: data is not valid JSON"):
        list(iter_trace(path))


def test_not_a_trace(tmp_path):
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"this is not parquet at all")
    with pytest.raises(TraceError, match="not a Parquet trace"):
        list(iter_trace(junk))
    with pytest.raises(TraceError, match="no such trace"):
        list(iter_trace(tmp_path / "missing.parquet"))
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1]}), other)
    with pytest.raises(TraceError, match="missing column"):
        list(iter_trace(other))


def test_labels_beside_the_trace(tmp_path):
    trace = tmp_path / "run.parquet"
    labels = [{"job": "j", "fault": "gpu_lost", "nodes": ["n003"], "ranks": [24], "onset": T0 + 120, "end": T0 + 230}]
    assert write_labels(labels_path(trace), labels) == tmp_path / "run.parquet.labels.jsonl"
    assert read_labels(trace) == labels
    # the <stem>.labels.jsonl spelling is accepted too
    labels_path(trace).rename(tmp_path / "run.labels.jsonl")
    assert read_labels(trace) == labels
    (tmp_path / "run.labels.jsonl").write_text('{"job": "j", "fault": "x", "nodes": [], "ranks": []}\n')
    with pytest.raises(TraceError, match=r"run.labels.jsonl:1: label is missing onset"):
        read_labels(trace)
    (tmp_path / "run.labels.jsonl").write_text("\n{oops\n")
    with pytest.raises(TraceError, match=r":2: not valid JSON"):
        read_labels(trace)
    (tmp_path / "run.labels.jsonl").unlink()
    with pytest.raises(TraceError, match="no labels for"):
        read_labels(trace)


def test_trace_order_puts_job_records_first_at_equal_times():
    a = Envelope(ts=T0, job="j", node="n", source="gpu", kind="sample", id="0")
    b = Envelope(ts=T0, job="j", node="-", source="job", kind="topology", id="z")
    c = Envelope(ts=T0 - 1, job="j", node="n", source="gpu", kind="sample", id="y")
    assert sorted([a, b, c], key=trace_order) == [c, b, a]


def test_pacing_follows_event_time_divided_by_speed():
    now = [100.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(round(s, 6))
        now[0] += s

    events = [Envelope(ts=T0 + dt, job="j", node="n", source="gpu", kind="sample") for dt in (0, 4, 4, 10)]
    out = list(paced(events, 2.0, clock=lambda: now[0], sleep=sleep))
    assert out == events and slept == [2.0, 3.0]
    slept.clear()
    assert list(paced(events, 0, clock=lambda: now[0], sleep=sleep)) == events and slept == []
    with pytest.raises(ValueError):
        list(paced(events, -1))


def test_simulated_trace_round_trips(every_class_trace):
    back = list(iter_trace(every_class_trace.path))
    assert [e.id for e in back] == [e.id for e in every_class_trace.events]
    assert back == every_class_trace.events
    assert read_labels(every_class_trace.path) == every_class_trace.labels


