"""A record-only diagnosis (action `none`) or a stack request is no detection that cost the job time:
the what-if projection's history inputs (sources.apply_history, headline.history_rows) count acting
diagnoses only, so a history full of record-only `unknown` findings (a rank reported from a machine
its topology does not name) measures neither a rate nor a detection of the `unknown` class.

The demo's "unknown localisation 0.16 %" is none of them either: it is the ByteRobust preset's
stop-time diagnosis (360 s, assumed) of its census's unclassified 6.6 %, the class the demo's
`user_code` detection lands on (docs/ettr.md's class table), and is there with no measurement at all.
"""

from __future__ import annotations

import pytest

from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.history.schema import open_history
from faultlens.history.sink import HistorySink, build_batch
from faultlens.history.whatif import presets, sources
from faultlens.history.whatif.closed_form import project
from faultlens.history.whatif.headline import history_rows

T0, DAY = 1_699_920_000.0, 86_400.0


def _beat(node: str, ts: float) -> Envelope:
    return Envelope(ts=ts, job="j", node=node, source="heartbeat", kind="beat", data={"seq": int(ts)})


def _misplaced(i: int) -> Diagnosis:
    """What rank_mismatch records: unknown, action none, at once (latency 0)."""
    ts = T0 + 3600.0 * (i + 1)
    return Diagnosis(
        id=f"r{i}",
        job="j",
        ts=ts,
        onset=ts,
        fault="unknown",
        action="none",
        nodes=("n1",),
        confidence=1.0,
        detail=f"rank {i} reported from n1 but the topology has it on node s0",
        rule="rank-placement",
    )


def _history(tmp_path, diagnoses: list[Diagnosis]):
    records = [_beat(n, T0 + t) for n in ("n0", "n1") for t in (0.0, DAY)]
    db = tmp_path / "h.duckdb"
    conn = open_history(db, create=True)
    HistorySink(conn).write(build_batch(records + diagnoses))
    conn.close()
    return db


RECORDS = [_misplaced(i) for i in range(5)]
STACKS = Diagnosis(
    id="s", job="j", ts=T0 + 100, onset=T0 + 10, fault="unknown", action="capture_stacks", nodes=("n0", "n1"), confidence=0.5
)
ACTING = Diagnosis(
    id="a", job="j", ts=T0 + 7230, onset=T0 + 7200, fault="unknown", action="reattempt", nodes=("n0",), confidence=0.9
)


def test_record_only_and_stack_requests_measure_nothing(tmp_path):
    db = _history(tmp_path, [*RECORDS, STACKS])
    preset = presets.byterobust()
    s, note = sources.apply_history(preset, db)
    assert "unknown" not in note["measured"]
    assert {f.name: f for f in s.faults}["unknown"] == {f.name: f for f in preset.faults}["unknown"]
    assert project(s).breakdown["unknown"] == pytest.approx(project(preset).breakdown["unknown"])
    conn = open_history(db)
    try:
        assert history_rows(conn) == {}
    finally:
        conn.close()


def test_only_the_acting_diagnosis_is_counted_and_timed(tmp_path):
    db = _history(tmp_path, [*RECORDS, STACKS, ACTING])
    _, note = sources.apply_history(presets.byterobust(), db)
    unknown = note["measured"]["unknown"]
    assert (unknown["faults"], unknown["detection_p50_s"]) == (1, pytest.approx(30.0))  # not 0 s from the records
    conn = open_history(db)
    try:
        rows = history_rows(conn)
    finally:
        conn.close()
    assert {k: (r["labels"], r["detection_latency_p50_s"]) for k, r in rows.items()} == {"unknown": (1, pytest.approx(30.0))}


def test_the_unknown_localisation_of_the_demo_is_the_presets_assumed_stop_time_diagnosis():
    preset = presets.byterobust()
    assert project(preset).breakdown["unknown"]["localisation"] == pytest.approx(0.0016, abs=0.0001)
    user_code = {
        "fault": "user_code",
        "labels": 1,
        "detected": 1,
        "recall": 1.0,
        "detection_latency_p50_s": 0.0,
        "wrong_nodes": 0,
    }
    s, note = sources.apply_score(preset, {"user_code": user_code})
    assert note["measured"]["unknown"]["from"] == ["user_code"]
    assert s.provenance["faults.unknown.localise_s"].kind.value == "assumed"  # a stop-time class keeps the preset's
    assert project(s).breakdown["unknown"]["localisation"] == pytest.approx(
        project(preset).breakdown["unknown"]["localisation"], rel=0.01
    )
