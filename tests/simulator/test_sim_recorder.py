"""The simulated cluster answers a capture as a trainer with the hook does: stacks and a Flight Recorder
dump per rank, consistent with the injected fault (issue 51). The stacks-only answer (no hook) is
tested in test_simulator.py and the replays below."""

from __future__ import annotations

import json

import pytest

from faultlens.closed_loop import ClosedLoop
from faultlens.diagnosis.engine.offline import analyze_trace
from faultlens.diagnosis.hang.recorder import RULE_RECORDER, read_hang
from faultlens.diagnosis.replay.scoring import score
from faultlens.diagnosis.stacks.flight_recorder import load_recorder
from faultlens.events.command import Command
from faultlens.events.flight_recorder import MAX_BYTES
from faultlens.events.payloads import check_payload
from faultlens.events.trace import labels_path, write_labels, write_trace
from faultlens.simulator import FaultPlan, SimConfig, SimulatedCluster, simulate


def _capture(cfg: SimConfig, plan: FaultPlan, at: float = 150.0):
    sim = SimulatedCluster(cfg, plan, auto_recover=False)
    sim.advance(cfg.start_ts + at)
    now = sim.now
    sim.apply(Command(job=cfg.job, action="capture_stacks", issued_at=now, expires_at=now + 60))
    return sim, sim.advance(now + 10)


def _answers(out):
    py = {e.data["rank"]: e.data["dump"] for e in out if e.kind == "stack_dump" and e.data["tool"] == "py-spy"
          and e.data.get("ok") is not False}
    fh = {e.data["rank"]: e.data["dump"] for e in out if e.kind == "stack_dump" and e.data["tool"] == "faulthandler"}
    rec = {e.data["rank"]: e for e in out if e.kind == "recorder_dump"}
    return py, fh, rec


def test_every_rank_answers_with_the_hooks_stacks_and_a_recorder_dump_that_names_the_hangs_culprit():
    cfg = SimConfig(nodes=8, gpus=4, seed=7, noise=False, stack_fail_share=0.25)
    culprit = 29
    sim, out = _capture(cfg, FaultPlan().fail_at("job_hang", rank=culprit, t=50))
    py, fh, rec = _answers(out)
    assert sorted(fh) == sorted(rec) == list(range(32))
    assert len(py) == 32 - 4 * len(sim.stack_broken)  # the agents' py-spy fails where it is broken
    for e in rec.values():
        check_payload(e)  # the fields and types docs/events.md names
        assert len(e.data["dump"].encode()) <= MAX_BYTES and e.data["entries"] == len(json.loads(e.data["dump"])["entries"])
        assert e.node == sim.node_of(e.data["rank"]) and e.data["request_id"]
    # The hook answers after its stacks, in the same partition (the node's).
    first_fh = min(e.ts for e in out if e.kind == "stack_dump" and e.data["tool"] == "faulthandler"
                   and e.data["rank"] == culprit)
    assert rec[culprit].ts > first_fh

    dumps = {r: load_recorder(e.data["dump"]) for r, e in rec.items()}
    topo = sim.topology
    tp_peers = set(topo.group_ranks("tp", topo.group_id(culprit, "tp"))) - {culprit}
    held = {r: dumps[r].pending() for r in tp_peers}
    (pg,) = {name for p in held.values() for name in p}
    seqs = {p[pg].seq for p in held.values()}
    assert len(seqs) == 1 and {p[pg].op for p in held.values()} == {"_allgather_base"}
    # The culprit never entered the all_gather its TP peers wait in, and waits in nothing recorded.
    assert dumps[culprit].last_enqueued[pg] == seqs.pop() - 1 and not dumps[culprit].pending()
    # Healthy replicas wait in their gradient all_reduce; the stuck pipeline never entered it.
    stuck_pipeline = {r for t in tp_peers | {culprit} for r in topo.group_ranks("pp", topo.group_id(t, "pp"))}
    for r in set(range(32)) - stuck_pipeline:
        assert [c.op for c in dumps[r].pending().values()] == ["allreduce"]

    verdict = read_hang({**fh, **py}, {r: e.data["dump"] for r, e in rec.items()}, topo)
    assert verdict.rule == RULE_RECORDER and verdict.outlier_ranks == (culprit,)
    assert verdict.nodes == (sim.node_of(culprit),) and not verdict.alert


def test_a_hang_inside_the_collective_is_joined_but_stuck_so_the_recorder_names_nobody():
    cfg = SimConfig(nodes=8, gpus=4, seed=7, noise=False, stack_fail_share=0.0)
    sim, out = _capture(cfg, FaultPlan().fail_at("job_hang", rank=29, t=50, detail="in_collective"))
    py, _, rec = _answers(out)
    topo = sim.topology
    tp = topo.group_ranks("tp", topo.group_id(29, "tp"))
    pending = [load_recorder(rec[r].data["dump"]).pending() for r in tp]
    assert len({(c.pg, c.seq) for p in pending for c in p.values()}) == 1  # every member entered it
    verdict = read_hang(py, {r: e.data["dump"] for r, e in rec.items()}, topo)
    assert verdict.rule != RULE_RECORDER and "joined but stuck" in verdict.detail
    assert 29 in verdict.outlier_ranks


def test_fail_slow_ranks_are_behind_and_their_peers_collectives_complete_late():
    cfg = SimConfig(nodes=8, gpus=4, seed=7, noise=False, stack_fail_share=0.0)
    sim, out = _capture(cfg, FaultPlan().fail_at("fail_slow", node="n005", t=50), at=120.0)
    _, _, rec = _answers(out)
    topo = sim.topology
    slow = set(sim.ranks_of("n005"))
    dumps = {r: load_recorder(e.data["dump"]) for r, e in rec.items()}
    for r in slow:
        assert not dumps[r].pending()  # still computing: behind the all_reduce its DP peers hold
    peer = next(r for r in topo.group_ranks("dp", topo.group_id(min(slow), "dp")) if r not in slow)
    assert [c.op for c in dumps[peer].pending().values()] == ["allreduce"]

    def dp_durations(rank: int) -> list[float]:
        entries = json.loads(rec[rank].data["dump"])["entries"]
        return [e["duration_ms"] for e in entries if e["profiling_name"] == "nccl:allreduce" and e["retired"]]

    # Last step's gradient all_reduce waited for the slow rank: long on its peer, short on itself.
    assert dp_durations(peer) and min(dp_durations(peer)) > 10 * max(dp_durations(min(slow)))


def test_a_long_run_s_dump_is_cut_to_the_newest_entries_under_the_bound():
    cfg = SimConfig(nodes=2, gpus=2, seed=1, noise=False, recorder_buffer=5000, step_time_s=1.0,
                    checkpoint_every=10_000, eval_every=0)
    sim, out = _capture(cfg, FaultPlan().fail_at("job_hang", rank=3, t=1500), at=1560.0)
    _, _, rec = _answers(out)
    e = rec[0]
    assert e.data["truncated"] is True and len(e.data["dump"].encode()) <= MAX_BYTES
    entries = json.loads(e.data["dump"])["entries"]
    ids = [x["record_id"] for x in entries]
    # The newest entries are the ones kept: up to the send rank 0 (stage 0) is held in, still in flight.
    assert ids == list(range(ids[0], ids[0] + len(ids))) and ids[0] > 1
    assert entries[-1]["profiling_name"] == "nccl:send" and entries[-1]["retired"] is False
    assert load_recorder(e.data["dump"]).collectives  # still a dump the reader takes


def test_without_the_hook_a_capture_gets_py_spy_stacks_alone():
    cfg = SimConfig(nodes=4, gpus=2, seed=2, noise=False, flight_recorder=False)
    _, out = _capture(cfg, FaultPlan().fail_at("job_hang", rank=5, t=50))
    assert {(e.kind, e.data.get("tool")) for e in out if e.source == "stack"} == {("stack_dump", "py-spy")}


def _replay(tmp_path, plan: FaultPlan, **cfg):
    run = simulate(SimConfig(nodes=8, gpus=4, seed=3, **cfg), plan)
    path = tmp_path / "trace.parquet"
    write_trace(path, ClosedLoop(run).events())
    write_labels(labels_path(path), run.labels)
    found, _ = analyze_trace(path)
    return found, run.labels


@pytest.mark.parametrize("fault", ["job_hang", "fail_slow"])
def test_replay_with_recorder_dumps_evicts_the_culprits_machine_alone(tmp_path, fault):
    found, labels = _replay(tmp_path, FaultPlan().fail_at(fault, t=150, node="n006"))
    evicts = [d for d in found if d.fault == fault and d.action == "evict"]
    assert evicts and evicts[0].nodes == tuple(labels[0]["nodes"]), [(d.fault, d.action, d.nodes) for d in found]
    if fault == "job_hang":
        assert f"rule {RULE_RECORDER}" in evicts[0].detail
    s = score(found, labels)
    assert s.over_evicted_nodes == 0 and s.healthy_nodes_blamed == 0


def test_replay_of_a_hang_inside_the_collective_without_the_hook_evicts_the_group(tmp_path):
    found, labels = _replay(tmp_path, FaultPlan().fail_at("job_hang", t=150, node="n006", detail="in_collective"),
                            flight_recorder=False, stack_fail_share=0.0)
    evicts = [d for d in found if d.fault == "job_hang" and d.action == "evict"]
    assert evicts and set(labels[0]["nodes"]) < set(evicts[0].nodes), [(d.fault, d.action, d.nodes) for d in found]
    assert score(found, labels).over_evicted_nodes == len(evicts[0].nodes) - 1
