"""The outside check, round 3: incidents as an SRE lives them, written from docs/events.md alone.

tests/outside/sre_shapes.py writes eight 15-minute traces (an MoE job's one slow expert rank, a
pipeline's last stage always slower, a 4-minute checkpoint save, sharded and by one writer, a rolling driver upgrade,
a job that ends, two jobs under one switch with one flapping NIC, a machine whose clock runs 30 s
behind) and beside each what a person expects; tests/fixtures/outside/sre/ keeps those expect files
as reviewed. Offline each goes through `faultlens check`; marked broker, five of them as one stream,
replayed at once into a broker and read as a backlog by three members of one group.

Found by this round: the sharded checkpoint save was a reattempt in place, the one-writer save an
eviction of the writer's healthy machine (fixed in diagnosis/hang/saving.py, unit tests in
tests/diagnosis/test_hang_checkpoint_write.py); the machine whose clock is 30 s behind was
evicted as node_silent (its last beat stamped 30 s before its peers' last ones): liveness now judges
it on its clock corrected by what its step stamps show against its peers' (diagnosis/rules/step_clocks.py,
unit tests in tests/diagnosis/test_skew_liveness.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.outside import modes
from tests.outside.modes import acting, assert_every_trace_expected, assert_expect_files_kept, with_offline
from tests.outside.sre_shapes import SCENARIOS, write_all

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "outside" / "sre"
KNOWN: set[str] = set()  # traces a known failure is about (none now)
BROKER_SET = ["checkpoint_stall", "rolling_upgrade", "job_end", "shared_switch_flap", "clock_skew"]
EVICTING = ("evict", "evict_reset_gpu")


traces, checked_and_found, checked, found = modes.written_and_checked(write_all, SCENARIOS, "outside-sre")


def test_the_expect_files_kept_are_the_ones_the_writer_writes(traces):
    assert_expect_files_kept(traces, FIXTURES, SCENARIOS)


@pytest.mark.long(15)
def test_every_incident_gives_what_an_sre_expects(checked):
    assert_every_trace_expected(checked, SCENARIOS, KNOWN)


@pytest.mark.long(3)
def test_a_checkpoint_save_of_four_minutes_is_no_hang(found):
    diagnoses = found["checkpoint_stall"]
    hang = [d for d in diagnoses if d["fault"] == "job_hang" and d["action"] != "capture_stacks"]
    assert [d["action"] for d in hang] == ["none"] and "writing their checkpoint" in hang[0]["detail"]


@pytest.mark.long(3)
def test_one_rank_writing_the_whole_checkpoint_keeps_its_machine(found):
    diagnoses = found["checkpoint_one_writer"]
    hang = [d for d in diagnoses if d["fault"] == "job_hang" and d["action"] != "capture_stacks"]
    assert [(d["action"], d["ranks"]) for d in hang] == [("none", [0])] and "a save under way" in hang[0]["detail"]


@pytest.mark.long(3)
def test_a_machine_whose_clock_is_30s_behind_is_never_evicted(checked, found):
    """Before: its last beat stamped 30 s before its peers' last ones, at the trace's end it was
    node_silent, action evict. Its step stamps show the error: recorded as clock_skew, no eviction."""
    r = checked["clock_skew"]
    assert r["healthy_evicted"] == [] and r["ok"], (r["extra"], r["healthy_evicted"])
    assert [(d["fault"], d["action"], d["nodes"]) for d in found["clock_skew"] if d["fault"] in ("clock_skew", "node_silent")] == [
        ("clock_skew", "none", ["skw-r2-03"])
    ]


@pytest.mark.broker
@pytest.mark.long(60)
def test_as_a_backlog_read_by_three_members_the_verdicts_are_analyzes(tmp_path):
    """Five of the incidents as one stream, replayed as fast as the broker takes it while three
    `faultlens diagnose --group G` members read (one holds the lease): a backlog and several members
    at once. The split stages (3 node + 3 job members) take 7 minutes here: run them with
    `python -m tests.outside.modes STREAM --modes split`."""
    stream = tmp_path / "stream.parquet"
    write_all(tmp_path / "traces", BROKER_SET, combined=stream)
    found, off = with_offline(stream, "group", tmp_path, speed=0)
    assert acting(found) == acting(off)
    evicted = {(d["job"], n) for d in found if d["action"] in EVICTING for n in d["nodes"]}
    assert evicted == {("outside-switch-b", "sb-r1-04")}
