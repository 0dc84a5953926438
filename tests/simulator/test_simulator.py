"""The simulated cluster: labels, valid events, determinism, and each fault's real evidence."""

from __future__ import annotations

import re
import statistics
from itertools import pairwise

import pytest

from faultlens.events.command import Command
from faultlens.events.diagnosis_record import FAULT_CLASSES
from faultlens.events.envelope import as_float, decode, encode
from faultlens.events.topology import Topology
from faultlens.simulator import SIM_CLASSES, FaultPlan, SimConfig, SimulatedCluster, choose_layout, lines, simulate
from faultlens.simulator.plan import PlannedFault
from tests.simulator.sim_fixtures import SMALL, build

XID = re.compile(r"NVRM: Xid \(PCI:[0-9a-f:]+\): (\d+),")


def _lines(events, source=None, node=None):
    return [e for e in events if e.kind == "line" and (source is None or e.source == source)
            and (node is None or e.node == node)]


def _xids(events, node):
    return [int(m.group(1)) for e in _lines(events, "kernel", node) if (m := XID.search(e.data["line"]))]


def _samples(events, node):
    return [e for e in events if e.source == "gpu" and e.kind == "sample" and e.node == node]


def _steps(events, ranks=None):
    return [e for e in events if e.kind == "step" and (ranks is None or e.data["rank"] in ranks)]


# --- the trace as a whole ------------------------------------------------------------------
def test_the_classes_simulated_are_those_with_an_injector():
    from faultlens.simulator.faults import INJECTORS

    # A class added to the vocabulary (loss_stalled) is no simulated class until it has an injector.
    assert sorted(SIM_CLASSES) == sorted(INJECTORS)
    assert set(SIM_CLASSES) < set(FAULT_CLASSES)


def test_every_class_is_labelled_once_with_the_contract_keys(every_class_trace):
    faults = sorted(label["fault"] for label in every_class_trace.labels)
    assert faults == sorted(SIM_CLASSES)
    assert "unknown" not in faults and set(faults) <= set(FAULT_CLASSES)
    for label in every_class_trace.labels:
        assert {"job", "fault", "nodes", "ranks", "onset"} <= set(label)
        assert label["job"] == SMALL.job
        assert label["end"] > label["onset"]


def test_events_are_valid_envelopes_in_time_order_topology_first(every_class_trace):
    events = every_class_trace.events
    assert events[0].source == "job" and events[0].kind == "topology"
    Topology.from_data(events[0].data)  # a valid topology
    assert all(a.ts <= b.ts for a, b in pairwise(events))
    assert len({e.id for e in events}) == len(events)
    for e in events[:: max(1, len(events) // 2000)]:
        assert decode(encode(e)) == e


def test_same_seed_same_events_other_seed_other_events():
    a, la = build(SimConfig(nodes=4, gpus=2, seed=3), faults=4)
    b, lb = build(SimConfig(nodes=4, gpus=2, seed=3), faults=4)
    c, _ = build(SimConfig(nodes=4, gpus=2, seed=4), faults=4)
    assert [encode(e) for e in a] == [encode(e) for e in b]
    assert la == lb
    assert [e.id for e in a] != [e.id for e in c]


def test_job_wide_episodes_never_overlap(every_class_trace):
    from faultlens.simulator import JOB_WIDE

    wide = sorted((label for label in every_class_trace.labels if label["fault"] in JOB_WIDE), key=lambda label: label["onset"])
    for a, b in pairwise(wide):
        assert a["end"] <= b["onset"], (a, b)


def test_steps_carry_every_documented_key(every_class_trace):
    step = _steps(every_class_trace.events)[0]
    assert set(step.data) >= {"rank", "step", "loss", "grad_norm", "step_time_s", "tokens", "tokens_per_s", "mfu", "compute_s"}
    assert step.data["compute_s"] < step.data["step_time_s"]


# --- each fault's evidence -----------------------------------------------------------------
def test_gpu_lost_xid79_nulls_and_sympathetic_timeouts(every_class_trace):
    t = every_class_trace
    label = t.label("gpu_lost")
    node, rank = label["nodes"][0], label["ranks"][0]
    w = t.window(label)
    assert 79 in _xids(w, node)
    assert any("fallen off the bus" in e.data["line"] for e in _lines(w, "kernel", node))
    lost = [g for e in _samples(w, node) for g in e.data["gpus"] if g["util"] is None]
    assert lost and all(g["index"] == rank % SMALL.gpus for g in lost)
    timeouts = [e for e in _lines(w, "nccl") if "Watchdog caught collective operation timeout" in e.data["line"]]
    assert timeouts and not any(f"[rank{rank}]:" in e.data["line"] for e in timeouts)


def test_gpu_memory_xid_with_matching_counters(every_class_trace):
    t = every_class_trace
    label = t.label("gpu_memory")
    node, gpu = label["nodes"][0], label["ranks"][0] % SMALL.gpus
    w = t.window(label)
    assert set(_xids(w, node)) & {48, 95, 64}
    after = _samples(w, node)[-1].data["gpus"][gpu]
    assert after["ecc_dbe_aggregate"] > 0 or after["remap_failure"]


def test_nvlink_xid_and_counters(every_class_trace):
    t = every_class_trace
    label = t.label("nvlink")
    node, gpu = label["nodes"][0], label["ranks"][0] % SMALL.gpus
    w = t.window(label)
    assert set(_xids(w, node)) & {74, 145, 149}
    assert _samples(w, node)[-1].data["gpus"][gpu]["nvlink_errors"] > 0


def test_gpu_thermal_heats_throttles_and_slows_the_job(every_class_trace):
    t = every_class_trace
    label = t.label("gpu_thermal")
    node = label["nodes"][0]
    late = [e for e in _samples(t.window(label), node) if e.ts > label["onset"] + 90]
    assert all(g["temp_c"] > 85 and "hw_thermal" in g["throttle"] and g["sm_clock_mhz"] < 1500
               for e in late for g in e.data["gpus"])
    before = statistics.median(e.data["step_time_s"] for e in _steps(t.window(label, before=120)) if e.ts < label["onset"])
    during = statistics.median(e.data["step_time_s"] for e in _steps(t.window(label)) if e.ts > label["onset"] + 90)
    assert during > 1.2 * before
    hot = [e.data["compute_s"] for e in _steps(t.window(label), set(label["ranks"])) if e.ts > label["onset"] + 90]
    cool = [e.data["compute_s"] for e in _steps(t.window(label)) if e.ts > label["onset"] + 90 and e.data["rank"] not in label["ranks"]]
    assert min(hot) > max(cool)


def test_gpu_reset_required_gsp_xids_and_recovery_action(every_class_trace):
    t = every_class_trace
    label = t.label("gpu_reset_required")
    node, gpu = label["nodes"][0], label["ranks"][0] % SMALL.gpus
    w = t.window(label)
    assert {119, 120} <= set(_xids(w, node))
    assert any(e.data["gpus"][gpu]["recovery_action"] == 1 for e in _samples(w, node))


def test_nic_flaps_twice_within_five_minutes_and_single_flaps_are_unlabelled(every_class_trace):
    t = every_class_trace
    label = t.label("nic")
    downs = [e.ts for e in _lines(t.window(label), "kernel", label["nodes"][0]) if e.data["line"].endswith("Link down")]
    assert len(downs) >= 2 and downs[1] - downs[0] < 300
    # Noise: a link-down outside every nic label must be alone on its node within 5 minutes.
    nic_windows = [(label["nodes"][0], label["onset"], label["end"]) for label in t.labels if label["fault"] == "nic"]
    noise = [e for e in _lines(t.events, "kernel") if e.data["line"].endswith("Link down")
             and not any(e.node == n and a <= e.ts < b for n, a, b in nic_windows)]
    for e in noise:
        near = [o for o in noise if o.node == e.node and abs(o.ts - e.ts) < 300]
        assert len(near) == 1


def test_benign_noise_is_present_and_unlabelled(every_class_trace):
    t = every_class_trace
    # IGNORE-class Xids that no process caused (pid unknown): record-only noise; the labels stay
    # one per injected fault (checked above), so nothing labels these.
    ignorable = [e for e in _lines(t.events, "kernel") if (m := XID.search(e.data["line"]))
                 and m.group(1) in ("63", "92") and "pid='<unknown>'" in e.data["line"]]
    assert ignorable
    info = [e for e in _lines(t.events, "nccl") if " NCCL INFO " in e.data["line"]]
    assert len(info) >= 2 * SMALL.nodes


def test_kernel_host_oom_and_app_fault_lines(every_class_trace):
    t = every_class_trace
    k = t.label("kernel")
    text = " ".join(e.data["line"] for e in _lines(t.window(k), "kernel", k["nodes"][0]))
    assert re.search(r"soft lockup - CPU#\d+ stuck|INFO: task python3:\d+ blocked for more than|Kernel panic", text)
    oom = t.label("host_oom")
    assert any(re.search(r"Out of memory: Killed process \d+ \(python3\)", e.data["line"])
               for e in _lines(t.window(oom), "kernel", oom["nodes"][0]))
    app = t.label("app_fault")
    xids = _xids(t.window(app), app["nodes"][0])
    assert xids[-1] == 43 and set(xids[:-1]) <= {13, 31} and len(xids) >= 4


def test_cuda_and_nccl_errors_first_on_the_culprit_then_timeouts(every_class_trace):
    t = every_class_trace
    for fault, marker in (("cuda_error", "illegal memory access"), ("nccl_error", "NCCL WARN")):
        label = t.label(fault)
        rank = label["ranks"][0]
        w = _lines(t.window(label), "nccl")
        first = next(e for e in w if marker in e.data["line"])
        assert first.node == label["nodes"][0]
        timeouts = [e for e in w if "Watchdog caught" in e.data["line"]]
        assert timeouts and min(e.ts for e in timeouts) > first.ts
        assert not any(f"Rank {rank}]" in e.data["line"] for e in timeouts)
    label = t.label("nccl_error")
    completed = {int(m.group(1)): int(m.group(2)) for e in _lines(t.window(label), "nccl")
                 if (m := re.search(r"Rank (\d+)\] Exception .* last completed NCCL work: (\d+)", e.data["line"]))}
    culprit = label["ranks"][0]
    assert all(v > completed[culprit] for r, v in completed.items() if r != culprit)


def test_user_code_traceback_on_the_rank(every_class_trace):
    t = every_class_trace
    label = t.label("user_code")
    rank_lines = [e.data["line"] for e in _lines(t.window(label), "nccl") if e.data["line"].startswith(f"[rank{label['ranks'][0]}]:")]
    assert rank_lines[0].endswith("Traceback (most recent call last):")
    assert any("KeyError" in line for line in rank_lines)


def test_nan_and_spike_show_in_the_loss(every_class_trace):
    t = every_class_trace
    nan = t.label("nan_loss")
    assert any(e.data["loss"] == "nan" and as_float(e.data["loss"]) != as_float(e.data["loss"])
               for e in _steps(t.window(nan)))
    spike = t.label("loss_spike")
    base = statistics.median(as_float(e.data["loss"]) for e in _steps(t.events) if e.ts < t.labels[0]["onset"])
    assert max(as_float(e.data["loss"]) for e in _steps(t.window(spike))) > 5 * base


def test_job_hang_every_rank_stops_at_the_same_step_and_the_culprit_gpu_idles(every_class_trace):
    t = every_class_trace
    label = t.label("job_hang")
    culprit, node = label["ranks"][0], label["nodes"][0]
    w = t.window(label)
    before = [e for e in _steps(t.events) if label["onset"] - 60 <= e.ts < label["onset"] + 1]
    last = {}
    for e in before:
        last[e.data["rank"]] = max(last.get(e.data["rank"], 0), e.data["step"])
    assert len(set(last.values())) == 1  # synchronous training: nobody stops first
    assert not [e for e in _steps(w) if label["onset"] + 1 < e.ts < label["end"] - 1]
    assert any(e.kind == "beat" and e.ts > label["onset"] + 60 for e in w)  # heartbeats go on
    samples = [e for e in w if e.kind == "sample" and e.source == "gpu" and label["onset"] + 5 < e.ts < label["end"] - 5]
    local = culprit % SMALL.gpus
    mine = [e.data["gpus"][local] for e in samples if e.node == node]
    peers = [g for e in samples if e.node != node for g in e.data["gpus"]]
    assert mine and all(g["util"] == 0.0 for g in mine)  # the culprit's GPU runs nothing...
    assert peers and statistics.median(g["util"] for g in peers) == 100.0  # ...while the peers spin in NCCL
    assert not [e for e in w if e.kind == "stack_dump"]  # stacks come only when asked for


def test_a_capture_request_during_a_hang_gets_stacks_pointing_at_the_culprit():
    # Stacks alone (a trainer without the hook), the hang whose culprit is inside the all_gather.
    cfg = SimConfig(nodes=8, gpus=4, seed=7, noise=False, stack_fail_share=0.25, flight_recorder=False)
    sim = SimulatedCluster(cfg, FaultPlan().fail_at("job_hang", rank=13, t=50, detail="in_collective"),
                           auto_recover=False)
    sim.advance(cfg.start_ts + 150)
    now = sim.now
    sim.apply(Command(job=cfg.job, action="capture_stacks", issued_at=now, expires_at=now + 60))
    out = sim.advance(now + 10)
    assert not [e for e in out if e.kind == "recorder_dump" or e.data.get("tool") == "faulthandler"]
    dumps = {e.data["rank"]: e for e in out if e.kind == "stack_dump"}
    topo = sim.topology
    assert sorted(dumps) == list(range(32))
    broken = {r for r, e in dumps.items() if e.data.get("ok") is False}
    assert {dumps[r].node for r in broken} == sim.stack_broken and len(sim.stack_broken) == 2
    assert all("py-spy" in dumps[r].data["dump"] or "ptrace" in dumps[r].data["dump"] for r in broken)
    if 13 not in broken:
        assert "all_gather_into_tensor" in dumps[13].data["dump"]
    pp_peers = set(topo.group_ranks("pp", topo.group_id(13, "pp"))) - {13} - broken
    assert all(re.search(r"\b(isend|irecv) \(", dumps[r].data["dump"]) for r in pp_peers)
    first = next(d for r, d in dumps.items() if r not in broken).data["dump"].splitlines()
    assert re.match(r"Process \d+: ", first[0]) and re.match(r'Thread 0x[0-9A-F]+ \(active\): "MainThread"', first[3])


def test_fail_slow_slower_compute_and_no_stacks_unasked(every_class_trace):
    t = every_class_trace
    label = t.label("fail_slow")
    slow = set(label["ranks"])
    late = [e for e in _steps(t.window(label)) if e.ts > label["onset"] + 30]
    ratio = statistics.median(e.data["compute_s"] for e in late if e.data["rank"] in slow) / \
        statistics.median(e.data["compute_s"] for e in late if e.data["rank"] not in slow)
    assert 1.25 < ratio < 1.65
    assert not [e for e in t.window(label) if e.kind == "stack_dump"]


def test_healthy_variance_is_there():
    cfg = SimConfig(nodes=8, gpus=8, seed=3, noise=False)
    events = list(simulate(cfg, FaultPlan(), duration=1200).events())
    rows = [g for e in events if e.kind == "sample" and e.source == "gpu" for g in e.data["gpus"]]
    clocks = [g["sm_clock_mhz"] for g in rows]
    node_temp = {}
    for e in events:
        if e.kind == "sample" and e.source == "gpu":
            node_temp.setdefault(e.node, []).extend(g["temp_c"] for g in e.data["gpus"])
    means = [statistics.mean(v) for v in node_temp.values()]
    assert max(clocks) == 1980 and min(clocks) < 1850  # boost and power-cap swings
    assert any("sw_power_cap" in g["throttle"] for g in rows)
    assert max(means) - min(means) > 4.0  # some nodes run warmer than others
    steps = sorted({(e.ts, e.data["step"]) for e in events if e.kind == "step" and e.data["rank"] == 0})
    gaps = [b[0] - a[0] for a, b in pairwise(steps)]
    assert max(gaps) > 1.5 * statistics.median(gaps)  # checkpoint / eval pauses


def test_node_silent_emits_nothing_then_is_replaced(every_class_trace):
    t = every_class_trace
    label = t.label("node_silent")
    node = label["nodes"][0]
    assert not [e for e in t.window(label) if e.node == node and e.ts > label["onset"] + 0.5]
    later = [e for e in t.events if e.kind == "topology" and e.ts >= label["end"]]
    assert later and node not in Topology.from_data(later[0].data).nodes


# --- builder, layout, commands, lines ------------------------------------------------------
def test_fault_plan_builder_places_faults_where_asked():
    plan = FaultPlan().fail_at("gpu_lost", node="n003", t=120).fail_at("job_hang", rank=17, t=400)
    run = simulate(SimConfig(nodes=4, gpus=8, seed=1, noise=False), plan=plan)
    list(run.events())
    lost, hang = run.labels
    assert (lost["fault"], lost["nodes"], lost["onset"]) == ("gpu_lost", ["n003"], SimConfig().start_ts + 120)
    assert (hang["fault"], hang["ranks"], hang["nodes"]) == ("job_hang", [17], ["n002"])
    # gpu_lost's node was swapped for a spare when its episode ended
    assert "n003" not in run.cluster.slots and "s000" in run.cluster.slots


def test_overlapping_job_wide_faults_are_refused():
    plan = FaultPlan().fail_at("cuda_error", node="n000", t=100).fail_at("nan_loss", t=150)
    with pytest.raises(ValueError, match="overlap"):
        plan.check()
    with pytest.raises(ValueError, match="unknown fault class"):
        FaultPlan().fail_at("gremlins", t=1)


def test_layout_fills_the_job_or_says_why():
    assert choose_layout(16, 8) == choose_layout(16, 8, tp=8, pp=4, dp=4)
    with pytest.raises(ValueError, match="tp\\*pp\\*dp"):
        choose_layout(4, 8, tp=8, pp=3, dp=1)


def test_commands_drive_a_cluster_without_auto_recovery():
    cfg = SimConfig(nodes=4, gpus=2, seed=2, noise=False, flight_recorder=False)
    sim = SimulatedCluster(cfg, FaultPlan().fail_at("job_hang", rank=5, t=50, detail="in_collective"),
                           auto_recover=False)
    sim.advance(cfg.start_ts + 200)
    assert sim.state == "hung"
    silent = sim.advance(cfg.start_ts + 400)
    assert not [e for e in silent if e.kind == "step"]
    now = sim.now
    cmd = dict(job=cfg.job, issued_at=now, expires_at=now + 60)
    sim.apply(Command(action="capture_stacks", **cmd))
    sim.apply(Command(action="evict", nodes=("n002",), **cmd))
    out = sim.advance(now + 60)
    dumps = [e for e in out if e.kind == "stack_dump"]
    assert len(dumps) == 8 and "all_gather_into_tensor" in next(e for e in dumps if e.data["rank"] == 5).data["dump"]
    topo = [e for e in out if e.kind == "topology"]
    assert topo and Topology.from_data(topo[-1].data).by_rank[5].node == "s000"
    assert [e for e in out if e.kind == "step"], "the job resumes after the eviction"
    assert sim.labels[0]["ranks"] == [5]


def test_line_templates_match_the_real_formats():
    assert lines.xid("0000:3b:00", 79, 2345) == \
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=2345, name=python3, GPU has fallen off the bus."
    assert lines.mlx5_link("0000:5e:00.0", "ib0", up=False) == "mlx5_core 0000:5e:00.0 ib0: Link down"
    assert lines.mlx5_module_event("0000:5e:00.0") == \
        "mlx5_core 0000:5e:00.0: mlx5_port_module_event:1105:(pid 0): Port module event: module 0, Cable unplugged"
    assert lines.hung_task(2345)[0] == "INFO: task python3:2345 blocked for more than 120 seconds."
    line = lines.watchdog_timeout(3, 1795342272.345678, 2345, 1234, "ALLREDUCE", 600000, 600083)
    assert re.fullmatch(
        r"\[rank3\]:\[E\d{4} \d\d:\d\d:\d\d\.\d{6} 2345 torch/csrc/distributed/c10d/ProcessGroupNCCL\.cpp:632\] "
        r"\[PG ID 0 PG GUID 0\(default_pg\) Rank 3\] Watchdog caught collective operation timeout: "
        r"WorkNCCL\(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout\(ms\)=600000\) "
        r"ran for 600083 milliseconds before timing out\.", line)
    assert lines.dmesg(12.5, "x") == "[   12.500000] x"


def test_planned_fault_validates_its_class():
    with pytest.raises(ValueError):
        PlannedFault("unknown", 1.0)


def test_reattempt_restarts_a_crashed_job_in_place():
    cfg = SimConfig(nodes=2, gpus=2, seed=4, noise=False)
    sim = SimulatedCluster(cfg, FaultPlan().fail_at("cuda_error", rank=1, t=50), auto_recover=False)
    crashed = sim.advance(cfg.start_ts + 300)
    assert sim.state == "down"
    assert any("illegal memory access" in e.data.get("line", "") for e in crashed)
    now = sim.now
    sim.apply(Command(job=cfg.job, action="reattempt", issued_at=now, expires_at=now + 60))
    out = sim.advance(now + 60)
    restart = [e for e in out if e.kind == "restart"]
    assert restart and restart[0].data["nodes_out"] == [] and "reattempt" in restart[0].data["reason"]
    assert [e for e in out if e.kind == "step"] and sim.slots == ["n000", "n001"]


def test_a_plan_outside_the_job_is_refused_up_front():
    cfg = SimConfig(nodes=2, gpus=2)
    with pytest.raises(ValueError, match="node n005 is not in a 2-node job"):
        SimulatedCluster(cfg, FaultPlan().fail_at("nic", node="n005", t=10))
    with pytest.raises(ValueError, match="rank 9 outside 0..3"):
        SimulatedCluster(cfg, FaultPlan().fail_at("job_hang", rank=9, t=10))


def test_cli_writes_a_byte_identical_labelled_trace_per_seed(tmp_path, capsys):
    import json

    from faultlens.cli import main
    from faultlens.events.trace import read_labels

    args = ["simulate", "--nodes", "2", "--gpus", "2", "--faults", "2", "--seed", "11", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "a.parquet")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["labels"] == 2 and sum(summary["faults"].values()) == 2
    assert summary["labels_path"] == str(tmp_path / "a.parquet") + ".labels.jsonl"
    assert main([*args, "--out", str(tmp_path / "b.parquet")]) == 0
    capsys.readouterr()
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert read_labels(tmp_path / "a.parquet") == read_labels(tmp_path / "b.parquet")
    assert main(["simulate", "--nodes", "0", "--out", str(tmp_path / "c.parquet")]) == 2
    assert "need at least one node" in capsys.readouterr().err


def test_the_same_seed_gives_the_same_bytes_in_processes_with_other_string_hashes(tmp_path):
    """A set of names iterated into a payload follows the process's string hashing, which Python
    draws afresh for every process: the NIC samples' absent counters came out in another order
    in each run, so two runs of one seed differed (and so did the JSON every consumer read)."""
    import os
    import subprocess
    import sys

    paths = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"h{hash_seed}.parquet"
        subprocess.run([sys.executable, "-m", "faultlens.cli", "simulate", "--nodes", "2", "--gpus", "2",
                        "--duration", "30", "--seed", "5", "--no-progress", "--out", str(out)],
                       check=True, capture_output=True, env={**os.environ, "PYTHONHASHSEED": hash_seed})
        paths.append(out)
    assert paths[0].read_bytes() == paths[1].read_bytes()


@pytest.mark.parametrize("pause", ["checkpoint", "eval"])
def test_a_loss_spike_in_a_pause_still_spikes_the_next_two_steps(pause):
    """A spike over a fixed 20 s fell in a checkpoint or evaluation pause now and then: labelled,
    with no spiked step to see (the README demo's one miss)."""
    cfg = SimConfig(nodes=2, gpus=2, seed=4)
    healthy = list(simulate(cfg, FaultPlan(), duration=600).events())
    steps = sorted({(e.ts, e.data["step"]) for e in healthy if e.kind == "step"})
    if pause == "checkpoint":
        paused_at = next(e.ts for e in healthy if e.kind == "checkpoint")
    else:
        paused_at = next(ts for ts, n in steps if n % cfg.eval_every == cfg.eval_every // 2)
    onset = paused_at + 1.0 - cfg.start_ts
    assert next(ts for ts, _ in steps if ts > paused_at) - paused_at > 2 * cfg.step_time_s  # a pause indeed
    events = list(simulate(cfg, FaultPlan().fail_at("loss_spike", t=onset), duration=onset + 120).events())
    base = statistics.median(as_float(e.data["loss"]) for e in _steps(events) if e.ts < paused_at)
    spiked = sorted({e.data["step"] for e in _steps(events) if as_float(e.data["loss"]) > 5 * base})
    assert len(spiked) == 2 and spiked[1] == spiked[0] + 1
