"""Data waits for a `jobs` broadcast that is behind (streams/runner/event_time.py): a member starved
of CPU reading a long `jobs` from its start, past the loop's one-second wait, used to release
telemetry without the restarts and topologies before it. On test_backlog's trace (tests/diagnosis/
sim_replay.py: a lost GPU, a flapping NIC and a hang, each ending in a restart), `analyze` with the
restarts read 30 s of event time late gives another hang verdict, and with restarts and topologies
100 s late evicts n001 and n003 as silent; here the engine side is shown, then the runner's hold.
Kafka-free: consumer stand-ins say how far each partition was read."""

from __future__ import annotations

from faultlens.diagnosis.engine.offline import analyze
from faultlens.events.envelope import Envelope
from faultlens.streams.runner import event_time
from faultlens.streams.runner.types import Record
from tests.diagnosis.sim_replay import acting, offline_trace
from tests.helpers.event_time_stand_ins import GroupConsumer, JobsReader, data_record, event_time_order


def _late(events: list[Envelope], kinds: set[str], after: float, by: float) -> list[Envelope]:
    """``events`` with the job events of ``kinds`` stamped past ``after`` read ``by`` s of event time late."""
    late = [e for e in events if e.source == "job" and e.kind in kinds and e.ts > after]
    out: list[Envelope] = []
    for e in (e for e in events if not (e.source == "job" and e.kind in kinds and e.ts > after)):
        while late and late[0].ts + by <= e.ts:
            out.append(late.pop(0))
        out.append(e)
    return out + late


def test_a_backlog_judged_without_its_restarts_is_judged_otherwise(tmp_path):
    from faultlens.events.trace import iter_trace

    path, offline, start = offline_trace(tmp_path, "broadcast-late")
    events = list(iter_trace(path))
    assert acting(analyze(events)) == acting(offline)
    restarts_late = acting(analyze(_late(events, {"restart"}, start + 100, 30.0)))
    assert restarts_late != acting(offline)
    both_late = acting(analyze(_late(events, {"restart", "topology"}, start + 100, 100.0)))
    assert {(str(f), n, str(a)) for f, n, a, _ in both_late - acting(offline)} == {
        ("node_silent", ("n001",), "evict"),
        ("node_silent", ("n003",), "evict"),
    }


def _record(ts: float) -> Record:
    return data_record(Envelope(ts=ts, job="j", node="n001", source="gpu", kind="sample"), b"n")


def test_data_waits_for_a_broadcast_behind_then_goes_after_the_give_up(monkeypatch, caplog):
    monkeypatch.setattr(event_time, "BROADCAST_CATCH_UP_S", 0.05)
    jobs = JobsReader(100, high=5_000, end=5_000)  # `jobs` read to 100 of 5,000; its fetches bring nothing
    order = event_time_order(jobs, follow_jobs=False)
    group = GroupConsumer()
    assert order.ordered(group, [_record(1_767_225_600.0)]) == []  # held: `jobs` is behind
    assert order.ordered(group, []) == []  # and again at the next loop, which does not wait
    jobs.pos = 5_000  # caught up
    assert [r.event_ts for r in order.ordered(group, [])] == [1_767_225_600.0]
    jobs.pos = 4_000  # behind again, for good
    assert order.ordered(group, [_record(1_767_225_601.0)]) == []
    assert order._broadcast_late_since is not None
    order._broadcast_late_since -= event_time.BROADCAST_GIVE_UP_S + 1  # held that long (set, not waited)
    assert [r.event_ts for r in order.ordered(group, [])] == [1_767_225_601.0]
    assert "data released without what they may still hold" in caplog.text
