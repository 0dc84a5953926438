"""The outside check, round 2: traces of other shapes from docs/events.md alone, offline and as a backlog.

tests/outside/stream_shapes.py writes four: two jobs sharing a machine at 10 Hz and 0.1 Hz steps
(the slow one hangs with its culprit on the shared machine), a machine replaced by a standby after
its GPU fell off the bus, the same swap with the new topology read 20 s late, and the same swap
delivered at least once, out of order across machines, with unknown keys and unknown kinds.
tests/fixtures/outside/streams/ keeps the expect files as reviewed. Offline every trace goes
through `faultlens check`; marked broker, all four and the hung jobs of tests/outside/dump_shapes.py
as one backlog through `faultlens diagnose`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.outside import modes
from tests.outside.dump_shapes import write_all as write_dumps
from tests.outside.modes import acting, analyzed, assert_every_trace_expected, assert_expect_files_kept, offline, with_offline
from tests.outside.stream_shapes import SCENARIOS, UNKNOWN_KINDS, outage, write_all

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "outside" / "streams"
SILENCE = ("telemetry_lost", "node_silent")


traces, checked_and_found, checked, found = modes.written_and_checked(write_all, SCENARIOS, "outside-streams")


def test_the_expect_files_kept_are_the_ones_the_writer_writes(traces):
    assert_expect_files_kept(traces, FIXTURES, SCENARIOS)


@pytest.mark.long(25)
def test_every_trace_gives_what_a_user_expects(checked):
    assert_every_trace_expected(checked, SCENARIOS)


def _verdicts(diagnoses: list[dict]) -> set:
    """Acting verdicts without the job's name (the same swap is written under three names)."""
    return {k[1:] for k in acting(diagnoses)}


@pytest.fixture(scope="module")
def at_least_once(traces) -> tuple[list[dict], dict]:
    """`faultlens analyze` of at_least_once, once: its diagnoses and its summary."""
    return analyzed(traces / "at_least_once.parquet")


@pytest.mark.long(15)
def test_duplicates_disorder_unknown_keys_and_a_late_topology_change_no_verdict(found, at_least_once):
    clean = _verdicts(found["standby_swap"])
    assert clean == {("gpu_lost", "evict", ("hgx-r2-02",), "")}
    assert _verdicts(at_least_once[0]) == clean
    assert _verdicts(found["late_topology"]) == clean


@pytest.fixture(scope="module")
def noisy(traces, at_least_once) -> tuple[dict, list[dict], set[str]]:
    """`faultlens analyze` of at_least_once: its summary, the rows of unknown kinds, the good rows' ids."""
    summary = at_least_once[1]
    rows = pq.read_table(traces / "at_least_once.parquet").to_pylist()
    unknown = {(source, kind) for source, kind, _ in UNKNOWN_KINDS}
    strange = [r for r in rows if (r["source"], r["kind"]) in unknown]
    good_ids = {r["id"] for r in rows if (r["source"], r["kind"]) not in unknown}
    assert strange and len(good_ids) < len(rows) - len(strange)   # the trace does hold duplicates
    return summary, strange, good_ids


@pytest.mark.long(8)
def test_unknown_kinds_are_dead_letters_and_no_good_event_is_lost(noisy):
    summary, strange, good_ids = noisy
    # Every good record is read once (a duplicate is dropped by its id); the dead letters: the next test.
    assert summary["events"] == len(good_ids)


def test_every_unknown_kind_is_one_dead_letter_even_delivered_twice(noisy):
    # Engine.process remembers a dead letter's id too; only another bad record is dropped by it.
    summary, strange, _ = noisy
    assert len(strange) > len({r["id"] for r in strange}), "the trace must deliver some unknown kinds twice"
    assert summary["dead_letters"] == len({r["id"] for r in strange})


@pytest.mark.long(5)
def test_a_job_wide_outage_then_staggered_return_names_no_silent_node(tmp_path):
    # A peer's word counts once it has reported for a grace since its own last gap
    # (diagnosis/rules/liveness.py, _going_on; tests/diagnosis/test_silence_outage.py).
    diagnoses = offline(outage(tmp_path / "outage.parquet"))
    assert [d for d in diagnoses if d["fault"] == "node_silent"] == []


@pytest.mark.long(5)
def test_a_longer_outage_asks_nobody_for_stacks(tmp_path):
    # 60 s lost: the first beats back, before any step, were a stall (capture_stacks of every rank);
    # the hang detector now waits a grace after the telemetry comes back (diagnosis/hang/detector.py).
    assert offline(outage(tmp_path / "outage.parquet", gap_s=60.0)) == []


@pytest.mark.broker
@pytest.mark.long(300)
def test_as_one_backlog_through_the_broker_the_verdicts_are_the_offline_ones(traces, tmp_path):
    # These four traces and the eight hung jobs of tests/outside/dump_shapes.py lie one after another
    # in event time: one stream of 13 jobs, replayed before `faultlens diagnose` starts, as a backlog
    # it reads after the fact (several partitions at once; the hangs' Flight Recorder dumps trail
    # their stacks as the hook sends them).
    hangs = tmp_path / "hangs"
    written = [hangs / f"{name}.parquet" for name in write_dumps(hangs)]
    every = written + [traces / f"{name}.parquet" for name in SCENARIOS]
    stream = tmp_path / "stream.parquet"
    pq.write_table(pa.concat_tables([pq.read_table(path) for path in every]), stream)
    backlog, off = with_offline(stream, "backlog", tmp_path)
    expected = {(v["job"], n) for path in every
                for v in map(json.loads, Path(f"{path}.expect.jsonl").read_text().splitlines()[1:])
                if v["action"] == "evict" for n in v["nodes"]}
    evicted = {(d["job"], n) for d in backlog if d["action"] == "evict" for n in d["nodes"]}
    assert evicted == expected
    quiet = {k for k in acting(backlog) if not (k[1] in SILENCE and k[2] == "alert")}
    assert quiet == {k for k in acting(off) if not (k[1] in SILENCE and k[2] == "alert")}
