from diagnosis.rules.liveness import SilenceDetector
from diagnosis.rules.training import TrainingRule
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
    [f] = rule.observe(step(300, "n001", 0, 30, loss=2.0, grad_norm=7.5))
    assert f.fault == "loss_spike" and "grad_norm" in f.detail and f.action != "evict"
    assert rule.observe(step(310, "n001", 0, 31, loss=2.0, grad_norm=1.1)) == []  # baseline not dragged


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
    # everyone stops (the stream ended): nobody is blamed
    assert det.tick(T0 + 500) == []


def test_a_node_swapped_out_of_the_topology_is_not_called_silent():
    from diagnosis.detector import JobBook
    from streams.topology import Topology

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
