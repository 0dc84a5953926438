"""The example expect files (tests/fixtures/foreign/expect/<case>.parquet.expect.jsonl, written by
`faultlens check --expect` on the hand-written foreign traces and reviewed against their labels)
still hold: each is a replay test of the project's own, as a user's would be of theirs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.testbed import foreign
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.replay.expect import compare, read_expect

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "foreign" / "expect"
CASES = sorted(p.name.split(".")[0] for p in EXAMPLES.glob("*.parquet.expect.jsonl"))


def test_there_are_examples_and_one_expects_nothing():
    assert len(CASES) >= 5 and "healthy" in CASES
    assert read_expect(EXAMPLES / "healthy.parquet.expect.jsonl") == []


@pytest.mark.parametrize("case", CASES)
def test_example_expect_file_holds(case):
    expected = read_expect(EXAMPLES / f"{case}.parquet.expect.jsonl")
    trace = foreign.load(case)
    result = compare(expected, analyze(trace.events))
    assert result.ok, result.to_dict()
    # and every labelled fault of the case is among the verdicts a person reviewed
    for label in trace.labels:
        assert any(v.fault == label["fault"] and set(label["nodes"]) <= set(v.nodes) and v.holds_onset(label["onset"])
                   for v in expected), label
