import pytest

from faultlens.diagnosis.rules.liveness import SilenceDetector
from faultlens.diagnosis.rules.training import TrainingRule
from tests.diagnosis.diag_events import T0, beat, ev, step


def test_user_code_exception_rolls_back_without_eviction():
    [f] = TrainingRule().observe(ev(0, "n001", "nccl", "exception", rank=3, type="KeyError", message="'labels'",
                                    file="train.py", func="collate", lineno=88, user_code=True,
                                    fault="user_code", action="rollback", severity="fatal"))
    assert f.fault == "user_code" and f.action == "rollback" and "train.py:88" in f.detail


def test_cuda_error_goes_to_stop_time_diagnosis():
    [f] = TrainingRule().observe(ev(0, "n001", "nccl", "cuda_error", rank=2, error="an illegal memory access was encountered"))
    assert (f.fault, f.action, f.nodes, f.ranks) == ("cuda_error", "stop_time_diagnosis", ("n001",), (2,))


def test_cuda_error_keeps_the_parsers_class():
    # A device-side assert is the script's bug: roll back, never evict; an ECC error is the GPU's.
    [a] = TrainingRule().observe(ev(0, "n001", "nccl", "cuda_error", rank=2, error="device-side assert triggered",
                                    fault="user_code", action="rollback"))
    assert (a.fault, a.action) == ("user_code", "rollback")
    [b] = TrainingRule().observe(ev(0, "n001", "nccl", "cuda_error", rank=2, error="uncorrectable ECC error encountered",
                                    fault="gpu_memory", action="evict"))
    assert (b.fault, b.action) == ("gpu_memory", "evict")


def test_nan_loss_from_step_telemetry_and_log():
    rule = TrainingRule()
    [a] = rule.observe(step(0, "n001", 0, 1, loss="nan"))
    [b] = rule.observe(ev(1, "n001", "nccl", "nan", rank=0, text="loss is nan"))
    assert a.fault == b.fault == "nan_loss" and a.action == "stop_time_diagnosis" and a.nodes == ()


def test_loss_spike_against_a_robust_baseline():
    rule = TrainingRule()
    found = []
    for i in range(30):
        found += rule.observe(step(i * 10, "n001", 0, i, loss=2.0 + 0.05 * ((-1) ** i), grad_norm=1.0 + 0.1 * (i % 3)))
    assert found == []
    # A grad-norm spike stands once the next step's loss answers it (where a bad update shows).
    assert rule.observe(step(300, "n001", 0, 30, loss=2.0, grad_norm=7.5)) == []
    [f] = rule.observe(step(310, "n001", 0, 31, loss=2.5, grad_norm=1.1))
    assert f.fault == "loss_spike" and "grad_norm" in f.detail and f.action != "evict"
    assert rule.observe(step(320, "n001", 0, 32, loss=2.0, grad_norm=1.1)) == []  # baseline not dragged


def test_noisy_loss_is_not_a_spike():
    import random

    rng = random.Random(3)
    rule = TrainingRule()
    found = []
    for i in range(500):
        found += rule.observe(step(i, "n001", 0, i, loss=max(0.1, rng.gauss(2.0, 0.3)), grad_norm=abs(rng.gauss(1, 0.4)) + 0.05))
    assert found == []


def test_silent_node_after_grace_but_not_the_whole_job():
    det = SilenceDetector(grace_s=30)
    for t in range(0, 60, 5):
        for n in range(8):
            if n != 3 or t < 20:
                det.observe(beat(t, f"n{n:03d}"))
    [f] = det.tick(T0 + 56)
    assert (f.fault, f.nodes, f.action) == ("node_silent", ("n003",), "evict") and f.onset == T0 + 15
    assert det.tick(T0 + 57) == []  # once
    # everyone stops (the stream ended): nobody is blamed, the job's stream is named once
    [job] = det.tick(T0 + 500)
    assert (job.fault, job.action, job.nodes) == ("telemetry_lost", "alert", ())
    assert det.tick(T0 + 600) == []


def _agent_dies_then_checkpoint_pause(det: SilenceDetector, numbered: bool) -> list:
    """8 nodes stepping every 10 s; n007's agent dies at 300 s (its beats stop, its ranks step on);
    everyone pauses 40 s for a checkpoint after the step at 600 s; n002 reports its next step
    first. Returns what a tick at 331 s found."""
    events = [beat(t, f"n{n:03d}") for t in range(0, 651, 5) for n in range(8) if n != 7 or t < 300]
    events += [step(t + 0.01 * n, f"n{n:03d}", n, i if numbered else None)
               for i, t in enumerate(range(10, 601, 10)) for n in range(8)]
    events.sort(key=lambda e: e.ts)
    at_331 = []
    for e in events:
        if not at_331 and e.ts > T0 + 331:
            at_331 = det.tick(T0 + 331)
        det.observe(e)
    det.observe(step(650.9, "n002", 2, 60 if numbered else None))
    return at_331


@pytest.mark.parametrize("numbered", [True, False])
def test_an_agent_down_node_is_not_evicted_when_a_peer_resumes_first_after_a_pause(numbered):
    det = SilenceDetector(grace_s=30)
    alerts = _agent_dies_then_checkpoint_pause(det, numbered)
    assert [(f.fault, f.action, f.nodes) for f in alerts] == [("node_silent", "alert", ("n007",))]
    # n007's beats stopped 350 s ago and the newest step is 50 s past its last; but only one node
    # of eight has resumed: n007's ranks keep the pace of the job's typical node.
    assert det.tick(T0 + 650.95) == []
    for n in range(8):
        det.observe(step(651.0 + 0.01 * n, f"n{n:03d}", n, 60 if numbered else None))
    assert det.tick(T0 + 652) == []


@pytest.mark.parametrize("numbered", [True, False])
def test_a_node_whose_ranks_fall_behind_the_job_is_silent(numbered):
    det = SilenceDetector(grace_s=30)
    assert [f.action for f in _agent_dies_then_checkpoint_pause(det, numbered)] == ["alert"]
    # the job steps on without n007 (its trainer died too): once the typical node is past it, evict
    for i, t in enumerate(range(651, 700, 10)):
        for n in range(7):
            det.observe(step(t + 0.01 * n, f"n{n:03d}", n, 60 + i if numbered else None))
            det.observe(beat(t, f"n{n:03d}"))
    found = det.tick(T0 + 700)
    assert [(f.fault, f.action, f.nodes) for f in found] == [("node_silent", "evict", ("n007",))]


def test_a_node_swapped_out_of_the_topology_is_not_called_silent():
    from faultlens.diagnosis.engine.detector import JobBook
    from faultlens.events.topology import Topology

    book = JobBook()
    nodes = ["n000", "n001", "n002", "n003", "n004"]
    book.update(Topology.grid(nodes, 1, 1, 1, 5).to_event("j", T0))
    det = SilenceDetector(book=book)
    for n in nodes:
        det.observe(beat(0, n, job="j"))
    # n004 is evicted: the new topology has a spare instead; a late beat from n004 still arrives.
    book.update(Topology.grid(nodes[:4] + ["s000"], 1, 1, 1, 5).to_event("j", T0 + 5))
    det.observe(beat(6, "n004", job="j"))
    for n in nodes[:4] + ["s000"]:
        det.observe(beat(40, n, job="j"))
    assert det.tick(T0 + 60) == []
