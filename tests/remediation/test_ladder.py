import pytest

from faultlens.events.diagnosis_record import Diagnosis
from faultlens.remediation.ladder import JobLadder, dual_phase_plan

NODES = ("n000", "n001", "n002", "n003")


def diag(fault, action, ts=1000.0, nodes=(), confidence=0.9, group=None):
    return Diagnosis(job="j", ts=ts, onset=ts - 1, fault=fault, action=action, nodes=nodes,
                     confidence=confidence, group=group)


def test_hardware_evicts_the_named_nodes_on_warm_standbys():
    step = JobLadder("j").decide(diag("gpu_lost", "evict", nodes=("n002",)), NODES)
    assert (step.rung, step.action, step.nodes) == ("hardware_evict", "evict", ("n002",))
    assert step.params["restart"] == "warm_standby"
    reset = JobLadder("j").decide(diag("gpu_reset_required", "evict_reset_gpu", nodes=("n1",)))
    assert reset.action == "evict" and reset.params["reset_gpu"] is True


def test_low_confidence_or_nodeless_eviction_is_recorded_only():
    assert JobLadder("j", min_confidence=0.8).decide(diag("nic", "evict", nodes=("n1",), confidence=0.5)).action is None
    assert JobLadder("j").decide(diag("gpu_lost", "evict")).action is None


def test_user_code_rolls_back_without_eviction():
    step = JobLadder("j").decide(diag("user_code", "rollback", nodes=("n001",)), NODES)
    assert step.action == "rollback" and step.nodes == ()


def test_hang_captures_stacks_of_the_whole_job_then_evicts_the_blamed_group():
    ladder = JobLadder("j")
    first = ladder.decide(diag("job_hang", "capture_stacks", nodes=("n003",)), NODES)
    assert (first.action, first.nodes) == ("capture_stacks", NODES)
    final = ladder.decide(diag("job_hang", "evict", ts=1010, nodes=("n002", "n003"), group="pp:1"), NODES)
    assert (final.rung, final.action, final.nodes, final.params["group"]) == ("evict_group", "evict", ("n002", "n003"), "pp:1")


def test_crash_without_culprit_climbs_reattempt_rollback_reproduction_then_needs_a_person():
    ladder = JobLadder("j", settle_s=30)
    steps = [ladder.decide(diag("cuda_error", "stop_time_diagnosis", ts=1000 + 100 * i), NODES) for i in range(4)]
    assert [s.rung for s in steps] == ["reattempt", "rollback", "dual_phase_replay", "exhausted"]
    assert [s.action for s in steps] == ["reattempt", "rollback", "restart", None]
    assert steps[0].params["stop_time_diagnosis"] is True
    assert steps[2].params["plan"] == dual_phase_plan(NODES).to_dict()
    assert all(s.nodes == () for s in steps)  # nothing evicted on the way


def test_nan_goes_to_rollback_and_never_evicts():
    ladder = JobLadder("j")
    steps = [ladder.decide(diag("nan_loss", "stop_time_diagnosis", ts=1000 + 100 * i, nodes=("n001",)), NODES)
             for i in range(2)]
    assert [s.action for s in steps] == ["rollback", "restart"]
    assert not any(s.evicts for s in steps)


def test_repeated_reports_of_one_incident_do_not_climb():
    ladder = JobLadder("j", settle_s=30)
    first = ladder.decide(diag("cuda_error", "stop_time_diagnosis", ts=1000), NODES)
    again = ladder.decide(diag("cuda_error", "stop_time_diagnosis", ts=1010), NODES)
    later = ladder.decide(diag("cuda_error", "stop_time_diagnosis", ts=1100), NODES)
    assert (first.rung, again.rung, again.action, later.rung) == ("reattempt", "same_incident", None, "rollback")


def test_a_quiet_episode_resets_the_ladder():
    ladder = JobLadder("j", episode_s=3600)
    ladder.decide(diag("cuda_error", "stop_time_diagnosis", ts=1000), NODES)
    assert ladder.decide(diag("cuda_error", "stop_time_diagnosis", ts=1000 + 7200), NODES).rung == "reattempt"


def test_nccl_reattempts_once_then_evicts_the_suspect():
    ladder = JobLadder("j")
    a = ladder.decide(diag("nccl_error", "reattempt", ts=1000, nodes=("n001",)), NODES)
    b = ladder.decide(diag("nccl_error", "reattempt", ts=1100, nodes=("n001",)), NODES)
    assert (a.action, b.action, b.nodes) == ("reattempt", "evict", ("n001",))


@pytest.mark.parametrize("count", [1, 2, 5, 9, 12, 16, 17])
def test_dual_phase_plan_puts_every_machine_in_one_row_and_one_column(count):
    nodes = [f"n{i:03d}" for i in range(count)]
    plan = dual_phase_plan(nodes)
    for groups in (plan.horizontal, plan.vertical):
        flat = [n for g in groups for n in g]
        assert sorted(flat) == nodes
    for bad in nodes:  # a single bad machine is found exactly, wherever it is
        assert plan.locate([bad]) == (bad,)


def test_dual_phase_plan_intersection_from_reported_failing_groups():
    plan = dual_phase_plan([f"n{i}" for i in range(9)])  # 3 x 3
    assert plan.horizontal[1] == ("n3", "n4", "n5") and plan.vertical[2] == ("n2", "n5", "n8")
    assert plan.culprits([1], [2]) == ("n5",)
    # two bad machines in different rows and columns: the intersection over-approximates to 4
    assert set(plan.locate(["n0", "n4"])) == {"n0", "n1", "n3", "n4"}
    with pytest.raises(ValueError):
        dual_phase_plan([])
