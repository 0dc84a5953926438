"""Flight Recorder dumps a peer project tests its own attribution on, read by faultlens's hang path.

nvidia-resiliency-ext's tests/attribution/unit/fr_traces/ (tests/fixtures/outside/peers/, provenance
in each file): a 16-rank Megatron MoE job of torch 2.9 + NCCL 2.27 with a GPU error (an out-of-bounds
index: a device-side assert) or a thread holding the GIL injected on two ranks, every rank's recorder
dumped on the watchdog's timeout, and the ranks the peer's analyser reports missing. No stack dumps.
"""

from __future__ import annotations

import json

import pytest

from bench.testbed.stack_samples import JOB, T0, beat_event, event, run_detector, step_event
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.implicit import ImplicitConfig, ImplicitFaultDetector
from faultlens.diagnosis.hang.recorder import RULE_RECORDER, read_hang
from faultlens.diagnosis.hang.state import HangConfig
from faultlens.diagnosis.stacks.collective_match import match_collectives
from faultlens.diagnosis.stacks.flight_recorder import load_recorder
from faultlens.events.diagnosis_record import Action
from faultlens.events.topology import Topology
from tests.outside.peer_inputs import load


def _case(name: str) -> tuple[Topology, dict[int, str], list[int]]:
    case = load(name)
    topology = Topology.from_data(case.job().topology())
    return topology, {r: json.dumps(d) for r, d in enumerate(case.dumps)}, case.named


def test_calls_a_group_peer_saw_complete_do_not_hold_a_rank_whose_recorder_stopped_retiring():
    # Rank 12's GPU faulted: its recorder still shows all_to_all #20530-#20536 of the expert group in
    # flight, where ranks 13 and 15 completed up to #20536 and wait in #20537, which 12 never entered.
    topology, recorders, _ = _case("gpu_error_1st")
    state = match_collectives({r: load_recorder(t) for r, t in recorders.items()}, topology)
    expert = next(w for w in state.waits if w.pg == "74")
    assert (expert.seq, expert.joined, expert.never_joined) == (20537, (13, 14, 15), (12,))
    assert state.ends == (12,)


def test_an_all_to_all_of_each_members_own_sizes_is_no_mismatched_collective():
    # A MoE dispatch sends each expert what was routed to it: 4027, 4007 and 4251 rows under one number.
    topology, recorders, _ = _case("gpu_error_1st")
    state = match_collectives({r: load_recorder(t) for r, t in recorders.items()}, topology)
    expert = next(w for w in state.waits if w.pg == "74")
    assert len({load_recorder(recorders[r]).at("74", 20537).sizes for r in expert.joined}) == 3
    assert not any(w.mismatched for w in state.waits)


@pytest.mark.parametrize("name", ["gpu_error_1st", "gpu_error_2nd", "lock_gil_1st", "lock_gil_2nd"])
def test_the_recorders_alone_name_the_ranks_the_peers_analyser_names(name):
    topology, recorders, named = _case(name)
    verdict = read_hang({}, recorders, topology)
    assert verdict.rule == RULE_RECORDER and not verdict.alert
    assert verdict.outlier_ranks == tuple(named)
    assert set(verdict.nodes) == {topology.by_rank[r].node for r in named}


def test_the_streaming_hang_path_reads_recorder_dumps_that_came_without_stacks():
    # The watchdog dumps the recorder where the trainer's Python cannot answer a capture (a rank
    # holding the GIL); a verdict that waits for stacks reattempted the job naming nobody.
    topology, recorders, named = _case("gpu_error_1st")
    events = [step_event(2.0 * n + 0.001 * r, topology, r, n, job=JOB) for n in range(1, 21) for r in topology.by_rank]
    events += [beat_event(t, node) for t in range(0, 300, 10) for node in topology.nodes]
    events += [
        event(
            104.0 + 0.01 * r,
            topology.by_rank[r].node,
            "stack",
            "recorder_dump",
            rank=r,
            pid=1000 + r,
            dump=text,
            entries=1,
            truncated=False,
        )
        for r, text in recorders.items()
    ]
    book = JobBook()
    book.update(topology.to_event(JOB, T0))
    out = run_detector(ImplicitFaultDetector(book, ImplicitConfig(hang=HangConfig())), events, until=200)
    assert [d.action for d in out] == [Action.CAPTURE_STACKS, Action.EVICT]
    assert out[1].ranks == tuple(named) and out[1].nodes == (topology.by_rank[12].node,)
    assert "no stack dump arrived" not in out[1].detail
