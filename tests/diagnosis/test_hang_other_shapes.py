"""Hang reading of dumps of other shapes than faultlens's own agent and hook send (outside check,
round 2, tests/outside/test_outside_dumps.py): each test failed before its fix.

- `py-spy dump --json` (an agent of another make): parsed to nothing, so a hang with every rank
  dumped read as "no usable stack dump" and was reattempted in place;
- a trainer whose main thread has no torch frame (JAX fed by a torch DataLoader): its pin-memory
  thread was taken for the training loop;
- a mismatched collective in the Flight Recorder (members of one group in different ops under one
  number): the recorder named nobody, and the stacks evicted the machine of the rank on the other
  branch;
- Flight Recorder dumps that trail the agent's py-spy dumps: the verdict was read the moment every
  stack was in, without the recorders still on their way;
- a rank hung in torch.save on an NFS filer the job's storage alert says is not answering: the
  writer's machine was evicted, and its replacement would hang on the same write;
- two stuck ranks on two machines of a pure data-parallel job: the one group holding both is the
  whole job, and every machine of it was evicted; with their own machines the set, three stuck
  ranks on three of four machines evicted those three (more than half the job: an alert now);
- a job's whole telemetry lost for 60 s (a pipeline outage, tests/outside/stream_shapes.outage):
  the first beat back, before any step, asked for every rank's stacks.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.testbed.stack_samples import JOB, T0, beat_event, event, grid, run_detector, stack_event, step_event
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.implicit import ImplicitConfig, ImplicitFaultDetector
from faultlens.diagnosis.hang.detector import HangConfig
from faultlens.diagnosis.hang.recorder import RULE_RECORDER, read_hang
from faultlens.diagnosis.stacks.localize import localize
from faultlens.diagnosis.stacks.stack_dump import parse_dump, training_thread
from faultlens.events.diagnosis_record import Action, Diagnosis, FaultClass
from faultlens.events.topology import Topology
from tests.outside.dump_formats import Group, pyspy_json, pyspy_text, recorder_json
from tests.outside.dump_stacks import (
    _CKPT_WRITE,
    _FSDP_BARRIER,
    _JAX_STEP,
    _LOADER_WAIT,
    _MEGATRON_COMPUTE,
    _MEGATRON_TP_WAIT,
    _ZERO3_GATHER,
)

RECORDER = Path(__file__).resolve().parents[1] / "fixtures" / "stacks" / "recorder"


def test_pyspy_json_reads_as_its_text_form():
    for stack in (_ZERO3_GATHER, _LOADER_WAIT, _FSDP_BARRIER):
        as_json, as_text = parse_dump(pyspy_json(4242, stack)), parse_dump(pyspy_text(4242, "python3 t.py", stack))
        assert [(t.name, t.status, t.frames) for t in as_json] == [(t.name, t.status, t.frames) for t in as_text]
        main = training_thread(as_json)
        assert main is not None and main.name == "MainThread"
        assert main.frames[0].file == stack[0][1]     # the site-packages prefix dropped, as py-spy's text shows it


def test_json_that_is_no_pyspy_dump_parses_to_nothing_and_never_raises():
    assert parse_dump('{"entries": []}') == []
    assert parse_dump("[1, 2") == []
    assert parse_dump('[{"frames": [{"name": 3}], "thread_name": 7, "active": "x"}]')[0].frames == ()


def test_a_pin_memory_thread_is_never_the_training_loop():
    main = training_thread(parse_dump(pyspy_text(4242, "python3 -u maxtext/train.py", _JAX_STEP)))
    assert main is not None and main.name == "MainThread" and main.frames[0].function == "_pjit_call_impl_python"


def _fr_topology() -> Topology:
    ranks = [{"rank": r, "node": f"n{r // 4}", "tp": r % 4, "pp": 0, "dp": r // 4} for r in range(8)]
    return Topology.from_data({"tp": 4, "pp": 1, "dp": 2, "ranks": ranks})


def test_a_mismatched_collective_is_an_alert_not_the_other_branchs_machine():
    groups = [Group("0", list(range(8))), Group("1", [0, 1, 2, 3]), Group("2", [4, 5, 6, 7])] + \
             [Group(str(3 + i), [i, i + 4]) for i in range(4)]
    done = {"0": 3, "1": 120, "2": 120, "3": 30, "4": 30, "5": 30, "6": 30}
    recorders, stacks = {}, {}
    for rank in range(8):
        held = {"5": ("all_gather", [[512, 1024]]) if rank == 6 else ("all_reduce", [[4096, 1024]])} \
            if rank in (2, 6) else {"1" if rank < 4 else "2": ("all_reduce", [[8192, 4096]])}
        recorders[rank] = recorder_json(rank, groups, done, held, 1)
        stacks[rank] = pyspy_text(4000 + rank, "python3 train.py", _ZERO3_GATHER if rank == 6 else _MEGATRON_TP_WAIT)
    verdict = read_hang(stacks, recorders, _fr_topology())
    assert verdict.rule == RULE_RECORDER and verdict.alert and verdict.nodes == ()
    assert verdict.outlier_ranks == (2, 6) and "mismatched collective" in verdict.detail


def test_recorder_dumps_that_trail_the_stacks_are_waited_for():
    folder = RECORDER / "fr_tp2pp2dp2_compute_r5"
    case = json.loads((folder / "case.json").read_text())
    topo = Topology.from_data(json.loads((folder / "topology.json").read_text()))
    book = JobBook()
    book.update(topo.to_event(JOB, T0))
    det = ImplicitFaultDetector(book, ImplicitConfig(hang=HangConfig()))
    last = max(topo.by_rank)
    events = [step_event(2.0 * n + 0.001 * r, topo, r, n) for n in range(1, 21) for r in topo.by_rank]
    events += [beat_event(t, node) for t in range(0, 300, 10) for node in topo.nodes]
    events += [stack_event(105.0 + 0.01 * r, topo, r, (folder / f"{r}.txt").read_text()) for r in topo.by_rank]
    # Every recorder but the last rank's is in before the stacks complete; the last one trails by 2 s.
    events += [event((105.0 + 0.01 * r - 0.005) if r != last else 107.0, topo.by_rank[r].node, "stack", "recorder_dump",
                     rank=r, pid=1000 + r, dump=(folder / f"{r}.fr.json").read_text(), entries=1, truncated=False)
               for r in topo.by_rank]
    out = run_detector(det, events, until=200)
    assert [d.action for d in out] == ["capture_stacks", "evict"]
    final = out[1]
    assert final.ts >= T0 + 107.0 and "no recorder dump" not in final.detail
    assert f"rule {RULE_RECORDER}" in final.detail and final.nodes == (case["culprit_node"],)


def test_a_dataloader_workers_main_thread_in_a_subprocesses_dump_is_not_the_training_loop():
    # `py-spy dump --subprocesses` prints the workers after the trainer's threads (benfred/py-spy
    # src/dump.rs): each worker's MainThread runs torch's _worker_loop, torch frames and all.
    worker = ("Process 4301: /opt/conda/bin/python3.11 -c from multiprocessing.spawn import spawn_main\n"
              "Python v3.11.9 (/opt/conda/bin/python3.11)\nParent Process 4242: python3 train_zero3.py\n\n"
              'Thread 4301 (idle): "MainThread"\n'
              "    wait (threading.py:331)\n    get (multiprocessing/queues.py:113)\n"
              "    _worker_loop (torch/utils/data/_utils/worker.py:308)\n    run (multiprocessing/process.py:108)\n"
              "    _bootstrap (multiprocessing/process.py:314)\n    _main (multiprocessing/spawn.py:135)\n"
              "    spawn_main (multiprocessing/spawn.py:122)\n    <module> (<string>:1)\n")
    text = worker + "\n" + pyspy_text(4242, "python3 train_zero3.py", _ZERO3_GATHER)
    main = training_thread(parse_dump(text))
    assert main is not None and main.frames[0].function == "all_gather_into_tensor"


def _hung_on(stuck: list) -> list[Diagnosis]:
    """4 machines x 4 ranks; rank 0 runs ``stuck``, the others wait in the barrier after the save."""
    topo = grid(4, 4, 1, 1, 16)
    book = JobBook()
    book.update(topo.to_event(JOB, T0))
    det = ImplicitFaultDetector(book, ImplicitConfig(hang=HangConfig()))
    events = [step_event(2.0 * n + 0.001 * r, topo, r, n) for n in range(1, 21) for r in topo.by_rank]
    events += [beat_event(t, node) for t in range(0, 300, 10) for node in topo.nodes]
    events += [stack_event(105.0 + 0.01 * r, topo, r, pyspy_text(4000 + r, "python3 fsdp_train.py",
                                                                    stuck if r == 0 else _FSDP_BARRIER))
               for r in topo.by_rank]
    return run_detector(det, events, until=200, diagnoses=_storage_alert())


def _storage_alert() -> list[Diagnosis]:
    return [Diagnosis(job=JOB, ts=T0 + 50.0, onset=T0 + 50.0, fault=FaultClass.STORAGE, action=Action.ALERT,
                      detail="nfs_error (storage.nfs_not_responding) seen on n000: nfs: server filer01 not "
                             "responding, still trying", id="nfs-1")]


def test_a_rank_hung_writing_to_a_filer_the_job_says_is_failing_is_no_eviction():
    out = [d for d in _hung_on(_CKPT_WRITE) if d.fault == "job_hang"]
    assert [d.action for d in out] == ["capture_stacks", "alert"]
    assert out[1].ranks == (0,) and "a shared filer, not the machine" in out[1].detail
    assert "nfs-1" in out[1].evidence


def test_a_storage_alert_spares_no_rank_that_is_not_waiting_on_storage():
    out = [d for d in _hung_on(_MEGATRON_COMPUTE) if d.fault == "job_hang"]
    assert [d.action for d in out] == ["capture_stacks", "evict"] and out[1].nodes == ("n000",)


def test_two_outliers_of_a_pure_data_parallel_job_are_their_own_machines_not_the_whole_job():
    topo = grid(4, 8, 1, 1, 32)
    place = localize([5, 26], topo)
    assert place is not None and place.nodes == (topo.by_rank[5].node, topo.by_rank[26].node)
    assert set(place.ranks) == {r for r in topo.by_rank if topo.by_rank[r].node in place.nodes}
    # A pipeline's machines stay the set (ByteRobust's over-eviction): a quarter of the job here.
    pipe = grid(16, 4, 4, 4, 4)
    stages = [r for r in pipe.by_rank if pipe.group_id(r, "pp") == pipe.group_id(0, "pp")]
    place = localize(stages[:2], pipe)
    assert place is not None and place.axis == "pp" and len(place.nodes) == 4


def test_a_hang_that_would_evict_most_of_the_jobs_machines_evicts_none():
    topo = grid(4, 8, 1, 1, 32)
    book = JobBook()
    book.update(topo.to_event(JOB, T0))
    det = ImplicitFaultDetector(book, ImplicitConfig(hang=HangConfig()))
    events = [step_event(2.0 * n + 0.001 * r, topo, r, n) for n in range(1, 21) for r in topo.by_rank]
    events += [beat_event(t, node) for t in range(0, 300, 10) for node in topo.nodes]
    events += [stack_event(105.0 + 0.01 * r, topo, r, pyspy_json(4000 + r, _LOADER_WAIT if r in (5, 13, 26)
                                                                   else _ZERO3_GATHER)) for r in topo.by_rank]
    out = [d for d in run_detector(det, events, until=200) if d.fault == "job_hang"]
    assert [d.action for d in out] == ["capture_stacks", "alert"]
    assert out[1].ranks == (5, 13, 26) and "3 of the job's 4 machines" in out[1].detail


def _outage_run(steps_until: float) -> list[Diagnosis]:
    """2 machines x 4 ranks stepping every 2 s until ``steps_until``; every record of 60-130.5 s lost."""
    topo = grid(2, 4, 1, 1, 8)
    book = JobBook()
    book.update(topo.to_event(JOB, T0))
    det = ImplicitFaultDetector(book, ImplicitConfig(hang=HangConfig()))
    events = [step_event(2.0 * n + 0.001 * r, topo, r, n) for n in range(1, 150) for r in topo.by_rank
              if 2.0 * n < steps_until]
    events += [beat_event(t + 0.7 * i, node) for t in range(0, 300, 10) for i, node in enumerate(topo.nodes)]
    events = [e for e in events if not (T0 + 60.0 <= e.ts < T0 + 130.5)]   # a beat back before any step
    return [d for d in run_detector(det, events, until=290) if d.fault == "job_hang"]


def test_the_first_beats_back_from_an_outage_are_no_stall():
    assert _outage_run(steps_until=300.0) == []


def test_a_job_that_hung_during_an_outage_is_still_suspected_a_grace_after_it():
    out = _outage_run(steps_until=50.0)
    assert [d.action for d in out][:1] == ["capture_stacks"]
    assert out[0].ts >= T0 + 130.0 + 30.0
