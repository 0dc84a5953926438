"""The outside check, round 3: the peers' own test inputs, judged by faultlens as a user would.

nvidia-resiliency-ext tests its Flight Recorder attribution on real dumps of a 16-rank Megatron MoE
job with faults injected on two ranks (tests/outside/peer_inputs.py makes them faultlens traces:
one `stack`/`recorder_dump` a rank, as a trainer hook sends it, in a job whose steps stop). The
ranks the peer's analyser names must be the ones faultlens names, and no other machine evicted.

Found by this round (unit tests in tests/diagnosis/test_recorder_peer_dumps.py): recorder dumps
with no stack dump beside them were no dumps at all (a reattempt naming nobody); a faulted rank's
recorder, which stops retiring its calls, showed calls its peers had completed as still in flight,
so the group read as "joined but stuck" (a reattempt); an MoE all_to_all, whose members send
tensors of their own sizes by design, read as a mismatched collective (an alert on a trainer bug).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.outside.modes import assert_expect_files_kept, offline
from tests.outside.modes import checked as check_traces
from tests.outside.peer_inputs import CASES, PeerCase, write_all

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "outside" / "peers"


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, dict[str, PeerCase]]:
    out = tmp_path_factory.mktemp("outside-peers")
    return out, write_all(out)


def test_the_expect_files_kept_are_the_ones_the_writer_writes(written):
    assert_expect_files_kept(written[0], FIXTURES, CASES)


def test_the_peers_cases_are_what_its_logs_say(written):
    _, cases = written
    assert {n: (c.injected, c.named) for n, c in cases.items()} == {
        "gpu_error_1st": ([12, 14], [12]),
        "gpu_error_2nd": ([9, 14], [9, 14]),
        "lock_gil_1st": ([9, 14], [9, 14]),
        "lock_gil_2nd": ([10, 15], [10, 15]),
    }


@pytest.mark.long(6)
def test_every_peer_input_gives_what_its_analyser_says(written):
    out, _ = written
    results = check_traces(out / f"{name}.parquet" for name in CASES)
    assert sorted(results) == sorted(CASES)
    for name, r in results.items():
        assert r["ok"], (name, r["missing"], r["extra"], r["changed"])
        assert r["healthy_evicted"] == [], name


@pytest.mark.long(3)
@pytest.mark.parametrize("name", ["gpu_error_1st", "lock_gil_2nd"])
def test_the_hang_names_the_peers_ranks_from_their_recorders_alone(written, name):
    out, cases = written
    case = cases[name]
    [verdict] = [d for d in offline(out / f"{name}.parquet") if d["fault"] == "job_hang" and d["action"] != "capture_stacks"]
    assert verdict["ranks"] == case.named
    assert set(verdict["nodes"]) == case.nodes(case.named)
    assert "rule flight-recorder" in verdict["detail"] and "the recorder's word alone" in verdict["detail"]
