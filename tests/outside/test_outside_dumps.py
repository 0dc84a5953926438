"""The outside check, round 2: hangs of trainers of other shapes, read from the dumps their agents send.

tests/outside/dump_shapes.py writes nine hung jobs (DeepSpeed ZeRO-3 with py-spy `--json` dumps on
8 GPUs a machine, and with two and three ranks stuck, FSDP on 16 a machine stuck in checkpoint I/O, with and
without a failing NFS filer, a Megatron pipeline on 4 a machine, a JAX job of one process a host,
two Flight Recorder jobs of three process groups a rank) and the
verdict a user expects of each; tests/fixtures/outside/dumps/ keeps those expect files as reviewed.
`faultlens check` judges them as a user would; every verdict must name a machine a person would
accept (or nobody, with an alert), and never evict a healthy one.

Found by this round, each fixed with a unit test in tests/diagnosis/test_hang_other_shapes.py:
py-spy `--json` dumps read as no dump at all (a reattempt where the culprit was plain); a JAX main
thread lost to the DataLoader's pin-memory thread; a mismatched collective evicting the machine
of the rank on the other branch; recorder dumps that trail the stacks left unread; a rank hung
writing to an NFS filer the job's own storage alert names got its machine evicted; two stuck ranks
of a pure data-parallel job evicted every machine of the job (its one DP group), and three on
three of four machines three of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.outside.dump_shapes import SCENARIOS, Hung, write_all
from tests.outside.modes import assert_expect_files_kept
from tests.outside.modes import checked as check_traces

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "outside" / "dumps"


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, dict[str, Hung]]:
    out = tmp_path_factory.mktemp("outside-dumps")
    return out, write_all(out)


@pytest.fixture(scope="module")
def checked(written) -> dict[str, dict]:
    out, _ = written
    return check_traces(out / f"{name}.parquet" for name in SCENARIOS)


def test_the_expect_files_kept_are_the_ones_the_writer_writes(written):
    assert_expect_files_kept(written[0], FIXTURES, SCENARIOS)


@pytest.mark.long(8)
def test_every_hang_gives_what_a_user_expects(checked):
    assert sorted(checked) == sorted(SCENARIOS)
    for name, r in checked.items():
        assert r["ok"], (name, r["missing"], r["extra"], r["changed"])
        assert r["healthy_evicted"] == [], name


def _hang_verdicts(trace: Path) -> list[dict]:
    done = subprocess.run([sys.executable, "-m", "faultlens", "analyze", "--no-progress", str(trace)],
                          capture_output=True, text=True, check=True)
    return [d for d in map(json.loads, done.stdout.splitlines())
            if d["fault"] == "job_hang" and d["action"] != "capture_stacks"]


@pytest.mark.long(2)
@pytest.mark.parametrize("name", ["zero3_json", "jax_hosts", "fr_mismatch", "fsdp_filer", "zero3_two_loaders",
                                  "zero3_three_loaders"])
def test_the_verdict_names_a_machine_a_person_accepts_or_nobody(written, name):
    # The three shapes this round found wrong: beside the expected verdict, what else would do.
    out, hung = written
    verdicts = _hang_verdicts(out / f"{name}.parquet")
    assert len(verdicts) == 1, verdicts
    v, accept = verdicts[0], hung[name]
    assert v["action"] in accept.accept_actions, v
    assert set(v["nodes"]) <= accept.blamed, v
    if v["action"] in ("evict", "evict_reset_gpu"):
        assert v["nodes"] and set(v["nodes"]) <= accept.blamed


@pytest.mark.long(2)
def test_a_mismatched_collective_says_so(written):
    out, _ = written
    [v] = _hang_verdicts(out / "fr_mismatch.parquet")
    assert v["action"] == "alert" and v["nodes"] == [] and "mismatched collective" in v["detail"]
    assert "no recorder dump" not in v["detail"]   # the last rank's recorder, which trails its stacks, was read
