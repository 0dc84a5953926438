from faultlens.diagnosis.engine.dedup import Dedup, escalate
from faultlens.diagnosis.rules.base import Finding
from tests.diagnosis.diag_events import T0


def _f(ts, fault="gpu_memory", action="evict_reset_gpu", node="n001", entity="gpu:0", **kw):
    return Finding(job="j", ts=T0 + ts, fault=fault, action=action, nodes=(node,), entity=entity,
                   evidence=(f"e{ts}",), **kw)


def test_a_flood_of_the_same_xid_is_one_diagnosis_with_a_count():
    d = Dedup(window_s=300)
    out = []
    for i in range(100_000):
        out += d.admit(_f(i * 0.001))
    assert len(out) == 1 and out[0].count == 1
    [final] = d.flush()
    assert final.id == out[0].id and final.count == 100_000


def test_other_fault_or_other_machine_is_its_own_diagnosis():
    d = Dedup()
    assert len(d.admit(_f(0))) == 1
    assert len(d.admit(_f(1, node="n002"))) == 1
    assert len(d.admit(_f(2, fault="nvlink", action="evict"))) == 1


def test_one_machines_findings_of_the_fault_it_is_evicted_for_are_one_verdict():
    """An Xid 48, its rank's CUDA "uncorrectable ECC error" and the counters that rose a sample
    later are one double-bit error: one verdict, the Xid's (the strongest), with all the evidence.
    Before, other entities were other verdicts: three evictions of one machine, and another GPU's
    ECC error a second GPU-reset eviction of the same machine (remediation resets the machine's
    GPUs, not one)."""
    d = Dedup()
    [xid] = d.admit(_f(0, entity="gpu:0000:2a:00", detail="Xid 48"))
    assert d.admit(_f(0.3, action="evict", entity="cuda:rank19", detail="rank 19: uncorrectable ECC")) == []
    assert d.admit(_f(1.3, action="evict", entity="gpu:1", detail="GPU 1: uncorrectable ECC errors rose")) == []
    assert d.admit(_f(30, entity="gpu:3", detail="GPU 3: uncorrectable ECC errors rose")) == []
    [final] = d.flush()
    assert (final.id, final.action, final.count) == (xid.id, "evict_reset_gpu", 4)
    assert final.evidence == ("e0", "e0.3", "e1.3", "e30")
    assert "rank 19: uncorrectable ECC" in final.detail and "GPU 3" in final.detail
    assert d.stats["folded_machine"] == 3


def test_a_finding_that_asks_more_of_the_machine_is_a_verdict_of_its_own():
    """A plain eviction first, then an Xid asking a GPU reset: remediation acts once per id, so the
    reset is a verdict of its own; what asks no more than it then folds into it."""
    d = Dedup()
    [plain] = d.admit(_f(0, action="evict", entity="cuda:rank3"))
    [reset] = d.admit(_f(0.5, entity="gpu:0000:2a:00"))
    assert (plain.action, reset.action) == ("evict", "evict_reset_gpu")
    assert d.admit(_f(1.5, action="evict", entity="gpu:1")) == []
    assert {f.id: f.count for f in d.flush()} == {reset.id: 2}


def test_no_machine_fold_across_a_restart_or_after_the_window():
    d = Dedup(window_s=300)
    d.admit(_f(0))
    d.restarted("j", T0 + 10)
    [after] = d.admit(_f(20, action="evict", entity="gpu:1"))
    assert after.action == "evict"
    [later] = d.admit(_f(400, action="evict", entity="cuda:rank3"))
    assert later.action == "evict"


def test_a_folded_findings_own_entity_still_escalates_when_it_comes_back():
    """Folded into the machine's verdict, GPU 1's ECC error still counts an episode of its own: the
    same error after the job restarted means the eviction did not cure it."""
    d = Dedup()
    d.admit(_f(0))
    assert d.admit(_f(1, action="evict", entity="gpu:1")) == []
    d.restarted("j", T0 + 100)
    [closed, back] = d.admit(_f(200, action="evict", entity="gpu:1"))  # the old verdict's final count first
    assert (closed.count, closed.action) == (2, "evict_reset_gpu")
    assert back.action == "inspect_hardware" and "episode 2" in back.detail


def test_an_entitys_ended_verdict_reports_its_final_count_before_the_machines_fold_is_tried():
    """GPU 1's own verdict went quiet while the machine's (GPU 0's reset) stayed open: GPU 1 back is
    its final count, then its second episode, which escalates past what the machine's asks."""
    d = Dedup(window_s=300)
    [gpu1] = d.admit(_f(0, action="evict", entity="gpu:1"))
    [gpu0] = d.admit(_f(1, entity="gpu:0"))  # asks a reset: a verdict of its own, the machine's now
    assert d.admit(_f(5, action="evict", entity="gpu:1")) == []  # its own episode: count 2
    assert d.admit(_f(200, entity="gpu:0")) == []
    [final1, again] = d.admit(_f(400, action="evict", entity="gpu:1"))
    assert (final1.id, final1.count) == (gpu1.id, 2) and again.action == "inspect_hardware"
    assert d.admit(_f(401, action="evict", entity="cuda:rank9")) == []  # asks less: folds into it
    assert {f.id: f.count for f in d.flush()} == {gpu0.id: 2, again.id: 2}


def test_a_verdict_of_the_job_never_folds_into_a_machines():
    """A hang's or fail-slow's verdict keeps its own id (requests and answers are linked by it)."""
    d = Dedup()
    d.admit(_f(0, fault="nvlink", action="evict"))
    hang = _f(5, fault="nvlink", action="evict", entity="x").to_diagnosis()
    assert d.admit_diagnosis(hang) == [hang]


def test_sympathetic_findings_are_never_blamed():
    d = Dedup()
    assert d.admit(_f(0, fault="app_fault", action="none", sympathetic=True)) == []
    assert d.stats["sympathetic"] == 1


def test_nccl_timeouts_after_a_lost_gpu_are_consequences():
    d = Dedup()
    [lost] = d.admit(_f(0, fault="gpu_lost", action="evict", node="n004"))
    # NCCL watchdogs fire 120 s later, about a collective that got stuck when the GPU went
    assert d.admit(_f(130, fault="nccl_error", action="reattempt", node="n002", entity="nccl", onset=T0 + 10)) == []
    assert d.admit(_f(150, fault="job_hang", action="evict", node="n002", entity="pp:1", onset=T0 + 2)) == []
    assert d.admit(_f(40, fault="node_silent", action="evict", node="n004", entity="heartbeat")) == []
    # a silent node elsewhere is its own fault
    assert len(d.admit(_f(41, fault="node_silent", action="evict", node="n007", entity="heartbeat"))) == 1
    # a stall that began long after the loss is a fault of its own
    assert len(d.admit(_f(400, fault="job_hang", action="evict", node="n002", entity="pp:1", onset=T0 + 300))) == 1
    assert d.admit(_f(2000, fault="nccl_error", action="reattempt", node="n002", entity="nccl")) == []  # held
    assert len(d.tick(T0 + 2002)) == 1


def test_app_fault_repeating_on_the_same_gpu_after_a_restart_evicts():
    d = Dedup(hold_s=0)
    [a] = d.admit(_f(0, fault="app_fault", action="reattempt"))
    d.restarted("j")
    [b] = d.admit(_f(60, fault="app_fault", action="reattempt"))
    assert (a.action, b.action) == ("reattempt", "evict") and "episode 2" in b.detail
    # Another GPU of the machine while it is being evicted is folded into that verdict; later, on
    # its own, it is that GPU's first time.
    assert d.admit(_f(70, fault="app_fault", action="reattempt", entity="gpu:5")) == []
    [c] = d.admit(_f(400, fault="app_fault", action="reattempt", entity="gpu:6"))
    assert c.action == "reattempt"


def test_eviction_that_did_not_cure_goes_to_hardware_inspection_after_a_quiet_gap():
    d = Dedup(window_s=300)
    [a] = d.admit(_f(0))
    [b] = d.admit(_f(1000))
    assert (a.action, b.action) == ("evict_reset_gpu", "inspect_hardware")


def test_user_code_never_escalates_to_eviction():
    assert escalate("user_code", "rollback", 3) == "rollback"
    assert escalate("nan_loss", "stop_time_diagnosis", 2) == "stop_time_diagnosis"
    assert escalate("cuda_error", "stop_time_diagnosis", 1) == "evict"
    assert escalate("host_oom", "restart", 0) == "restart"


def test_closed_episode_reports_its_final_count_on_tick():
    d = Dedup(window_s=300)
    [a] = d.admit(_f(0))
    d.admit(_f(10))
    d.admit(_f(20))
    assert d.tick(T0 + 100) == []
    [final] = d.tick(T0 + 400)
    assert final.id == a.id and final.count == 3 and len(final.evidence) == 3


def test_app_fault_beside_its_hardware_cause_is_not_blamed_on_the_application():
    d = Dedup(hold_s=2)
    assert d.admit(_f(0, fault="app_fault", action="reattempt", entity="gpu:0000:5d:00")) == []  # Xid 94, held
    [memory] = d.admit(_f(0.01, fault="gpu_memory", action="evict_reset_gpu", entity="gpu:0000:5d:00"))  # Xid 95
    assert d.tick(T0 + 5) == [] and d.stats["consequence"] == 1
    assert d.admit(_f(100, fault="app_fault", action="reattempt", node="n009")) == []
    [alone] = d.tick(T0 + 103)  # an Xid 13 on another node stands on its own, 2 s later
    assert alone.fault == "app_fault" and alone.nodes == ("n009",)


def test_a_restart_ends_what_a_primary_explains():
    d = Dedup()
    d.admit(_f(0, fault="job_hang", action="evict", node="n001", entity="pp:0"))
    d.restarted("j", T0 + 30)
    # an NCCL incident that began after the restart is news, even within the slack
    assert d.admit(_f(60, fault="nccl_error", action="reattempt", node="n004", entity="nccl", onset=T0 + 40)) == []
    [news] = d.tick(T0 + 62)
    assert news.nodes == ("n004",)


def test_a_survivors_connection_closed_logged_before_the_crashed_ranks_cuda_error_is_its_echo():
    """Rank 1 dies of a CUDA error; rank 0's gloo/NCCL "connection closed by peer" is read a moment
    earlier. The NCCL error waits for the held CUDA error and is then explained by it."""
    d = Dedup()
    assert d.admit(_f(10.0, fault="nccl_error", action="reattempt", node="n001", entity="nccl")) == []
    assert d.admit(_f(10.4, fault="cuda_error", action="stop_time_diagnosis", node="n002", entity="cuda")) == []
    assert d.tick(T0 + 12.1) == []  # the NCCL error is due, the CUDA error not yet: nothing judged
    [crash] = d.tick(T0 + 12.5)
    assert (crash.fault, crash.nodes, crash.action) == ("cuda_error", ("n002",), "stop_time_diagnosis")
    assert d.flush() == [] and d.stats["consequence"] == 1


def test_an_nccl_error_with_no_cause_beside_it_is_judged_after_the_hold():
    d = Dedup()
    assert d.admit(_f(10.0, fault="nccl_error", action="reattempt", node="n001", entity="nccl")) == []
    assert d.tick(T0 + 11.0) == []
    [nccl] = d.tick(T0 + 12.0)
    assert (nccl.fault, nccl.nodes, nccl.action, nccl.onset) == ("nccl_error", ("n001",), "reattempt", T0 + 10.0)
