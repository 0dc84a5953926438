"""Hang localisation from collective state (issue 38): Flight Recorder dumps beside py-spy dumps.

The cases under tests/fixtures/stacks/recorder/ are real: a Megatron-shaped gloo trainer of 8 ranks
(tests/fixtures/stacks/recorder/make_fr_job.py: own p2p helpers, TP all_reduce in autograd Functions,
a distributed optimizer with reduce_scatter / all_gather and an offload thread) hung by one rank,
dumped by py-spy and by ``_dump_fr_trace_json`` from a thread in each rank (torch 2.13).
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

from bench.testbed.stack_samples import JOB
from faultlens.cli import main
from faultlens.diagnosis.hang.recorder import RULE_RECORDER, read_hang
from faultlens.diagnosis.hang.stack_reading import read_activities, read_hang_stacks
from faultlens.diagnosis.stacks.collective_match import group_members, match_collectives
from faultlens.diagnosis.stacks.flight_recorder import BadRecorderDump, load_recorder
from faultlens.diagnosis.stacks.outliers import NotInTopology, read_rank_stacks
from faultlens.diagnosis.stacks.rank_threads import read_rank
from faultlens.events.topology import Topology

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stacks" / "recorder"
ALL_CASES = sorted(p.name for p in FIXTURES.glob("fr_*") if (p / "case.json").exists())
# A bad machine hung the job (the culprit's machine is what to evict), or a divergent branch did (nothing is).
CASES = [c for c in ALL_CASES if json.loads((FIXTURES / c / "case.json").read_text())["bad_machine"]]
SOFTWARE_CASES = [c for c in ALL_CASES if c not in CASES]


def _load(name: str, tool: str = "py-spy"):
    folder = FIXTURES / name
    case = json.loads((folder / "case.json").read_text())
    topology = Topology.from_data(json.loads((folder / "topology.json").read_text()))
    src = folder / "faulthandler" if tool == "faulthandler" else folder
    stacks = {int(p.stem): p.read_text() for p in src.glob("*.txt")}
    recorders = {int(p.name.split(".")[0]): p.read_bytes() for p in folder.glob("*.fr.json")}
    return case, topology, stacks, recorders


def test_the_fixtures_cover_every_mode():
    modes = {json.loads((FIXTURES / c / "case.json").read_text())["mode"] for c in ALL_CASES}
    assert modes == {"compute", "optimizer", "dataload", "checkpoint", "extra-collective"}
    assert len(CASES) >= 8 and SOFTWARE_CASES


@pytest.mark.parametrize("name", CASES)
def test_the_recorder_names_the_culprits_machine_alone(name):
    case, topology, stacks, recorders = _load(name)
    verdict = read_hang(stacks, recorders, topology)
    assert verdict.rule == RULE_RECORDER
    assert verdict.outlier_ranks == (case["culprit_rank"],)
    assert verdict.nodes == (case["culprit_node"],)
    assert not verdict.alert and verdict.confidence > 0.9


@pytest.mark.parametrize("name", CASES)
def test_with_the_trainer_hooks_faulthandler_stacks_the_recorder_still_names_the_culprits_machine(name):
    case, topology, stacks, recorders = _load(name, "faulthandler")
    assert all("most recent call first" in text for text in stacks.values())
    verdict = read_hang(stacks, recorders, topology)
    assert verdict.rule == RULE_RECORDER and verdict.nodes == (case["culprit_node"],)


def test_faulthandler_stacks_alone_blame_whole_pipelines_the_recorder_does_not():
    """No thread state in faulthandler: stacks alone cannot tell a blocked helper from compute."""
    wider = [name for name in CASES if len(read_hang_stacks(_load(name, "faulthandler")[2], _load(name)[1]).nodes) > 1]
    assert len(wider) >= 2, wider


def test_stacks_alone_read_trainer_own_waits_and_name_the_culprits_machine():
    for name in CASES:
        case, topology, stacks, _ = _load(name)
        verdict = read_hang_stacks(stacks, topology)
        assert verdict.nodes == (case["culprit_node"],), name


def test_without_the_shared_blocked_call_rule_the_stacks_blame_whole_pipelines():
    """What the rule is for: idle in the trainer's own finish_grad_sync reads as compute without it."""
    wider = []
    for name in CASES:
        case, topology, stacks, _ = _load(name)
        parsed = read_rank_stacks(stacks, topology)
        plain = read_activities(parsed)
        with_rule = read_activities(parsed, topology)
        assert sum(a.waiting for a in with_rule.values()) >= sum(a.waiting for a in plain.values())
        if sum(a.waiting for a in plain.values()) < 0.5 * len(plain):
            wider.append(name)
    assert len(wider) >= 3, wider


@pytest.mark.parametrize("name", SOFTWARE_CASES)
def test_collectives_entered_in_different_orders_are_an_alert_where_stacks_evict_healthy_machines(name):
    case, topology, stacks, recorders = _load(name)
    by_stacks = read_hang_stacks(stacks, topology)
    assert by_stacks.localized and len(by_stacks.nodes) >= 2  # what the stacks alone would evict
    verdict = read_hang(stacks, recorders, topology)
    assert verdict.alert and verdict.nodes == () and not verdict.localized
    assert case["culprit_rank"] in verdict.outlier_ranks
    assert "entered in different orders" in verdict.detail and "barrier #1 of pg 0" in verdict.detail


def test_a_real_dump_parses_to_its_collectives_in_flight():
    _, _, _, recorders = _load("fr_tp2pp2dp2_compute_r5")
    dump = load_recorder(recorders[4])
    pending = dump.pending()
    # rank 4 waits in its TP all_reduce (pg "3"); its async reduce_scatter of the previous step is done
    assert {pg: (c.op, c.seq) for pg, c in pending.items()} == {"3": ("all_reduce", 13)}
    assert dump.last_enqueued["3"] == 13
    assert load_recorder(recorders[5]).pending() == {}


def test_groups_are_matched_by_name_and_never_joined_told_from_joined():
    _, topology, _, recorders = _load("fr_tp2pp2dp2_compute_r5")
    dumps = {r: load_recorder(b) for r, b in recorders.items()}
    state = match_collectives(dumps, topology)
    tp = next(w for w in state.waits if w.pg == "3")
    assert (tp.joined, tp.never_joined, tp.members) == ((4,), (5,), (4, 5))
    assert "rank(s) 5 never entered it" in tp.describe()
    assert state.edges[4] == (5,)
    assert set(state.ends) == {5, 6, 7}  # 6 and 7 wait in unrecorded p2p: the stacks tell them apart


def test_every_member_inside_the_collective_is_joined_but_stuck_and_the_stacks_decide():
    _, topology, stacks, recorders = _load("fr_tp1pp4dp2_checkpoint_r6")
    # rank 6 entered the barrier too: every rank is now inside barrier #1, nobody behind
    obj = json.loads(recorders[0])
    mine = json.loads(recorders[6])
    mine["entries"].append(next(e for e in obj["entries"] if e["retired"] is False))
    recorders = {**recorders, 6: json.dumps(mine).encode()}
    dumps = {r: load_recorder(b) for r, b in recorders.items()}
    state = match_collectives(dumps, topology)
    assert [w.stuck for w in state.waits] == [True] and state.ends == ()
    verdict = read_hang(stacks, recorders, topology)
    assert verdict.rule != RULE_RECORDER
    assert "joined but stuck" in verdict.detail


def test_a_suspect_whose_stack_waits_in_a_collective_is_an_alert_not_an_eviction():
    _, topology, stacks, recorders = _load("fr_tp2pp2dp2_compute_r5")
    stacks = {**stacks, 5: stacks[4]}  # rank 5's stack now says it waits in the TP all_reduce
    verdict = read_hang(stacks, recorders, topology)
    assert verdict.alert and verdict.nodes == () and not verdict.localized
    assert "disagree" in verdict.detail


def test_a_missing_recorder_dump_is_read_through_the_topology_group():
    case, topology, stacks, recorders = _load("fr_tp2pp2dp2_compute_r5")
    del recorders[5]
    dumps = {r: load_recorder(b) for r, b in recorders.items()}
    assert group_members(dumps, topology)["3"] == (4, 5)  # only rank 4 names pg 3; 5 has no dump
    verdict = read_hang(stacks, recorders, topology)
    assert verdict.nodes == (case["culprit_node"],)


def test_no_stack_for_the_suspect_is_the_recorders_word_alone_at_lower_confidence():
    case, topology, stacks, recorders = _load("fr_tp2pp2dp2_compute_r5")
    del stacks[5]
    verdict = read_hang(stacks, recorders, topology)
    assert verdict.nodes == (case["culprit_node"],)
    assert verdict.confidence < 0.6
    assert "the recorder's word alone" in verdict.detail


def test_unreadable_recorder_dumps_are_reported_not_fatal():
    _, topology, stacks, recorders = _load("fr_tp1pp4dp2_dataload_r4")
    recorders = {**recorders, 1: b'{"entries": [', 2: b"\x80\x04garbage"}
    verdict = read_hang(stacks, recorders, topology)
    assert "unreadable recorder dumps: ranks 1-2" in verdict.detail
    with pytest.raises(BadRecorderDump):
        load_recorder(b"not json")


def test_the_recorders_pickle_is_read_and_a_pickle_naming_a_class_refused():
    _, _, _, recorders = _load("fr_tp2pp2dp2_compute_r5")
    obj = json.loads(recorders[4])
    for e in obj["entries"]:
        e["process_group"] = tuple(e["process_group"])  # the pickle keeps tuples
    assert load_recorder(pickle.dumps(obj)).pending()["3"].seq == 13
    with pytest.raises(BadRecorderDump):
        load_recorder(pickle.dumps(Path("x")))


def test_pg_config_names_the_members_when_it_lists_them():
    _, topology, _, recorders = _load("fr_tp2pp2dp2_compute_r5")
    obj = json.loads(recorders[4])
    obj["pg_config"] = {"3": {"name": "3", "desc": "tp", "ranks": "[4, 5]"}}
    assert load_recorder(json.dumps(obj)).members == {"3": (4, 5)}


def test_dumps_of_ranks_outside_the_topology_are_refused():
    _, topology, stacks, recorders = _load("fr_tp2pp2dp2_compute_r5")
    with pytest.raises(NotInTopology):
        read_hang(stacks, {**recorders, 99: recorders[0]}, topology)


def test_every_thread_is_read():
    _, _, stacks, _ = _load("fr_tp2pp2dp2_optimizer_r2")
    culprit = read_rank(stacks[2])
    assert not culprit.waiting and "optimizer-offload_0" in culprit.describe()
    victim = read_rank(stacks[0])  # idle in the trainer's own _communicate under send_forward
    assert victim.waiting and victim.activity.primitive.kind == "send" and victim.activity.direction == "forward"


def test_a_running_thread_in_a_p2p_named_helper_is_not_read_as_waiting():
    text = ('Thread 1 (active): "MainThread"\n    _communicate (train.py:10)\n    send_forward (train.py:20)\n'
            '    main (train.py:30)\n')
    assert not read_rank(text).waiting
    assert read_rank(text.replace("(active)", "(idle)")).waiting


def test_cli_reads_the_recorder_beside_the_stacks(capsys):
    case, _, _, _ = _load("fr_tp2pp2dp2_optimizer_r2")
    folder = FIXTURES / "fr_tp2pp2dp2_optimizer_r2"
    assert main(["stacks", str(folder), "--topology", str(folder / "topology.json")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    diag = json.loads(lines[0])
    assert diag["action"] == "evict" and diag["fault"] == "job_hang"
    assert diag["ranks"] == [case["culprit_rank"]] and diag["nodes"] == [case["culprit_node"]]
    assert f"rule {RULE_RECORDER}" in diag["detail"] and "never entered it" in diag["detail"]
    assert f"{case['culprit_rank']}.fr.json" in diag["evidence"]


def test_cli_alerts_when_stacks_and_recorder_disagree(tmp_path, capsys):
    folder = FIXTURES / "fr_tp2pp2dp2_compute_r5"
    for p in folder.iterdir():
        if p.is_file():
            shutil.copy(p, tmp_path / p.name)
    shutil.copy(folder / "4.txt", tmp_path / "5.txt")  # the culprit's stack now waits in a collective
    assert main(["stacks", str(tmp_path), "--topology", str(tmp_path / "topology.json")]) == 0
    diag = json.loads(capsys.readouterr().out)
    assert diag["action"] == "alert" and diag["nodes"] == [] and diag["ranks"] == [5]


def test_cli_reads_recorder_dumps_alone(tmp_path, capsys):
    folder = FIXTURES / "fr_tp1pp4dp2_checkpoint_r6"
    for p in folder.glob("*.fr.json"):
        shutil.copy(p, tmp_path / p.name)
    assert main(["stacks", str(tmp_path), "--topology", str(folder / "topology.json")]) == 0
    diag = json.loads(capsys.readouterr().out)
    # the recorder alone names rank 6 (it never entered the barrier) but no stack confirms it
    assert diag["ranks"] == [6] and diag["nodes"] == ["node-03"] and diag["confidence"] < 0.6


def test_a_rank_with_an_async_collective_in_flight_that_runs_is_still_the_suspect():
    case, topology, stacks, recorders = _load("fr_tp2pp2dp2_compute_r5")
    peer = json.loads(recorders[1])
    mine = json.loads(recorders[5])
    # rank 5 launched the grad reduce-scatter (#7 of its DP group) before it ran away in compute
    mine["entries"].append(next(e for e in peer["entries"] if e["retired"] is False))
    recorders = {**recorders, 5: json.dumps(mine).encode()}
    walk_state = match_collectives({r: load_recorder(b) for r, b in recorders.items()}, topology)
    assert 5 in walk_state.held and 5 not in walk_state.ends
    verdict = read_hang(stacks, recorders, topology)
    assert verdict.outlier_ranks == (5,) and verdict.nodes == (case["culprit_node"],)
    assert "in flight but runs" in verdict.detail
    # the same dump seen idle (blocked in C, not running): the recorder's word stands and names nobody
    idle = {**stacks, 5: stacks[5].replace("(active)", "(idle)").replace("(active+gil)", "(idle)")}
    verdict = read_hang(idle, recorders, topology)
    assert verdict.rule != RULE_RECORDER and "flight recorder names nobody" in verdict.detail


def _blocked(line: int, state: str = "idle", fn: str = "finish_grad_sync") -> str:
    return f'Thread 1 ({state}): "MainThread"\n    {fn} (train.py:{line})\n    train_step (train.py:90)\n'


def test_group_peers_blocked_at_one_line_of_their_own_code_are_waiting():
    topology = Topology.from_data({"tp": 2, "pp": 1, "dp": 2, "ranks": [
        {"rank": r, "node": f"n{r // 2}", "tp": r % 2, "pp": 0, "dp": r // 2} for r in range(4)]})  # TP in a node
    stacks = read_rank_stacks({0: _blocked(213), 1: _blocked(213), 2: _blocked(213), 3: _blocked(77)}, topology)
    acts = read_activities(stacks, topology)
    assert acts[0].waiting and acts[1].waiting and acts[2].waiting  # TP and DP peers blocked at one line
    running = read_rank_stacks({0: _blocked(213), 1: _blocked(213), 2: _blocked(213, "active")}, topology)
    assert not any(a.waiting for a in read_activities(running, topology).values())  # 2 runs; 0-1 one TP group
    assert not acts[3].waiting  # blocked alone: may be the culprit
    one_group = read_rank_stacks({0: _blocked(213), 1: _blocked(213), 2: _blocked(9), 3: _blocked(9, "active")}, topology)
    assert not any(a.waiting for a in read_activities(one_group, topology).values())  # one machine blocked together
    loading = read_rank_stacks({0: _blocked(5, fn="get_batch"), 1: _blocked(5, fn="get_batch")}, topology)
    assert not any(a.waiting for a in read_activities(loading, topology).values())  # a named suspect context stays one


# --- the streaming hang path reads the same ------------------------------------------------------
def _recorder_event(ts: float, topology: Topology, rank: int, text: str):
    from bench.testbed.stack_samples import event

    return event(ts, topology.by_rank[rank].node, "stack", "recorder_dump", job=JOB, rank=rank, pid=1000 + rank,
                 dump=text, entries=1, truncated=False)


def _streaming(name: str, with_recorders: bool = True, tool: str = "py-spy"):
    from bench.testbed.stack_samples import T0, beat_event, run_detector, stack_event, step_event
    from faultlens.diagnosis.engine.detector import JobBook
    from faultlens.diagnosis.engine.implicit import ImplicitConfig, ImplicitFaultDetector
    from faultlens.diagnosis.hang.state import HangConfig

    case, topology, stacks, recorders = _load(name, tool)
    events = [step_event(2.0 * n + 0.001 * r, topology, r, n) for n in range(1, 21) for r in topology.by_rank]
    events += [beat_event(t, node) for t in range(0, 300, 10) for node in topology.nodes]
    if with_recorders:  # the hook sends its recorder dump right after its stack dump
        events += [_recorder_event(104.0 + 0.01 * r, topology, r, b.decode()) for r, b in recorders.items()]
    events += [stack_event(105.0 + 0.01 * r, topology, r, text, tool=tool) for r, text in stacks.items()]
    book = JobBook()
    book.update(topology.to_event(JOB, T0))
    det = ImplicitFaultDetector(book, ImplicitConfig(hang=HangConfig()))
    return case, run_detector(det, events, until=200)


def test_the_streaming_hang_path_reads_recorder_dumps_beside_the_stacks():
    case, out = _streaming("fr_tp2pp2dp2_compute_r5")
    assert [d.action for d in out] == ["capture_stacks", "evict"]
    final = out[1]
    assert final.ranks == (case["culprit_rank"],) and final.nodes == (case["culprit_node"],)
    assert f"rule {RULE_RECORDER}" in final.detail and "pg 3 wait in all_reduce #13; rank(s) 5 never entered it" in final.detail


def test_the_streaming_hang_path_with_the_hooks_dumps_alone_alerts_on_a_divergent_branch():
    _, out = _streaming("fr_tp2pp2dp2_extra_r5", tool="faulthandler")
    assert [d.action for d in out] == ["capture_stacks", "alert"]
    assert out[1].nodes == () and "entered in different orders" in out[1].detail


def test_a_recorder_dump_event_without_its_text_is_a_dead_letter():
    from faultlens.diagnosis.stacks.dump_set import read_recorder_dump
    from faultlens.events.envelope import InvalidEvent

    _, topology, _, _ = _load("fr_tp2pp2dp2_compute_r5")
    bad = _recorder_event(1.0, topology, 0, "x")
    bad.data.pop("dump")
    with pytest.raises(InvalidEvent):
        read_recorder_dump(bad)


def test_the_hook_bounds_a_recorder_dump_to_its_newest_entries():
    from faultlens.trainer_hooks.flight_recorder import bound

    _, _, _, recorders = _load("fr_tp1pp4dp2_compute_r2")
    text = recorders[0].decode()
    whole = bound(text, 10 * len(text))
    assert whole.text == text and not whole.truncated
    cut = bound(text, 4096)
    assert cut.truncated and len(cut.text.encode()) <= 4096 and 0 < cut.entries < whole.entries
    newest = json.loads(text)["entries"][-1]
    assert json.loads(cut.text)["entries"][-1] == newest
    assert bound("garbage", 4096) is None


def test_cli_with_only_unreadable_recorder_dumps_says_nothing_to_localise(tmp_path, capsys):
    folder = FIXTURES / "fr_tp2pp2dp2_compute_r5"
    (tmp_path / "0.fr.json").write_text("{garbled")
    assert main(["stacks", str(tmp_path), "--topology", str(folder / "topology.json")]) == 0
    diag = json.loads(capsys.readouterr().out)
    assert diag["action"] == "none" and diag["fault"] == "unknown" and "1 unreadable" in diag["detail"]


def test_cli_reads_nccls_pickled_dump_files_by_their_default_names(tmp_path, capsys):
    """TORCH_NCCL_DEBUG_INFO_TEMP_FILE's default prefix writes /tmp/nccl_trace_rank_<rank> (a pickle)."""
    case, _, _, recorders = _load("fr_tp2pp2dp2_compute_r5")
    folder = FIXTURES / "fr_tp2pp2dp2_compute_r5"
    for p in folder.glob("*.txt"):
        shutil.copy(p, tmp_path / p.name)
    for rank, raw in recorders.items():
        obj = json.loads(raw)
        for e in obj["entries"]:
            e["process_group"] = tuple(e["process_group"])
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(obj))
    assert main(["stacks", str(tmp_path), "--topology", str(folder / "topology.json")]) == 0
    diag = json.loads(capsys.readouterr().out)
    assert diag["nodes"] == [case["culprit_node"]] and f"rule {RULE_RECORDER}" in diag["detail"]
    assert diag["evidence"] == ["5.txt", "nccl_trace_rank_5"]


def test_stacks_naming_a_rank_the_recorder_shows_waiting_inside_a_collective_is_an_alert():
    _, topology, stacks, recorders = _load("fr_tp1pp4dp2_dataload_r4")
    # rank 3 (pipeline 0, node-01) now seems to compute and rank 4 (the loader) to wait in a recv: the
    # stacks' chains end at 3; the recorder's walk loops in pipeline 1 and shows 3 inside the grad sync
    stacks = {**stacks, 3: stacks[4].replace("get_batch", "forward_step"), 4: stacks[5]}
    by_stacks = read_hang_stacks(stacks, topology)
    verdict = read_hang(stacks, recorders, topology)
    if by_stacks.rule == "wait-chain" and by_stacks.localized and "node-02" not in by_stacks.nodes:
        assert verdict.alert and verdict.nodes == () and "disagree" in verdict.detail
    else:  # the doctored stacks must make the disagreement this test is about
        pytest.fail(f"stacks alone: {by_stacks.rule} {by_stacks.nodes}")


def test_stack_wait_chains_ending_on_other_machines_than_the_recorders_suspects_are_an_alert(monkeypatch):
    import dataclasses

    import faultlens.diagnosis.hang.recorder as hang_recorder

    case, topology, stacks, recorders = _load("fr_tp2pp2dp2_compute_r5")
    real = read_hang_stacks(stacks, topology)
    elsewhere = dataclasses.replace(real, outlier_ranks=(0,), nodes=("node-00",), group="tp:0")  # a chain ending at 0
    monkeypatch.setattr(hang_recorder, "read_hang_stacks", lambda *a, **k: elsewhere)
    verdict = read_hang(stacks, recorders, topology)
    assert verdict.alert and verdict.nodes == () and "the stacks' wait chains [0] on node-00" in verdict.detail
    # the majority vote alone is too weak to veto the recorder
    monkeypatch.setattr(hang_recorder, "read_hang_stacks",
                        lambda *a, **k: dataclasses.replace(elsewhere, rule="outlier-clustering"))
    assert read_hang(stacks, recorders, topology).nodes == (case["culprit_node"],)
