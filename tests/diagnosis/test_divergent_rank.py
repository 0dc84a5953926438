"""The divergent branch named to its rank (issue 50): of the ranks that wait on each other in
collectives entered in different orders, the one whose recorder sequence disagrees with the
majority of its group is named, with how many agree and its stack; nobody is evicted."""

from __future__ import annotations

import re

import pytest

from faultlens.diagnosis.hang.recorder import read_hang
from faultlens.diagnosis.stacks.collective_match import CollectiveState, GroupWait
from faultlens.diagnosis.stacks.divergent_rank import odd_lines, odd_ranks, quote_stack
from tests.diagnosis.test_flight_recorder import SOFTWARE_CASES, _load, _streaming


@pytest.mark.parametrize("tool", ["py-spy", "faulthandler"])
@pytest.mark.parametrize("name", SOFTWARE_CASES)
def test_the_real_capture_names_the_rank_that_alone_entered_the_barrier(name, tool):
    case, topology, stacks, recorders = _load(name, tool)
    verdict = read_hang(stacks, recorders, topology)
    assert verdict.alert and verdict.nodes == ()
    assert verdict.outlier_ranks == (case["culprit_rank"],)
    culprit = case["culprit_rank"]
    others = len(topology.by_rank) - 1
    assert f"divergent rank(s) [{culprit}]: rank {culprit} alone is in barrier #1 of pg 0, which {others} of its " \
           f"{others + 1} members never entered" in verdict.detail
    # its stack is quoted: the barrier it alone called, from the trainer's own frame
    assert f"stack of rank {culprit}: barrier (torch/distributed/distributed_c10d.py" in verdict.detail
    assert re.search(r"stack of rank \d+: [^;]*report_progress \([^)]*make_fr_job\.py", verdict.detail)


def test_the_streaming_hang_path_alerts_naming_only_the_divergent_rank():
    case, out = _streaming("fr_tp2pp2dp2_extra_r5", tool="faulthandler")
    assert [d.action for d in out] == ["capture_stacks", "alert"]
    assert out[1].nodes == () and out[1].ranks == (case["culprit_rank"],)


def _wait(pg: str, seq: int, joined, never, op: str = "all_reduce") -> GroupWait:
    return GroupWait(pg=pg, seq=seq, op=op, members=tuple(sorted((*joined, *never))), joined=tuple(joined),
                     never_joined=tuple(never), no_dump=())


def _state(*waits: GroupWait) -> CollectiveState:
    return CollectiveState(waits=waits, edges={}, held={}, ends=(), no_dump_ends=(), members={}, dumped=())


def test_a_rank_one_step_ahead_in_a_side_group_is_named_with_the_three_that_agree():
    # The shape of issue 50's captures: 13 alone entered the side group's all_reduce; 1, 5, 9 are
    # in their data-parallel groups' collectives, which 13 never entered (each split 1 against 1).
    state = _state(_wait("side", 4, joined=(13,), never=(1, 5, 9)),
                   _wait("dp0", 9, joined=(1,), never=(13,)), _wait("dp1", 9, joined=(5,), never=(13,)))
    odd = odd_ranks(state, (1, 5, 9, 13))
    assert [(o.rank, o.pg, o.agree, o.members, o.ahead) for o in odd] == [(13, "side", 3, 4, True)]
    assert odd_lines(odd, {}, (1, 5, 9, 13))[0].startswith(
        "divergent rank(s) [13]: rank 13 alone is in all_reduce #4 of pg side, which 3 of its 4 members never entered")


def test_a_minority_that_never_entered_is_named_only_when_nobody_is_ahead():
    state = _state(_wait("w", 2, joined=(0, 1, 2), never=(3,)), _wait("p", 5, joined=(3,), never=(0,)))
    assert [(o.rank, o.ahead, o.agree) for o in odd_ranks(state, (0, 3))] == [(3, False, 3)]


def test_even_splits_name_nobody_and_say_so():
    state = _state(_wait("a", 1, joined=(0,), never=(1,)), _wait("b", 1, joined=(1,), never=(0,)))
    assert odd_ranks(state, (0, 1)) == ()
    assert "each split is even" in odd_lines((), {}, (0, 1))[0]


def test_a_rank_without_a_usable_stack_is_said_so():
    assert quote_stack(None) == "no stack dump"
    assert quote_stack("garbage\n") == "no usable stack"
