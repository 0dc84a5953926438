"""The outside check, round 4: fleets and agents of shapes not tried yet, written from the user docs alone.

tests/outside/fleet_shapes.py writes nine traces (machines of 8 and 4 GPUs with A100s among H100s,
an elastic job going from 32 machines to 24 and back, an older driver's null and missing values, an
agent whose NVML hung on one GPU, steps arriving in bursts, an Xid 48 among correctable ECC counts,
a NIC down and every rank's watchdog timing out, a clock 90 s ahead, two jobs one after the other
on the same machines) and beside each what a person expects; tests/fixtures/outside/fleet/ keeps
those expect files as reviewed. Offline each goes through `faultlens check`; marked broker, three of
them as one stream read as a backlog by three members of one group.

Right on first sight: 7 of 9. Found by this round: in nic_wave the hang read the watchdog's "never
reported" ranks while the lines still arrived (48 of 64 in, the last 16 named: an alert on four
healthy machines); fixed in diagnosis/hang/cues.py (the quiet ranks count once the reports settled).
Two more, both in the engine's consequence suppression, were strict xfails until fixed at their cause
(diagnosis/engine/dedup_causes.py, dedup.py): a port down for good and an uncorrectable memory error stop
the job, so the hang or the peers' NCCL errors that follow are their echo; one machine's findings of one
fault are one verdict. Now 9 of 9.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.outside import modes
from tests.outside.fleet_shapes import SCENARIOS, write_all
from tests.outside.modes import acting, assert_every_trace_expected, assert_expect_files_kept, with_offline

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "outside" / "fleet"
# Through the broker, the fleets whose verdicts depend on the job stage seeing every member's part: a
# topology that changes, a job that ends beside one that starts, a wave of every rank's watchdog. The
# node-local ones (mixed_fleet, nvml_blind) are judged by one node-stage member whatever the split.
BROKER_SET = ["elastic", "nic_wave", "back_to_back"]
EVICTING = ("evict", "evict_reset_gpu")


traces, checked_and_found, checked, found = modes.written_and_checked(write_all, SCENARIOS, "outside-fleet")


def test_the_expect_files_kept_are_the_ones_the_writer_writes(traces):
    assert_expect_files_kept(traces, FIXTURES, SCENARIOS)


@pytest.mark.long(12)
def test_every_fleet_gives_what_a_user_expects(checked):
    assert_every_trace_expected(checked, SCENARIOS)


@pytest.mark.long(3)
def test_an_older_drivers_null_and_missing_values_are_no_dead_letters(traces):
    found, summary = modes.analyzed(traces / "nvml_nulls.parquet")
    assert summary.get("dead_letters", 0) == 0 and summary["events"] > 20_000
    assert [d for d in found if d["action"] != "none"] == []


@pytest.mark.long(3)
def test_a_nic_down_under_every_ranks_watchdog_names_no_other_machine(found):
    """Before: the watchdog lines were read as they came; with 48 of 64 in, all at one collective,
    the 16 not yet shipped were "never reported (last to log)": a job_hang alert naming the four
    healthy machines holding tp rank 3. The quiet ranks now count once the reports settled (30 s)."""
    diagnoses = found["nic_wave"]
    named = {n for d in diagnoses if d["action"] in ("alert", *EVICTING) for n in d["nodes"]}
    assert named == {"ibw-r3-02"}
    assert [(d["fault"], d["action"]) for d in diagnoses if d["action"] in EVICTING] == [("nic", "evict")]


def test_a_nic_down_is_one_verdict(checked):
    """Before: `nic` was no job-stopping primary, so the hang that followed the port going down (no
    dumps: "no culprit: reattempt in place") was judged alone, a reattempt naming all 16 machines,
    while the nic eviction waited the wave window. An eviction for a port down stops the job now
    (dedup_causes.STOPPING_WHEN), from the time the wave held it (Dedup.note_held)."""
    r = checked["nic_wave"]
    assert r["ok"], (r["extra"], r["changed"])


def test_an_xid48_among_correctable_counts_is_one_verdict(checked):
    """Before: the peers' "remote process exited" 20 s after the Xid 48 were judged alone (an
    nccl_error reattempt naming rank 0's healthy ecc-r1-01), and the one DBE was three verdicts on
    ecc-r1-04 (the Xid's evict_reset_gpu, the CUDA line's and the counters' evict: other entities).
    An uncorrectable memory error stops the job now, and the machine's findings of it fold into the
    Xid's verdict, the strongest, with their evidence."""
    r = checked["xid48_noise"]
    assert r["ok"], (r["extra"], r["changed"])


@pytest.mark.long(3)
def test_the_xid48_machine_alone_is_evicted_and_the_correctable_counts_are_noise(checked):
    r = checked["xid48_noise"]
    assert r["healthy_evicted"] == [] and r["missing"] == []


@pytest.mark.broker
@pytest.mark.long(60)
def test_as_a_backlog_read_by_three_members_the_verdicts_are_analyzes(tmp_path):
    """Three of the fleets as one stream, replayed as fast as the broker takes it while three
    `faultlens diagnose --group G` members read it: a backlog and several members at once."""
    stream = tmp_path / "stream.parquet"
    write_all(tmp_path / "traces", BROKER_SET, combined=stream)
    found, off = with_offline(stream, "group", tmp_path, speed=0)
    assert acting(found) == acting(off)
    evicted = {(d["job"], n) for d in found if d["action"] in EVICTING for n in d["nodes"]}
    assert evicted == {("fleet-nic-wave", "ibw-r3-02")}
