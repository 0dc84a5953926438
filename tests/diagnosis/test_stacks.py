"""Stack dump parsing, signatures, fuzzy grouping and cluster_stacks (docs/design.md §5), plus `faultlens stacks`."""

from __future__ import annotations

import json

import pytest

from bench.testbed.stack_samples import (
    GRAD_SYNC,
    PP_RECV,
    PP_SEND,
    SLOW_COMPUTE,
    STUCK_ALL_GATHER,
    faulthandler_dump,
    fig7_dumps,
    grid,
    outlier_dumps,
    pyspy_dump,
)
from faultlens.cli import main
from faultlens.diagnosis.stacks.outliers import (
    NotInTopology,
    StackConfig,
    cluster_stacks,
    describe,
    parse_dump,
    signature,
    training_thread,
)

# Real `py-spy dump --locals` output captured on this machine (py-spy 0.3, CPython 3.11.7).
REAL_PYSPY = """\
Process 5831: /work/main/.venv/bin/python /tmp/h3a_sleep.py
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 5831 (idle): "MainThread"
    inner (h3a_sleep.py:5)
        Arguments:
            x: 3
    <module> (h3a_sleep.py:7)
Thread 5833 (idle): "loader"
    worker (h3a_sleep.py:3)
    Thread.run (threading.py:982)
        Arguments:
            self: <Thread at 0x7fb3281ed390>
    Thread._bootstrap_inner (threading.py:1045)
        Arguments:
            self: <Thread at 0x7fb3281ed390>
    Thread._bootstrap (threading.py:1002)
        Arguments:
            self: <Thread at 0x7fb3281ed390>
"""


# --- parsing --------------------------------------------------------------------------------
def test_parse_real_pyspy_dump_with_locals():
    threads = parse_dump(REAL_PYSPY)
    assert [t.name for t in threads] == ["MainThread", "loader"]
    main_thread, loader = threads
    assert main_thread.status == "idle" and main_thread.thread_id == "5831"
    assert [(f.function, f.file, f.line) for f in main_thread.frames] == [("inner", "h3a_sleep.py", 5), ("<module>", "h3a_sleep.py", 7)]
    assert [f.function for f in loader.frames] == ["worker", "Thread.run", "Thread._bootstrap_inner", "Thread._bootstrap"]
    assert not any(t.truncated for t in threads)


def test_parse_faulthandler_skips_the_dumping_listener_and_finds_the_main_thread():
    threads = parse_dump(faulthandler_dump(STUCK_ALL_GATHER))
    assert len(threads) == 3 and threads[0].current and all(t.tool == "faulthandler" for t in threads)
    chosen = training_thread(threads)
    assert chosen.frames[0].function == "all_gather_into_tensor"
    assert chosen.frames[0].file == "torch/distributed/distributed_c10d.py"  # site-packages prefix dropped


def test_both_tools_give_the_same_signature():
    spy = training_thread(parse_dump(pyspy_dump(PP_RECV, pid=77, locals_=True)))
    fh = training_thread(parse_dump(faulthandler_dump(PP_RECV)))
    assert signature(spy) == signature(fh)
    assert signature(spy) != signature(training_thread(parse_dump(pyspy_dump(PP_SEND))))
    assert signature(faulthandler_dump(PP_RECV)) == signature(spy)  # straight from dump text
    assert signature("not a dump") is None


def test_signature_ignores_pids_lines_and_the_loader_thread():
    a = training_thread(parse_dump(pyspy_dump(GRAD_SYNC, pid=1, loader=True)))
    b = training_thread(parse_dump(pyspy_dump(GRAD_SYNC, pid=99999, loader=False, line_shift=7)))
    assert a.frames[2].line != b.frames[2].line
    assert signature(a) == signature(b)
    assert describe(signature(a), 2).startswith("reduce_scatter_tensor@distributed_c10d.py < wrapper@c10d_logger.py")


@pytest.mark.parametrize("text", ["", "   \n", "hello world\n\x00\x01garbage", "Process 12: python\nPython v3.11\n", None, 42])
def test_garbage_and_empty_parse_to_nothing(text):
    threads = parse_dump(text)
    assert threads == [] or training_thread(threads) is None


def test_truncated_dump_marks_its_last_thread():
    cut = pyspy_dump(GRAD_SYNC, loader=False)[:-60]  # cut inside the last frame line
    threads = parse_dump(cut)
    assert threads[-1].truncated
    assert not parse_dump(pyspy_dump(GRAD_SYNC, loader=False))[-1].truncated


def test_named_listener_and_heartbeat_threads_are_never_the_training_thread():
    text = (
        'Thread 10 (active): "faultlens-listener"\n'
        "    all_reduce (torch/distributed/distributed_c10d.py:10)\n"
        "    _listen (trainer_hooks/commands.py:5)\n"
        'Thread 11 (idle): "Thread-2"\n'
        "    wait (threading.py:320)\n"
    )
    chosen = training_thread(parse_dump(text))
    assert chosen.name == "Thread-2"


# --- clustering -------------------------------------------------------------------------------
@pytest.mark.parametrize("nodes,gpus", [(4, 8), (16, 2)])
def test_fig7_blames_the_stuck_ranks_pipeline(nodes, gpus):
    topo = grid(nodes, gpus, tp=2, pp=4, dp=4)
    stuck = next(p.rank for p in topo.ranks if p.pp == 3 and p.dp == 2 and p.tp == 1)
    verdict = cluster_stacks(fig7_dumps(topo, stuck), topo)
    pipeline = topo.group_id(stuck, "pp")
    assert verdict.group == f"pp:{pipeline}" and verdict.axis == "pp" and verdict.group_id == pipeline
    assert set(verdict.outlier_ranks) == set(topo.group_ranks("pp", pipeline))
    assert verdict.nodes == topo.group_nodes("pp", pipeline)
    assert verdict.confidence > 0.8 and verdict.bad_ranks == () and verdict.missing_ranks == ()
    assert "all_gather_into_tensor" in verdict.detail and "28 rank(s)" in verdict.detail
    assert any("all_gather_into_tensor" in frame for frames in verdict.outlier_frames.values() for frame in frames)


def test_fig7_with_mixed_tools_and_fuzzy_noise_keeps_healthy_ranks_together():
    topo = grid(16, 2, tp=2, pp=4, dp=4)
    dumps = fig7_dumps(topo, 7)
    # Healthy ranks dumped by the trainer hook instead, one with an extra wrapper frame: still healthy.
    dumps[20] = faulthandler_dump(GRAD_SYNC)
    wrapped = GRAD_SYNC[:3] + [("_wrapped", "megatron/core/utils.py", 12)] + GRAD_SYNC[3:]
    dumps[21] = pyspy_dump(wrapped, line_shift=3)
    exact = cluster_stacks(dumps, topo, StackConfig(max_frame_edits=0))
    fuzzy = cluster_stacks(dumps, topo)
    assert 21 in exact.outlier_ranks  # exact matching splits it off
    assert set(fuzzy.outlier_ranks) == set(topo.group_ranks("pp", topo.group_id(7, "pp")))
    assert fuzzy.confidence > exact.confidence


def test_tp_group_case():
    topo = grid(8, 4, tp=4, pp=2, dp=4)
    # One TP group (a node's four GPUs) computes while everyone else waits in grad sync.
    bad = {r: SLOW_COMPUTE for r in topo.group_ranks("tp", 5)}
    verdict = cluster_stacks(outlier_dumps(topo, bad), topo)
    assert verdict.group == "tp:5"
    assert verdict.outlier_ranks == topo.group_ranks("tp", 5)
    assert verdict.nodes == topo.group_nodes("tp", 5)


def test_dp_group_case():
    topo = grid(16, 2, tp=2, pp=4, dp=4)
    bad = {r: PP_RECV for r in topo.group_ranks("dp", 6)}
    verdict = cluster_stacks(outlier_dumps(topo, bad), topo)
    assert verdict.group == "dp:6" and set(verdict.nodes) == set(topo.group_nodes("dp", 6))


def test_no_outlier_means_no_group():
    topo = grid(4, 2, tp=2, pp=2, dp=2)
    verdict = cluster_stacks(outlier_dumps(topo, {}), topo)
    assert verdict.outlier_ranks == () and verdict.group is None and verdict.confidence == 0.0
    assert "no outlier" in verdict.detail


def test_bad_and_missing_dumps_are_reported_and_lower_confidence():
    topo = grid(16, 2, tp=2, pp=4, dp=4)
    full = cluster_stacks(fig7_dumps(topo, 7), topo)
    dumps = fig7_dumps(topo, 7)
    dumps[0] = ""
    dumps[2] = "\x00\xff garbage"
    dumps[4] = pyspy_dump(GRAD_SYNC, loader=False)[:-40]
    for r in range(8, 24):
        del dumps[r]
    verdict = cluster_stacks(dumps, topo)
    assert verdict.bad_ranks == (0, 2, 4)
    assert verdict.missing_ranks == tuple(range(8, 24))
    assert verdict.group == full.group
    assert verdict.confidence < full.confidence / 2
    assert "too many ranks missing" in verdict.detail and "bad dumps" in verdict.detail


def test_all_dumps_bad_gives_a_zero_confidence_verdict():
    topo = grid(2, 2, tp=2, pp=2, dp=1)
    verdict = cluster_stacks({0: "", 1: "junk", 2: "\n\n"}, topo)
    assert verdict.group is None and verdict.bad_ranks == (0, 1, 2) and verdict.missing_ranks == (3,)
    assert verdict.confidence == 0.0


def test_dump_for_a_rank_outside_the_topology_raises_a_clear_error():
    topo = grid(2, 2, tp=2, pp=2, dp=1)
    with pytest.raises(NotInTopology, match="not in the topology: 9"):
        cluster_stacks({0: pyspy_dump(GRAD_SYNC), 9: pyspy_dump(GRAD_SYNC)}, topo)


# --- faultlens stacks -------------------------------------------------------------------------
def _write(tmp_path, topo, dumps, topo_doc=None):
    d = tmp_path / "dumps"
    d.mkdir()
    for r, text in dumps.items():
        (d / f"{r}.txt").write_text(text)
    t = tmp_path / "topo.json"
    t.write_text(json.dumps(topo_doc if topo_doc is not None else topo.to_data()))
    return d, t


def test_cli_prints_one_diagnosis_for_fig7(tmp_path, capsys):
    topo = grid(16, 2, tp=2, pp=4, dp=4)
    dumps = fig7_dumps(topo, 7)
    dumps[12] = "truncated garbage"
    d, t = _write(tmp_path, topo, dumps, topo.to_event("job-9", 1767225600.0).to_dict())
    (d / "README").write_text("not a dump")
    assert main(["stacks", str(d), "--topology", str(t)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    diag = json.loads(lines[0])
    pipeline = topo.group_id(7, "pp")
    assert diag["fault"] == "job_hang" and diag["action"] == "evict" and diag["job"] == "job-9"
    assert diag["group"] == f"pp:{pipeline}" and diag["nodes"] == list(topo.group_nodes("pp", pipeline))
    assert diag["ranks"] == list(topo.group_ranks("pp", pipeline))
    assert "bad dumps" in diag["detail"] and "12" in diag["detail"]


def test_cli_fail_slow_and_job_flags(tmp_path, capsys):
    topo = grid(8, 4, tp=4, pp=2, dp=4)
    d, t = _write(tmp_path, topo, outlier_dumps(topo, {r: SLOW_COMPUTE for r in topo.group_ranks("tp", 2)}))
    assert main(["stacks", str(d), "--topology", str(t), "--fault", "fail_slow", "--job", "j1"]) == 0
    diag = json.loads(capsys.readouterr().out)
    assert (diag["fault"], diag["job"], diag["group"]) == ("fail_slow", "j1", "tp:2")


def test_cli_rank_files_outside_the_topology_exit_1(tmp_path, capsys):
    topo = grid(2, 2, tp=2, pp=2, dp=1)
    dumps = outlier_dumps(topo, {})
    dumps[17] = pyspy_dump(GRAD_SYNC)
    d, t = _write(tmp_path, topo, dumps)
    assert main(["stacks", str(d), "--topology", str(t)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "not in the topology: 17" in captured.err


def test_cli_bad_topology_and_nothing_to_localise(tmp_path, capsys):
    topo = grid(2, 2, tp=2, pp=2, dp=1)
    d, t = _write(tmp_path, topo, outlier_dumps(topo, {}), {"tp": 2, "ranks": []})
    assert main(["stacks", str(d), "--topology", str(t)]) == 1
    assert "cannot use topology" in capsys.readouterr().err
    t.write_text(json.dumps(topo.to_data()))
    # Every rank in the same gradient sync: as a hang, nobody is behind (no suspect, no eviction);
    # as a fail-slow round, the clustering finds no outlier.
    assert main(["stacks", str(d), "--topology", str(t)]) == 0
    diag = json.loads(capsys.readouterr().out)
    assert diag["fault"] == "job_hang" and diag["action"] == "stop_time_diagnosis" and diag["nodes"] == []
    assert "no suspect" in diag["detail"]
    assert main(["stacks", str(d), "--topology", str(t), "--fault", "fail_slow"]) == 0
    diag = json.loads(capsys.readouterr().out)
    assert diag["fault"] == "unknown" and diag["action"] == "none" and "nothing to localise" in diag["detail"]


def test_no_dominant_stack_blames_no_group():
    topo = grid(4, 2, tp=2, pp=2, dp=2)
    # Every rank somewhere else: nothing is "the healthy stack", so nothing is an outlier either.
    frames = [GRAD_SYNC, PP_RECV, PP_SEND, STUCK_ALL_GATHER, SLOW_COMPUTE]
    dumps = {r: pyspy_dump(frames[r % 5][:1] + [(f"fn{r}", "x.py", 1)] + frames[r % 5][1:]) for r in range(8)}
    verdict = cluster_stacks(dumps, topo, StackConfig(max_frame_edits=0))
    assert verdict.group is None and verdict.confidence == 0.0 and "no dominant stack" in verdict.detail
