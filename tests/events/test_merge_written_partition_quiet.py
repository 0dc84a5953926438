"""A partition with upstream writers (the job stage's `summaries`, written by the node stage's
members) is as far along as their words on it say, however quiet it has been: its own quiet never
lets it stop holding the others back (events.event_time.WatermarkMerge._idle)."""

from __future__ import annotations

from faultlens.events.event_time import WatermarkMerge


def _two_partitions_one_writer() -> WatermarkMerge:
    """Partitions p (job A's) and q (job B's), written by one node-stage member W, its word on each
    after its records there; both read up to W's word 10."""
    m = WatermarkMerge(max_idle_s=2.0)
    m.assign(["p", "q"], 0.0)
    m.add("p", 0, 10.0, "A@10", 0.0)
    m.report("p", "W", 10.0, 0.0)
    m.add("q", 0, 10.0, "B@10", 0.0)
    m.report("q", "W", 10.0, 0.0)
    assert sorted(m.release(0.0, {"p": True, "q": True})) == ["A@10", "B@10"]
    return m


def test_a_writers_word_read_on_one_partition_releases_nothing_past_its_records_still_unread_on_another():
    m = _two_partitions_one_writer()
    # Three wall seconds on, a poll brings q's next records and W's next word (100) on q; p's records
    # of the same stretch, written before W's word on p, are not fetched yet (p looks caught up).
    m.add("q", 1, 60.0, "B@60", 3.0)
    m.add("q", 2, 100.0, "B@100", 3.0)
    m.report("q", "W", 100.0, 3.0)
    assert m.release(3.0, {"p": True, "q": True}) == []  # p is at W's word 10: B@60 waits for A's records
    m.add("p", 1, 50.0, "A@50", 3.5)
    m.add("p", 2, 100.0, "A@100", 3.5)
    m.report("p", "W", 100.0, 3.5)
    assert m.release(3.5, {"p": True, "q": True}) == ["A@50", "B@60", "B@100", "A@100"]  # (ties in arrival order)


def test_a_partition_whose_writers_went_idle_holds_nothing_back():
    m = _two_partitions_one_writer()
    m.report("p", "W", 10.0, 1.0, idle=True)
    m.add("q", 1, 60.0, "B@60", 3.0)
    m.report("q", "W", 60.0, 3.0)
    assert m.release(3.0, {"p": True, "q": True}) == ["B@60"]


def test_a_partition_no_writer_speaks_on_still_goes_idle_by_its_quiet():
    m = WatermarkMerge(max_idle_s=2.0)
    m.assign(["p", "q"], 0.0)
    m.add("p", 0, 10.0, "A@10", 0.0)
    m.add("q", 0, 10.0, "B@10", 0.0)
    m.release(0.0, {"p": True, "q": True})
    m.add("q", 1, 60.0, "B@60", 3.0)
    assert m.release(3.0, {"p": True, "q": True}) == ["B@60"]  # Kafka Streams' max.task.idle.ms
