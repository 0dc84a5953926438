"""The broker-outage spool: order, persistence, the bound, and what it may drop."""

from __future__ import annotations

import time

import pytest

from faultlens.collectors.spool import Spool, SpoolBusy
from faultlens.collectors.spool_format import SpooledRecord, is_droppable
from faultlens.events.envelope import Envelope, encode


def _event(source: str, kind: str, n: int, pad: int = 0) -> SpooledRecord:
    env = Envelope(ts=time.time(), job="j", node="n1", source=source, kind=kind, data={"n": n, "pad": "x" * pad})
    return SpooledRecord("telemetry." + source, b"n1", encode(env))


def _n(record: SpooledRecord) -> int:
    import orjson

    return orjson.loads(record.value)["data"]["n"]


def test_droppable_kinds_are_the_periodic_ones():
    assert is_droppable("gpu", "sample") and is_droppable("host", "sample") and is_droppable("heartbeat", "beat")
    for source, kind in [("gpu", "xid"), ("gpu", "lost"), ("kernel", "xid"), ("nccl", "nccl_timeout"), ("stack", "stack_dump")]:
        assert not is_droppable(source, kind)


def test_fifo_order_and_ack(tmp_path):
    spool = Spool(tmp_path, 10 * 1024 * 1024)
    for i in range(20):
        assert spool.append(_event("kernel", "xid", i), droppable=False)
    assert len(spool) == 20
    assert [_n(r) for r in spool.peek(5)] == [0, 1, 2, 3, 4]
    spool.ack(5)
    assert [_n(r) for r in spool.peek(100)] == list(range(5, 20))
    spool.ack(15)
    assert len(spool) == 0 and spool.peek(10) == []
    assert spool.path.stat().st_size == 0  # an empty spool leaves no file content behind


def test_records_survive_a_restart_and_sent_ones_stay_sent(tmp_path):
    spool = Spool(tmp_path, 10 * 1024 * 1024)
    for i in range(10):
        spool.append(_event("nccl", "nccl_error", i), droppable=False)
    spool.ack(3)
    spool.close()
    again = Spool(tmp_path, 10 * 1024 * 1024)
    assert again.stats.recovered == 7
    assert [_n(r) for r in again.peek(100)] == list(range(3, 10))
    record = again.peek(1)[0]
    assert record.topic == "telemetry.nccl" and record.key == b"n1"


def test_torn_tail_is_cut_and_the_rest_kept(tmp_path):
    spool = Spool(tmp_path, 10 * 1024 * 1024)
    for i in range(4):
        spool.append(_event("kernel", "xid", i), droppable=False)
    spool.close()
    with open(tmp_path / Spool.FILE_NAME, "ab") as f:
        f.write(b"\x00\x00\x01\x00garbage")  # a crash in the middle of writing a record
    again = Spool(tmp_path, 10 * 1024 * 1024)
    assert again.stats.torn_bytes == 11
    assert [_n(r) for r in again.peek(100)] == [0, 1, 2, 3]
    again.append(_event("kernel", "xid", 4), droppable=False)
    assert [_n(r) for r in again.peek(100)] == [0, 1, 2, 3, 4]


def test_bound_drops_oldest_samples_first_and_never_a_fault(tmp_path):
    spool = Spool(tmp_path, 64 * 1024)
    # Interleave: every 5th record is a fault, the rest GPU samples of ~1 KB.
    faults = []
    for i in range(400):
        if i % 5 == 0:
            spool.append(_event("kernel", "xid", i), droppable=False)
            faults.append(i)
        else:
            spool.append(_event("gpu", "sample", i, pad=1000), droppable=True)
    kept = [_n(r) for r in spool.peek(10_000)]
    assert spool.stats.dropped > 0
    assert [n for n in kept if n % 5 == 0] == faults  # every fault, in order
    assert kept == sorted(kept)  # order holds for what is left
    samples = [n for n in kept if n % 5]
    assert samples and min(samples) > 100  # the oldest samples went, the newest stayed
    assert spool.live_bytes <= 64 * 1024
    assert spool.path.stat().st_size <= 2 * 64 * 1024  # compaction keeps the file near its content


def test_faults_are_kept_over_the_bound(tmp_path):
    spool = Spool(tmp_path, 8 * 1024)
    for i in range(50):
        assert spool.append(_event("nccl", "nccl_timeout", i, pad=400), droppable=False)
    assert len(spool) == 50
    assert spool.stats.over_bound > 0 and spool.stats.dropped == 0
    # A sample that does not fit next to faults is refused rather than evicting a fault.
    assert not spool.append(_event("gpu", "sample", 99, pad=400), droppable=True)
    assert [_n(r) for r in spool.peek(100)] == list(range(50))


def test_recovered_records_know_what_is_droppable(tmp_path):
    spool = Spool(tmp_path, 1024 * 1024)
    spool.append(_event("gpu", "sample", 0, pad=3000), droppable=True)
    spool.append(_event("kernel", "xid", 1), droppable=False)
    spool.close()
    small = Spool(tmp_path, 4 * 1024)  # reopened with a smaller bound
    small.append(_event("kernel", "xid", 2, pad=2000), droppable=False)
    assert [_n(r) for r in small.peek(10)] == [1, 2]


def test_bad_bound_is_refused(tmp_path):
    with pytest.raises(ValueError):
        Spool(tmp_path, 0)


def test_one_agent_per_spool(tmp_path):
    first = Spool(tmp_path, 1024 * 1024)
    with pytest.raises(SpoolBusy, match="in use by another agent"):
        Spool(tmp_path, 1024 * 1024)
    first.close()
    Spool(tmp_path, 1024 * 1024).close()  # free again once the first is closed
