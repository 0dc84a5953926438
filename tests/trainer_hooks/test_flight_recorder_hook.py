"""The trainer hook turns torch's Flight Recorder on and publishes its dump beside the stack dump (issue 38)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from faultlens.trainer_hooks.hook import TrainerHook
from tests.progress import run_watched

ROOT = Path(__file__).resolve().parents[2]


class _Producer:
    def __init__(self):
        self.sent = []

    def send_event(self, event):
        self.sent.append(event)

    def flush(self, timeout=None):
        return 0


def test_a_real_gloo_process_group_is_recorded_and_published_beside_the_stacks(tmp_path):
    pytest.importorskip("torch")
    script = textwrap.dedent(f"""
        import json
        from tests.trainer_hooks.test_flight_recorder_hook import _Producer
        from faultlens.trainer_hooks.hook import TrainerHook
        producer = _Producer()
        # made before the process group: it turns the recorder on
        hook = TrainerHook(job="j", rank=0, node="n0", settings=None, listen=False, producer=producer)
        import torch, torch.distributed as dist
        dist.init_process_group("gloo", init_method="file://{tmp_path}/store", rank=0, world_size=1)
        dist.all_reduce(torch.ones(4))
        hook.publish_stacks("req-1")
        print(json.dumps([[e.source, e.kind, e.data] for e in producer.sent]), flush=True)
        # Torn down as a trainer does: a gloo group left to the interpreter's exit aborted the
        # process once in three loaded full runs ('terminate called without an active exception').
        dist.destroy_process_group()
    """)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    # Waited for while it computes or prints (torch's import is long on a busy machine), not 120 s.
    out = run_watched([sys.executable, "-c", script], stall_s=120, cpu=True, limit_s=280, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    sent = json.loads(out.stdout.strip().splitlines()[-1])
    assert [(s, k) for s, k, _ in sent] == [("stack", "stack_dump"), ("stack", "recorder_dump")]
    data = sent[1][2]
    entries = json.loads(data["dump"])["entries"]
    assert data["rank"] == 0 and data["request_id"] == "req-1" and data["entries"] == len(entries) == 1
    assert entries[0]["profiling_name"].endswith("all_reduce") and entries[0]["collective_seq_id"] == 1


def test_without_a_process_group_the_hook_sends_its_stacks_alone():
    producer = _Producer()
    hook = TrainerHook(job="j", rank=3, node="n1", settings=None, listen=False, producer=producer,
                       flight_recorder=False)
    hook.publish_stacks("req-1")
    kinds = [(e.source, e.kind) for e in producer.sent]
    assert kinds == [("stack", "stack_dump")]  # no process group in this test process: nothing recorded


class _FakeTorch:
    """torch as the hook reads it, with the two recorders torch 2.11 keeps (real dumps of an NCCL job)."""

    def __init__(self, backend: str):
        fixtures = ROOT / "tests" / "fixtures" / "real_gpu" / "gpu40"
        nccl, cpu = (fixtures / "fr_nccl.json").read_bytes(), (fixtures / "fr_cpu.json").read_bytes()
        dist = type("dist", (), {"is_available": staticmethod(lambda: True), "is_initialized": staticmethod(lambda: True),
                                 "get_backend": staticmethod(lambda: backend)})
        c10d = type("c10d", (), {"_dump_nccl_trace_json": staticmethod(lambda **kw: nccl),
                                 "_dump_fr_trace_json": staticmethod(lambda **kw: cpu)})
        self.distributed = dist
        self._C = type("C", (), {"_distributed_c10d": c10d})


@pytest.mark.parametrize("backend, ops", [("nccl", {"nccl:all_reduce", "nccl:broadcast", "nccl:all_gather"}),
                                          ("gloo", {"gloo:all_gather"})])
def test_an_nccl_job_is_dumped_from_the_nccl_recorder(monkeypatch, backend, ops):
    from faultlens.trainer_hooks import flight_recorder

    monkeypatch.setitem(sys.modules, "torch", _FakeTorch(backend))
    got = flight_recorder.dump()
    entries = json.loads(got.text)["entries"]
    assert ops <= {e["profiling_name"] for e in entries}
    assert got.entries == len(entries) == (10 if backend == "nccl" else 20)
