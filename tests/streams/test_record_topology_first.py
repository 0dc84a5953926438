"""A recording whose topology came after the job's first events (agents start before the trainer
publishes it, or the compacted `jobs` kept only a later one) puts it first, at the first event's
time, and can be written as a trace (found on the H100 run: `faultlens record` failed with
"traces are in time order")."""

from __future__ import annotations

from faultlens.events.trace import iter_trace, trace_order, write_trace
from faultlens.streams.record import topology_first
from tests.diagnosis.diag_events import beat, topology


def test_a_late_topology_goes_first_at_the_first_events_time_and_the_trace_is_written(tmp_path):
    events = sorted([beat(0.0, "n000"), beat(1.0, "n001"), topology(n=2, ts=5.0), beat(10.0, "n000")], key=trace_order)
    ordered = topology_first(events)
    assert [e.source for e in ordered] == ["job", "heartbeat", "heartbeat", "heartbeat"]
    assert ordered[0].ts == events[0].ts and ordered[0].id == events[2].id
    path = tmp_path / "t.parquet"
    write_trace(path, ordered)
    assert [e.id for e in iter_trace(path)] == [e.id for e in ordered]
