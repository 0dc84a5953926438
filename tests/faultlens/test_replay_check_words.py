"""The words `faultlens check` prints for a difference (faultlens/replay_check.py render)."""

from __future__ import annotations

from pathlib import Path

from faultlens.diagnosis.replay.expect import Verdict, compare
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.replay_check import TraceCheck, render

T = 1_767_225_600.0


def test_two_changed_verdicts_of_one_fault_are_told_apart_by_their_action():
    # One hang, alerted on and then evicted; both now name n001 instead of n002.
    expected = [Verdict("j", "job_hang", ("n002",), action, T - 60, T + 60) for action in ("alert", "evict")]
    found = [
        Diagnosis(job="j", ts=T + 5, onset=T, fault="job_hang", action=action, nodes=("n001",)) for action in ("alert", "evict")
    ]
    result = compare(expected, found)
    changed = [
        line
        for line in render(TraceCheck(Path("t.parquet"), Path("t.parquet.expect.jsonl"), result)).splitlines()
        if line.startswith("  ~")
    ]
    assert changed == [
        "  ~ changed  j job_hang → alert: nodes [n002] → [n001]",
        "  ~ changed  j job_hang → evict: nodes [n002] → [n001]",
    ]
