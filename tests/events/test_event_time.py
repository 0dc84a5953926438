"""EventClock (where an event sits in time) and WatermarkMerge (in which order events go on)."""

from __future__ import annotations

import random
import statistics

import pytest

from faultlens.events.event_clock import EventClock
from faultlens.events.event_time import WatermarkMerge
from tests.events.one_heap import one_heap

NOW = 1_790_000_000.0
YEAR = 365 * 86400.0


def _seen(clock: EventClock, job, node, ts, record_ts, wall_now):
    clock.observe(job, node, ts, record_ts, wall_now)
    return clock.place(job, node, ts, record_ts, wall_now)


def test_a_stamp_from_the_future_does_not_move_time():
    clock = EventClock(max_skew_s=300)
    p = clock.place("j", "n0", NOW + 10 * YEAR, record_ts=NOW, wall_now=NOW + 1)
    assert p.clamped == "future" and p.ts == pytest.approx(NOW) and p.skew_s == pytest.approx(10 * YEAR - 1)
    # a small skew is an ordinary clock, not a bad one
    assert clock.place("j", "n0", NOW + 60, record_ts=NOW, wall_now=NOW).clamped is None


def test_an_old_trace_replayed_today_is_not_skewed():
    # Every node of a replayed trace carries the same offset from the broker's clock: nobody is off.
    clock = EventClock(max_skew_s=300)
    age = 300 * 86400.0
    for i in range(200):
        for n in range(8):
            p = _seen(clock, "j", f"n{n}", NOW - age + i, record_ts=NOW + i * 0.01, wall_now=NOW + i * 0.01)
            assert p.ts == NOW - age + i and p.skew_s is None


def test_a_node_whose_clock_is_off_is_measured_against_its_peers_and_corrected():
    clock = EventClock(max_skew_s=300)
    placed = {}
    for i in range(100):
        for n in range(8):
            off = -3600.0 if n == 5 else random.Random(i * 8 + n).uniform(-0.5, 0.5)
            placed[(i, n)] = _seen(clock, "j", f"n{n}", NOW + i + off, record_ts=NOW + i, wall_now=NOW + i)
    late = placed[(99, 5)]
    assert late.skew_s == pytest.approx(-3600, abs=1) and late.ts == pytest.approx(NOW + 99, abs=1)
    assert all(placed[(99, n)].skew_s is None for n in range(8) if n != 5)
    assert ("j", "n5") in clock.skewed_nodes


def test_a_backlog_sent_at_once_judges_no_clock():
    # 600 s of beats produced in one burst (a replay, a spool flushed): the broker's time says when
    # they were sent, not when they happened, so no node may be "corrected" on that evidence.
    clock = EventClock(max_skew_s=300)
    batch = [(f"n{n}", NOW - 600 + t) for t in range(0, 600, 3) for n in range(8)]
    for i, (node, ts) in enumerate(batch):
        clock.observe("j", node, ts, NOW + i * 1e-4, NOW)
    assert all(clock.place("j", node, ts, NOW, NOW).skew_s is None for node, ts in batch)


def test_the_correction_holds_steady_while_the_measure_wobbles():
    clock = EventClock(max_skew_s=300)
    placed = []
    for i in range(200):
        for n in range(8):
            jitter = random.Random(i * 8 + n).uniform(-20, 20)
            off = -3600.0 + jitter if n == 5 else random.Random(i).uniform(-1, 1)
            p = _seen(clock, "j", f"n{n}", NOW + i + off, NOW + i, NOW + i)
            if n == 5 and p.skew_s is not None:
                placed.append(p.skew_s)
    assert placed and len(set(placed[-50:])) == 1  # one correction, not a new one per event


def test_two_nodes_cannot_outvote_each_other():
    clock = EventClock(max_skew_s=300)
    for i in range(20):
        _seen(clock, "j", "a", NOW + i, NOW + i, NOW + i)
        p = _seen(clock, "j", "b", NOW + i - 3600, NOW + i, NOW + i)
    assert p.skew_s is None  # no majority to say which clock is wrong


def test_offline_without_record_times_only_the_future_is_guarded():
    clock = EventClock(max_skew_s=300)
    assert clock.place("j", "n0", NOW - YEAR, record_ts=None, wall_now=NOW).ts == NOW - YEAR
    assert clock.place("j", "n0", NOW + YEAR, record_ts=None, wall_now=NOW).clamped == "future"


def _merge_all(batches, caught_up_after, idle=2.0):
    """Feed (wall, partition, offset, ts) batches; return the release order."""
    m = WatermarkMerge(max_idle_s=idle)
    m.assign(["a", "b"], 0.0)
    out = []
    for wall, items in batches:
        for p, off, ts in items:
            m.add(p, off, ts, (p, off, ts), wall)
        out += m.release(wall, {p: wall >= caught_up_after.get(p, 0) for p in ("a", "b")})
    return m, out


def test_records_go_on_in_event_time_order_across_partitions():
    # Partition a is read far ahead of b (a backlog): nothing of a passes b's watermark.
    a = [("a", i, 100.0 + i) for i in range(50)]
    b = [("b", i, 100.0 + i + 0.5) for i in range(50)]
    m, out = _merge_all([(0.1, a), (0.2, b[:10]), (0.3, b[10:])], caught_up_after={"a": 0.0, "b": 0.3})
    times = [ts for _, _, ts in out]
    assert times == sorted(times)
    assert len(out) + m.held == 100
    # b's last record (149.5) waits: a has delivered only up to 149 and may still send earlier ones
    assert m.held == 1 and m.lowest_held_offset("b") == 49 and m.lowest_held_offset("a") is None


def test_a_partition_that_says_nothing_holds_the_others_back_only_while_it_may_speak():
    m = WatermarkMerge(max_idle_s=2.0)
    m.assign(["a", "b"], 0.0)
    m.add("a", 0, 100.0, "x", 0.5)
    assert m.release(0.5, {"a": True, "b": True}) == []  # b was just assigned: it may still speak
    assert m.release(1.0, {"a": True, "b": False}) == []  # b has unread input: wait however long
    assert m.release(30.0, {"a": True, "b": False}) == []
    assert m.release(2.5, {"a": True, "b": True}) == ["x"]  # b caught up and idle past the bound


def test_commit_position_is_the_lowest_record_still_held():
    m = WatermarkMerge(max_idle_s=100)
    m.assign(["a", "b"], 0.0)
    for off, ts in enumerate([5.0, 1.0, 9.0]):  # out of time order inside the partition
        m.add("a", off, ts, off, 0.0)
    m.add("b", 0, 6.0, "b0", 0.0)
    assert m.release(0.0, {"a": False, "b": False}) == [1, 0, "b0"]  # up to b's watermark 6.0
    assert m.lowest_held_offset("a") == 2 and m.lowest_held_offset("b") is None


def test_revoked_partitions_leave_their_records_to_the_next_owner():
    m = WatermarkMerge(max_idle_s=100)
    m.assign(["a", "b"], 0.0)
    m.add("a", 0, 5.0, "a0", 0.0)
    m.add("b", 0, 1.0, "b0", 0.0)
    assert m.revoke(["b"]) == 1
    assert m.release(0.0, {"a": False}) == ["a0"]


def test_partitions_running_ahead_are_paused_and_resumed():
    m = WatermarkMerge(max_idle_s=100, max_held_per_partition=10)
    m.assign(["a", "b"], 0.0)
    for i in range(20):
        m.add("a", i, float(i), i, 0.0)
    assert m.to_pause() == {"a"}
    m.add("b", 0, 100.0, "b0", 0.0)
    m.release(0.0, {"a": False, "b": False})
    assert "a" in m.to_resume()


def test_a_partition_far_ahead_in_event_time_waits_until_the_others_catch_up():
    # A backlog read: one fetch brought 20 s of one partition and 1 s of the other. Reading the
    # first further only adds to what waits in memory for the second.
    m = WatermarkMerge(max_idle_s=100, max_lead_s=10, min_held_to_pause=5)
    m.assign(["ahead", "behind"], 0.0)
    for i in range(20):
        m.add("ahead", i, 100.0 + i, i, 0.0)
    m.add("behind", 0, 1.0, "b0", 0.0)
    assert m.release(0.0, {"ahead": False, "behind": False}) == ["b0"]
    assert m.to_pause() == {"ahead"}
    assert "behind" not in m.to_pause() and "behind" in m.to_resume()  # the slowest reads on
    m.add("behind", 1, 112.0, "b1", 0.0)
    m.release(0.0, {"ahead": False, "behind": False})
    assert "ahead" not in m.to_resume()  # 7 s ahead with 7 held: not yet within half of each
    m.add("behind", 2, 116.0, "b2", 0.0)
    m.release(0.0, {"ahead": False, "behind": False})
    assert "ahead" in m.to_resume() and m.to_pause() == set()


def test_while_a_partition_has_said_nothing_the_others_stop_reading_ahead():
    m = WatermarkMerge(max_idle_s=100, max_lead_s=10, min_held_to_pause=5)
    m.assign(["read", "silent", "few"], 0.0)
    for i in range(20):
        m.add("read", i, float(i), i, 0.0)
    m.add("few", 0, 500.0, "f0", 0.0)  # far ahead, but holding little: read on
    assert m.release(0.0, {"read": False, "silent": False, "few": False}) == []
    assert m.to_pause() == {"read"}


def test_a_broadcast_partition_is_never_paused():
    m = WatermarkMerge(max_idle_s=100, max_lead_s=10, min_held_to_pause=5, max_held_per_partition=10)
    m.assign(["data"], 0.0)
    m.assign(["jobs"], 0.0, follower=True)
    m.add("data", 0, 1.0, "d0", 0.0)
    for i in range(30):
        m.add("jobs", i, 100.0 + i, i, 0.0)
    m.release(0.0, {"data": False, "jobs": False})
    assert m.to_pause() == set() and "jobs" in m.to_resume()


def test_the_partition_that_holds_event_time_back_is_never_paused():
    # One job's summaries partition, written by two node-stage members: the one behind (a member
    # reading a backlog) speaks only further down the same partition. Pausing that partition for
    # holding too much of the other member's records would wait for its word for good.
    m = WatermarkMerge(max_idle_s=100, max_held_per_partition=10)
    m.assign(["s", "t"], 0.0)
    m.report("s", "ahead", 1000.0, 0.0)
    m.report("s", "behind", 5.0, 0.0)
    for i in range(20):
        m.add("s", i, 100.0 + i, i, 0.0)
    m.add("t", 0, 2000.0, "t0", 0.0)
    assert m.release(0.0, {"s": False, "t": False}) == []
    assert m.to_pause() == set()
    m.report("s", "behind", 1000.0, 0.0)  # its word, read further down the partition
    assert m.release(0.0, {"s": False, "t": False}) == list(range(20))


def test_memory_is_bounded_when_a_partition_never_moves():
    m = WatermarkMerge(max_idle_s=100, max_held=50)
    m.assign(["a", "b"], 0.0)
    for i in range(80):
        m.add("a", i, float(i), i, 0.0)
    out = m.release(0.0, {"a": False, "b": False})
    assert m.held == 50 and out == list(range(30)) and m.forced == 30


def test_one_stamp_far_off_its_node_is_judged_at_arrival_when_read_live():
    clock = EventClock(max_skew_s=300)
    for i in range(120):
        for n in range(8):
            _seen(clock, "j", f"n{n}", NOW + i, NOW + i, NOW + i)
    p = _seen(clock, "j", "n3", NOW - 10 * YEAR, NOW + 120, NOW + 120)  # a stamp from ten years ago
    assert p.clamped == "outlier" and p.ts == pytest.approx(NOW + 120, abs=1) and p.skew_s < -9 * YEAR
    assert _seen(clock, "j", "n3", NOW + 121, NOW + 121, NOW + 121).skew_s is None  # the node itself is fine


def test_a_followed_topic_never_runs_ahead_of_the_data():
    # `jobs` is read in full by every member: a restart stamped at 660 must wait until the
    # telemetry has reached 660, even while every telemetry partition is idle.
    m = WatermarkMerge(max_idle_s=0.5)
    m.assign(["t0", "t1"], 0.0)
    m.assign(["jobs"], 0.0, follower=True)
    m.add("jobs", 0, 0.0, "topology@0", 0.0)
    m.add("jobs", 1, 660.0, "restart@660", 0.0)
    assert m.release(10.0, {"t0": True, "t1": True, "jobs": True}) == []  # no telemetry yet: nothing leads
    m.add("t0", 0, 100.0, "beat@100", 10.0)
    assert m.release(11.0, {"t0": True, "t1": True, "jobs": True}) == ["topology@0", "beat@100"]
    m.add("t1", 0, 700.0, "step@700", 12.0)
    m.add("t0", 1, 650.0, "beat@650", 12.0)
    assert m.release(12.0, {"t0": False, "t1": False, "jobs": True}) == ["beat@650"]
    assert m.release(13.0, {"t0": True, "t1": True, "jobs": True}) == ["restart@660", "step@700"]


def test_a_backlog_of_two_writers_is_held_to_the_slower_ones_word_though_both_spoke_long_ago():
    # A job-stage partition written by two node-stage members, read an hour later: by the wall
    # clock both writers are long silent, by the partition's own broker time both are alive.
    from faultlens.events.event_time import WatermarkMerge

    merge = WatermarkMerge(max_idle_s=2.0, writer_ttl_s=15.0)
    now = 10_000.0  # wall time of the reading: an hour after everything was written
    merge.assign(["p"], now)
    behind = {"p": False}
    merge.report("p", "A", 50.0, now, said_at=100.0)
    merge.add("p", 0, 40.0, "a40", now, broker_ts=100.0)
    merge.report("p", "B", 20.0, now, said_at=101.0)
    merge.add("p", 1, 15.0, "b15", now, broker_ts=101.0)
    out = merge.release(now, behind)
    merge.report("p", "B", 45.0, now, said_at=105.0)
    merge.add("p", 2, 30.0, "b30", now, broker_ts=105.0)
    out += merge.release(now, behind)
    assert out == ["b15", "b30", "a40"]
    # caught up and quiet, both writers long silent: their last words still bind (B may still have
    # records up to 60 to write: a starved or stalled member, issue 32) ...
    merge.add("p", 3, 60.0, "a60", now, broker_ts=106.0)
    assert merge.release(now + 60, {"p": True}) == []
    # ... until B speaks again (or says it has nothing more)
    merge.report("p", "B", 70.0, now + 61, said_at=now + 61, idle=True)
    assert merge.release(now + 61, {"p": True}) == ["a60"]


def test_a_writers_hello_after_a_rebalance_wipes_its_earlier_word():
    # Node-stage members A and B write one job's summaries. B finished its own partitions early
    # (its word: 1000), then a rebalance gave it A's partition of node n001, whose records from
    # t=50 on it has still to write. Its hello must hold the job back again, or A's next word
    # releases everything past n001's records, which then come late (a hang judged without the
    # lost GPU that explains it).
    m = WatermarkMerge(max_idle_s=100)
    m.assign(["s"], 0.0)
    m.report("s", "A", 50.0, 0.0)
    m.report("s", "B", 1000.0, 0.0)
    m.add("s", 0, 45.0, "early", 0.0)
    assert m.release(0.0, {"s": False}) == ["early"]
    m.report("s", "B", float("-inf"), 1.0)  # hello: B took partitions over
    m.report("s", "A", 900.0, 2.0)  # A's word after the rebalance, its other partitions done
    m.add("s", 1, 300.0, "from A", 2.0)
    assert m.release(2.0, {"s": False}) == []  # B has not said how far it got since
    m.add("s", 2, 50.0, "n001 gpu lost, from B", 3.0)
    m.report("s", "B", 400.0, 3.0)
    assert m.release(3.0, {"s": False}) == ["n001 gpu lost, from B", "from A"]


def test_partitions_taken_over_restart_the_progress_a_member_may_announce():
    m = WatermarkMerge(max_idle_s=100)
    m.assign(["a"], 0.0)
    m.add("a", 0, 500.0, "x", 0.0)
    m.release(0.0, {"a": True})  # everything idle: handed on as far as the data got
    assert m.progress == 500.0
    m.assign(["a"], 1.0)  # the same partition again (kept): nothing new to wait for
    assert m.progress == 500.0
    m.assign(["a", "b"], 1.0)  # a partition taken over: its records come from its commit on
    assert m.progress is None
    assert m.release(1.0, {"a": False, "b": False}) == [] and m.progress is None  # b has not spoken
    m.add("b", 0, 60.0, "y", 1.0)
    m.add("a", 1, 600.0, "z", 1.0)
    assert m.release(1.0, {"a": False, "b": False}) == ["y"] and m.progress == 60.0
    m.assign(["jobs"], 1.0, follower=True)  # a broadcast topic read in full never restarts it
    assert m.progress == 60.0


def test_a_partition_waits_until_every_input_partition_has_a_writer_that_said_it_reads_it():
    # Three node-stage members of one generation; the third one's rebalance callback ran 3 s
    # after the others' (a loaded machine), so the first two announced progress before its hello.
    # Their words cover 20 of the 30 telemetry partitions: the rest are still to be written.
    m = WatermarkMerge(max_idle_s=100)
    m.assign(["s"], 0.0)
    topics = ("gpu", "train", "heartbeat", "nccl", "kernel")
    a, b, c = ([f"telemetry.{t}:{i}" for t in topics for i in (2 * k, 2 * k + 1)] for k in range(3))
    m.report("s", "A", float("-inf"), 0.0, reads=a, of=30)
    m.report("s", "B", float("-inf"), 0.0, reads=b, of=30)
    m.report("s", "A", 60.0, 1.0, reads=a, of=30)
    m.report("s", "B", 319.0, 1.0, reads=b, of=30)
    m.add("s", 0, 60.0, "gpu lost on n001 (A)", 1.0)
    assert m.release(1.0, {"s": False}) == []  # a third of the input has no writer yet
    m.report("s", "C", float("-inf"), 3.0, reads=c, of=30)
    assert m.release(3.0, {"s": False}) == []  # now it has one, which has written nothing yet
    m.add("s", 1, 0.0, "n002's first beat (C)", 4.0)
    m.report("s", "C", 171.0, 4.0, reads=c, of=30)
    assert m.release(4.0, {"s": False}) == ["n002's first beat (C)", "gpu lost on n001 (A)"]
    # A writer gone silent leaves its partitions uncovered until another says it reads them.
    m.report("s", "A", 400.0, 20.0, reads=a, of=30)
    m.report("s", "B", 400.0, 20.0, reads=b, of=30)
    m.add("s", 2, 200.0, "later", 20.0)
    assert m.release(20.5, {"s": False}) == []  # C last spoke at 4.0
    m.report("s", "B", float("-inf"), 21.0, reads=b + c, of=30)  # B took C's partitions over
    m.report("s", "B", 400.0, 22.0, reads=b + c, of=30)
    assert m.release(22.0, {"s": False}) == ["later"]


def test_words_without_reads_keep_the_old_rule():
    # A member of an older version says nothing of what it reads: the slowest word holds.
    m = WatermarkMerge(max_idle_s=100)
    m.assign(["s"], 0.0)
    m.report("s", "A", 100.0, 0.0, reads=["t:0"], of=2)
    m.report("s", "old", 100.0, 0.0)
    m.add("s", 0, 50.0, "x", 0.0)
    assert m.release(0.0, {"s": False}) == ["x"]


def test_the_wall_clock_waits_while_an_upstream_writer_is_behind_on_its_input():
    """A job stage whose own input is quiet must not let the wall clock move a job's time while a
    node-stage member still has telemetry to read (a rebalance's re-read, a backlog): the records
    it writes next belong before that time."""
    m = WatermarkMerge(max_idle_s=100, writer_ttl_s=15)
    m.assign(["s"], 0.0)
    caught_up = {"s": True}
    assert not m.upstream_behind(0.0, caught_up)  # no writer has spoken: nothing known upstream
    m.report("s", "A", float("-inf"), 0.0, reads=["t:0", "t:1"], of=2, behind=True)  # hello
    assert m.upstream_behind(0.0, caught_up)
    m.report("s", "A", 100.0, 1.0, reads=["t:0", "t:1"], of=2, behind=True)
    assert m.upstream_behind(1.0, caught_up)
    m.report("s", "A", 100.0, 2.0, reads=["t:0", "t:1"], of=2, behind=False)  # caught up (keep-alive)
    assert not m.upstream_behind(2.0, caught_up)
    m.report("s", "B", float("-inf"), 3.0, reads=["t:1"], of=2, behind=True)  # B takes t:1 over
    assert m.upstream_behind(3.0, caught_up)
    m.report("s", "A", 100.0, 4.0, reads=["t:0"], of=2, behind=False)
    m.report("s", "B", 90.0, 4.0, reads=["t:1"], of=2, behind=False)
    assert not m.upstream_behind(4.0, caught_up)
    # B falls silent: t:1 has no live writer any more, so more of it may still come
    m.report("s", "A", 120.0, 25.0, reads=["t:0"], of=2, behind=False)
    assert m.upstream_behind(25.0, caught_up)


def test_an_idle_writer_covers_its_partitions_and_holds_nothing_back():
    """A node-stage member whose input has gone quiet (partitions of no node, a job that ended)
    says it is idle: the job stage counts the partitions it reads as covered and does not wait
    for it. Its last progress word, repeated, held every job stage at that time for good; silent,
    it left its partitions uncovered (the same stall)."""
    m = WatermarkMerge(max_idle_s=100, writer_ttl_s=15)
    m.assign(["s"], 0.0)
    m.report("s", "A", 50.0, 0.0, reads=["t:0"], of=2)  # A's input went quiet at 50
    m.report("s", "B", 100.0, 0.0, reads=["t:1"], of=2)
    m.add("s", 0, 80.0, "B's record at 80", 0.0)
    assert m.release(0.0, {"s": False}) == []  # A may still write something before 80
    m.report("s", "A", 50.0, 1.0, reads=["t:0"], of=2, idle=True)
    assert m.release(1.0, {"s": False}) == ["B's record at 80"] and m.progress == 100.0
    # still heard from (its keep-alive), A keeps covering t:0 long after its last progress
    m.report("s", "A", 50.0, 30.0, reads=["t:0"], of=2, idle=True)
    m.report("s", "B", 200.0, 30.0, reads=["t:1"], of=2)
    m.add("s", 1, 150.0, "B's record at 150", 30.0)
    assert m.release(30.0, {"s": False}) == ["B's record at 150"]
    # every writer idle: nothing more on its way, what is held goes
    m.add("s", 2, 210.0, "B's last", 31.0)
    m.report("s", "B", 210.0, 31.0, reads=["t:1"], of=2, idle=True)
    assert m.release(31.0, {"s": False}) == ["B's last"] and m.progress == 210.0
    # A wakes up (new input): its word holds again
    m.report("s", "A", 205.0, 32.0, reads=["t:0"], of=2)
    m.add("s", 3, 209.0, "later", 32.0)
    assert m.release(32.0, {"s": False}) == []


def test_quiet_partitions_hand_everything_on_in_one_release_not_one_partition_per_call():
    """At the end of a backlog (or a job's quiet stretch) each caught-up partition goes idle once
    what it holds is handed on, and the next one then sets the low watermark: all of that is one
    call. Judged once per call, the consumer handed on one partition per poll timeout."""
    m = WatermarkMerge(max_idle_s=2.0)
    parts = [("t", p) for p in range(10)]
    m.assign(parts, wall_now=0.0)
    for p, part in enumerate(parts):
        for k in range(5):
            m.add(part, k, 100.0 + 10 * p + k, (p, k), wall_now=0.0)
    caught_up = {p: True for p in parts}
    assert m.release(1.0, caught_up) == [(0, k) for k in range(5)]  # not quiet long enough yet
    out = m.release(10.0, caught_up)
    assert out == [(p, k) for p in range(1, 10) for k in range(5)]
    assert m.held == 0


def test_a_partition_still_being_read_keeps_holding_the_others_back():
    m = WatermarkMerge(max_idle_s=2.0)
    a, b, c = ("t", 0), ("t", 1), ("t", 2)
    m.assign([a, b, c], wall_now=0.0)
    m.add(a, 0, 100.0, "a0", wall_now=0.0)
    m.add(b, 0, 200.0, "b0", wall_now=0.0)
    m.add(c, 0, 250.0, "c0", wall_now=0.0)
    # b has more to read: its next records may come before 250, so c0 waits
    assert m.release(10.0, {a: True, b: False, c: True}) == ["a0", "b0"]
    assert m.release(10.0, {a: True, b: True, c: True}) == ["c0"]


def test_writers_all_silent_bind_by_their_last_words_not_the_partitions_data():
    """Two node-stage members, both starved silent for longer than the TTL: A's records past B's
    last word wait for B (released by the partition's own data, B's nodes' heartbeats came after
    their peers' had judged them silent: issue 32). A word superseded by a later writer's (its
    partitions taken over) binds no more."""
    m = WatermarkMerge(max_idle_s=2.0, writer_ttl_s=15.0)
    m.assign(["s"], 0.0)
    m.report("s", "A", 300.0, 0.0, 0.0, reads=["t:0"], of=2)
    m.report("s", "B", 200.0, 1.0, 1.0, reads=["t:1"], of=2)
    m.add("s", 0, 190.0, "b190", 1.0)
    m.add("s", 1, 290.0, "a290", 1.0)
    assert m.release(2.0, {"s": True}) == ["b190"]
    assert m.release(60.0, {"s": True}) == []  # both silent for a minute: B's word still binds
    # C took both partitions over and spoke, then fell silent too: A's and B's words are superseded
    m.report("s", "C", 295.0, 61.0, 61.0, reads=["t:0", "t:1"], of=2)
    assert m.release(62.0, {"s": True}) == ["a290"]
    m.add("s", 2, 299.0, "c299", 62.0)
    assert m.release(200.0, {"s": True}) == []  # C's last word (295) binds, not B's 200


def test_a_writer_that_says_it_is_behind_holds_back_whatever_it_says_of_idleness():
    """A member revoked mid-rebalance has an empty merge, so "idle", while its input is unread: a
    word saying both must hold the partition at its progress, not hand on the other writer's
    records past it (issue 32: 220 s of one member's records ran past the other's)."""
    m = WatermarkMerge(max_idle_s=100, writer_ttl_s=15)
    m.assign(["s"], 0.0)
    m.report("s", "A", 50.0, 0.0, reads=["t:0"], of=2, behind=True, idle=True)
    m.report("s", "B", 300.0, 0.0, reads=["t:1"], of=2, idle=True)
    m.add("s", 0, 80.0, "B's record at 80", 0.0)
    assert m.release(1.0, {"s": True}) == []
    m.report("s", "A", 90.0, 2.0, reads=["t:0"], of=2, behind=True)
    assert m.release(2.0, {"s": True}) == ["B's record at 80"]


def _state(merge: WatermarkMerge, parts) -> list:
    return [(p, merge.frontier(p), merge._parts[p].watermark, merge._parts[p].held) for p in parts]


def _commits(merge: WatermarkMerge, parts) -> list:
    return [merge.lowest_held_offset(p) for p in parts]


def _lowest_held(merge: WatermarkMerge, parts) -> list:
    """Each partition's lowest offset among the records held (items (partition, offset)): where a commit stops."""
    return [min((o for q, o in merge.held_items() if q == p), default=None) for p in parts]


def test_a_partitions_run_added_at_once_is_held_and_released_as_one_record_at_a_time():
    """add_run (the runner's per-poll call) and the batched release against add() and each offset
    let go record by record: the same records go in the same order at every release, the same
    marks; the offsets committable are the lowest of the records held, the heap's wherever it was
    right. The heap's lazy deletion (a set of offsets released) could not count a bundle's copies: two
    events of one bundle let go while a lower offset was held left a copy of its offset on the heap
    with none of its records held, and the commit stopped there for good (seen in this run)."""
    rnd = random.Random(56)
    # the reference holds every record on one heap and lets each offset go alone, as the merge did
    one, runs = one_heap(WatermarkMerge(max_held=60)), WatermarkMerge(max_held=60)
    parts = [f"p{i}" for i in range(5)]
    for merge in (one, runs):
        merge.assign(parts, NOW)
    offsets = dict.fromkeys(parts, 0)
    released_one, released_runs = [], []
    same = stuck = 0
    for poll in range(60):
        wall = NOW + poll
        for p in rnd.sample(parts, rnd.randint(1, 5)):
            n = rnd.randint(1, 30)
            # event times that wander back and forth within a partition, ties included
            times = [NOW + poll + rnd.choice([-3.0, -1.0, 0.0, 0.0, 0.5, 2.0]) for _ in range(n)]
            if rnd.random() < 0.2:  # a bundle: its events all at its offset
                offs = [offsets[p]] * n
                offsets[p] += 1
            else:
                offs = list(range(offsets[p], offsets[p] + n))
                offsets[p] += n
            stamps = [rnd.choice([None, (NOW + poll) * 1000]) for _ in range(n)]
            items = [(p, o) for o in offs]
            for o, ts, item, ms in zip(offs, times, items, stamps, strict=True):
                one.add(p, o, ts, item, wall, None if ms is None else ms / 1000.0)
            latest = max((ms or 0) for ms in stamps)
            runs.add_run(p, offs, times, items, wall, latest / 1000.0 if latest > 0 else None)
        caught_up = {p: rnd.random() < 0.5 for p in parts}
        released_one += [one.release(wall, caught_up)]
        released_runs += [runs.release(wall, caught_up)]
        assert released_one[-1] == released_runs[-1]
        assert _state(one, parts) == _state(runs, parts) and one.held == runs.held
        assert one.progress == runs.progress and one.forced == runs.forced
        truth, heap_commits = _lowest_held(runs, parts), _commits(one, parts)
        assert _commits(runs, parts) == truth
        same += sum(h == t for h, t in zip(heap_commits, truth, strict=True))
        # where the heap differs, it stops below every record held: an offset whose records all went
        stuck += sum(h is not None and (t is None or h < t) for h, t in zip(heap_commits, truth, strict=True))
        assert all(h == t or (h is not None and (t is None or h < t)) for h, t in zip(heap_commits, truth, strict=True))
    assert sum(map(len, released_one)) > 500 and one.forced > 0  # releases of both kinds happened
    assert same > 50 and stuck > 0  # mostly the same commits; the heap's stuck copy happened
    assert one.drain() == runs.drain() and _state(one, parts) == _state(runs, parts)
    assert _commits(runs, parts) == [None] * len(parts)


def test_a_nodes_median_is_the_statistics_median_of_its_recent_offsets() -> None:
    # The clock takes a node's median inline every 8 records (issue 56): statistics.median's value, of an
    # even count (8 held) and of an odd one (the 15 a node keeps), offsets in no order.
    clock = EventClock()
    rng = random.Random(56)
    for i in range(24):
        record_ts = 1_767_225_600.0 + i
        clock.observe_many([("j", "n1", record_ts + rng.uniform(-3.0, 3.0), record_ts)], record_ts)
        entry = clock._nodes[("j", "n1")]
        if (i + 1) % 8 == 0:
            assert entry.median == statistics.median(entry.recent)
            assert len(entry.recent) == min(i + 1, 15)
