"""Real dumps from torch 2.11 + NCCL 2.28.9 on an H100 (tests/fixtures/real_gpu/gpu40/, docs/real_gpu.md):
the Flight Recorder's NCCL and CPU recorders (JSON and pickle, and the file a real watchdog timeout
wrote) and py-spy dumps of the reference trainer training on CUDA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultlens.diagnosis.stacks.flight_recorder import load_recorder
from faultlens.diagnosis.stacks.rank_threads import read_rank
from faultlens.diagnosis.stacks.stack_dump import parse_dump, training_thread

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real_gpu" / "gpu40"
PYSPY = sorted(FIXTURES.glob("pyspy_*.txt"))


def test_the_nccl_recorder_reads_the_same_from_json_and_pickle():
    js = load_recorder((FIXTURES / "fr_nccl.json").read_bytes())
    pk = load_recorder((FIXTURES / "fr_nccl.pickle").read_bytes())
    assert js.collectives == pk.collectives and js.last_enqueued == pk.last_enqueued == {"0": 9, "1": 1}
    assert [(c.pg, c.seq, c.op) for c in js.collectives] == [
        ("0", 1, "all_reduce"), ("0", 2, "all_reduce"), ("0", 3, "all_reduce"), ("0", 4, "broadcast"),
        ("0", 5, "all_reduce_barrier"), ("0", 6, "_all_gather_base"), ("0", 7, "_reduce_scatter_base"),
        ("1", 1, "all_reduce"), ("0", 8, "all_reduce"), ("0", 9, "all_gather")]
    assert all(c.retired and c.state == "completed" for c in js.collectives)
    assert js.members == {"0": (0,), "1": (0,)} and js.version == "2.10"
    assert js.pending() == {}
    # NCCL's groups carry no "default_pg" desc here: the members come from pg_config instead.
    assert js.world == frozenset()


def test_the_dump_a_real_watchdog_timeout_wrote_holds_the_stuck_collective():
    dump = load_recorder((FIXTURES / "fr_timeout_rank_0.pickle").read_bytes())
    stuck = dump.pending()["0"]
    assert (stuck.seq, stuck.op, stuck.state, stuck.retired, stuck.sizes) == (2, "all_reduce", "scheduled", False, ((65536,),))
    assert dump.at("0", 1).retired and dump.last_enqueued == {"0": 2}


@pytest.mark.parametrize("name", ["fr_cpu.json", "fr_cpu.pickle"])
def test_the_cpu_recorder_of_an_nccl_job_holds_no_matchable_collective(name):
    raw = (FIXTURES / name).read_bytes()
    obj = json.loads(raw) if name.endswith(".json") else None
    if obj is not None:  # 20 gloo fingerprint all_gathers of two pg_ids, all under the name ""
        assert len(obj["entries"]) == 20 and {tuple(e["process_group"]) for e in obj["entries"]} == {("", "")}
    dump = load_recorder(raw)
    assert dump.collectives == () and dump.pending() == {}


@pytest.mark.parametrize("path", PYSPY, ids=lambda p: p.stem)
def test_a_real_py_spy_dump_of_a_cuda_trainer_finds_its_training_thread(path):
    text = path.read_text()
    threads = parse_dump(text)
    assert len(threads) == 5 and not any(t.truncated for t in threads)
    main = training_thread(threads)
    assert main is not None and main.name == "MainThread" and main.thread_id == "656" and main.status == "idle"
    assert any(f.key == ("main", "reference_trainer.py") for f in main.frames)
    assert {t.name for t in threads} == {"MainThread", "trainer-gpu40-0-network-thread", "faultlens-commands",
                                         "kafka-io-trainer-gpu40-0", None}
    assert all(":" not in f.function for f in main.frames if f.file.endswith(".py"))  # no "argv: None" from --locals
    assert read_rank(text).activity is not None


def test_native_frames_and_the_autograd_thread_of_a_real_dump():
    threads = parse_dump((FIXTURES / "pyspy_native_1.txt").read_text())
    main = training_thread(threads)
    assert main.frames[0] == main.frames[0].__class__("clock_nanosleep", "libc.so.6", None)
    assert main.frames[-1].key == ("?", "libc.so.6")  # a bare address
    [autograd] = [t for t in threads if t.name is None]
    assert [f.function for f in autograd.frames[2:5]] == [
        "std::condition_variable::wait", "torch::autograd::ReadyQueue::pop", "torch::autograd::Engine::thread_main"]


def test_a_dump_taken_mid_step_shows_cuda_backward_in_torch():
    main = training_thread(parse_dump((FIXTURES / "pyspy_plain_2.txt").read_text()))
    assert main.frames[0].key == ("_engine_run_backward", "graph.py") and main.torch_frames >= 3
