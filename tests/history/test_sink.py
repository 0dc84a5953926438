"""The sink: Arrow batches, idempotent inserts, sampling, timeline marks, records it refuses."""

from __future__ import annotations

import math

import msgspec
import pyarrow as pa
import pytest

from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.history.schema import memory_history
from faultlens.history.sink import SCHEMAS, HistorySink, Sampling, build_batch
from tests.history import known
from tests.history.known import T0


def _counts(conn) -> dict[str, int]:
    return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in SCHEMAS}


def _gpu_samples(n: int) -> list[Envelope]:
    return [Envelope(ts=T0 + i, job="j1", node=f"n{i % 4}", source="gpu", kind="sample", id=f"gpu-{i}",
                     data={"gpus": [{"index": 0, "util": 99}], "interval_s": 1}) for i in range(n)]


def test_batch_is_arrow_tables_with_the_schema():
    batch = build_batch(known.records())
    assert set(batch.tables) == set(SCHEMAS)
    for name, table in batch.tables.items():
        assert isinstance(table, pa.Table) and table.schema == SCHEMAS[name]
    assert batch.rows()["diagnoses"] == 4 and batch.rows()["commands"] == 2
    assert batch.rejected == []


def test_same_batch_twice_keeps_the_same_rows():
    conn = memory_history()
    sink = HistorySink(conn)
    batch = build_batch(known.records())
    first = sink.write(batch)
    after_first = _counts(conn)
    second = sink.write(batch)
    assert _counts(conn) == after_first
    assert sum(second.values()) == 0 and first["events"] == after_first["events"] == 119


def test_duplicates_inside_one_batch_are_stored_once():
    conn = memory_history()
    recs = known.records()
    HistorySink(conn).write(build_batch(recs + recs[:50]))
    assert _counts(conn)["events"] == 119


def test_rows_keep_every_field():
    conn = memory_history()
    HistorySink(conn).write(build_batch(known.records()))
    d2 = conn.execute('SELECT id, job, ts, onset, fault, nodes, ranks, "group", confidence, action, evidence, '
                      "detail, count FROM diagnoses WHERE id = 'd2'").fetchone()
    assert d2 == ("d2", "j1", T0 + 90, T0 + 80, "nccl_error", ["n2", "n3"], [4, 6], "pp:1", 0.9, "evict", [], "", 12)
    c2 = conn.execute("SELECT nodes, diagnosis_id, issued_at, signature, params FROM commands WHERE id = 'c2'").fetchone()
    assert c2 == (["n2", "n3", "n0"], "d2", T0 + 91, "sig2", "{}")
    ev = conn.execute("SELECT fault, node, data->>'pci' FROM events WHERE id = 'k-lost'").fetchone()
    assert ev == ("gpu_lost", "n1", "0000:3b:00.0")
    step = conn.execute("SELECT rank, step FROM events WHERE id = ?", [f"j1-step-{T0 + 3}"]).fetchone()
    assert step == (0, 3)


def test_timeline_marks():
    conn = memory_history()
    HistorySink(conn).write(build_batch(known.records()))
    states = dict(conn.execute("SELECT state, count(*) FROM job_timeline GROUP BY state").fetchall())
    # 85 + 30 step seconds; onsets of d1, d2, d4 (d3 is record-only); 2 topologies + 1 restart + 2 evicts
    assert states == {"running": 115, "down": 3, "restarting": 5}


def test_sampling_is_deterministic_and_only_for_samples():
    samples = _gpu_samples(2000)
    other = known.events()
    kept = build_batch(samples + other, Sampling(0.1))
    again = build_batch(list(reversed(samples + other)), Sampling(0.1))
    ids = set(kept.tables["events"].column("id").to_pylist())
    assert ids == set(again.tables["events"].column("id").to_pylist())
    kept_samples = sum(1 for i in ids if i.startswith("gpu-"))
    assert 100 < kept_samples < 300  # about 10 % of 2000
    assert kept.sampled_out == 2000 - kept_samples
    assert len(ids) - kept_samples == len(other)  # nothing but samples is ever dropped
    assert build_batch(samples, Sampling(0.0)).tables["events"].num_rows == 0
    assert build_batch(samples, Sampling(1.0)).tables["events"].num_rows == 2000


@pytest.mark.parametrize("rate", [-0.1, 1.5, math.nan])
def test_bad_sample_rate(rate):
    with pytest.raises(ValueError, match="sample rate"):
        Sampling(rate)


def test_unstorable_records_are_rejected_with_a_reason_and_the_rest_stored():
    bad_diag = Diagnosis(id="bad", job="j1", ts=math.inf, onset=T0, fault="unknown", action="none")
    huge_rank = Diagnosis(id="huge", job="j1", ts=T0, onset=T0, fault="unknown", action="none", ranks=(2**40,))
    bad_cmd = Command(id="badc", job="j1", action="stop", issued_at=T0, expires_at=math.nan)
    good = known.records()
    items = [bad_diag, *good[:10], huge_rank, "garbage", bad_cmd]
    batch = build_batch(items)
    reasons = {r.index: r.reason for r in batch.rejected}
    assert set(reasons) == {0, 11, 12, 13}
    assert "ts is not finite" in reasons[0]
    assert "out of range" in reasons[11]
    assert "not an event" in reasons[12]
    assert "expires_at" in reasons[13]
    conn = memory_history()
    HistorySink(conn).write(batch)
    assert _counts(conn)["events"] == 10


def test_event_payload_oddities_do_not_reject():
    e = Envelope(ts=T0, job="j", node="n", source="nccl", kind="exception", id="odd",
                 data={"rank": "seven", "step": 2**70, "fault": 5})
    conn = memory_history()
    HistorySink(conn).write(build_batch([e]))
    assert conn.execute("SELECT rank, step, fault FROM events").fetchone() == (None, None, None)


def test_labels_are_idempotent_and_rejected_when_faultless():
    conn = memory_history()
    sink = HistorySink(conn)
    batch = build_batch([], labels=[*known.LABELS, {"job": "j1", "nodes": ["n9"]}])
    assert [r.reason for r in batch.rejected] == ["label: label has no fault class"]
    sink.write(batch)
    sink.write(build_batch([], labels=known.LABELS))
    assert _counts(conn)["labels"] == 2


def test_a_fuller_version_of_a_diagnosis_replaces_the_stored_one():

    conn = memory_history()
    sink = HistorySink(conn)
    v1 = known.D1
    v3 = msgspec.structs.replace(v1, count=3, ts=v1.ts + 5, evidence=("a", "b", "c"))
    sink.write(build_batch([v1, msgspec.structs.replace(v1, count=2)]))  # both versions in one batch
    assert conn.execute("SELECT count FROM diagnoses").fetchall() == [(2,)]
    sink.write(build_batch([v3]))
    sink.write(build_batch([v1]))  # an older version re-delivered changes nothing
    assert conn.execute("SELECT count, ts, evidence FROM diagnoses").fetchall() == [(3, v1.ts + 5, ["a", "b", "c"])]


@pytest.mark.parametrize("size", [1, 3])
def test_how_the_records_are_cut_into_batches_leaves_the_same_rows(size):
    # The demo writes a second's worth of polls in one batch (faultlens/demo/wiring.py PacedWrites):
    # the history holds what per-poll batches would have written, table for table and row for row.
    records = known.records() + _gpu_samples(40)
    sampling = Sampling(0.5)

    def tables(batches) -> dict[str, list]:
        conn = memory_history()
        sink = HistorySink(conn)
        for batch in batches:
            sink.write(build_batch(batch, sampling))
        return {t: sorted(map(repr, conn.execute(f"SELECT * FROM {t}").fetchall())) for t in SCHEMAS}

    whole = tables([records])
    assert whole["events"] and whole["diagnoses"] and whole["commands"]
    assert tables([records[i:i + size] for i in range(0, len(records), size)]) == whole
