from faultlens.trainer_hooks.restart_plan import plan_restart

NODES = ("n000", "n001", "n002", "n003")


def test_evicted_nodes_are_replaced_in_place_by_command_spares_first():
    plan = plan_restart(NODES, ("s000", "s001"), "evict", ("n002", "n003"), ("x000",))
    assert plan.nodes == ("n000", "n001", "x000", "s000")
    assert (plan.nodes_out, plan.nodes_in, plan.standby, plan.resume) == (("n002", "n003"), ("x000", "s000"), ("s001",), "latest")


def test_without_spares_the_job_shrinks():
    plan = plan_restart(NODES, (), "evict", ("n001",))
    assert plan.nodes == ("n000", "n002", "n003") and plan.nodes_in == ()


def test_in_place_restarts_keep_nodes_and_rollback_resumes_earlier():
    assert plan_restart(NODES, ("s000",), "reattempt").nodes == NODES
    rollback = plan_restart(NODES, ("s000",), "rollback", ("n001",))
    assert rollback.nodes == NODES and rollback.nodes_out == () and rollback.resume == "rollback"


def test_a_spare_already_in_the_job_is_not_used_twice():
    plan = plan_restart(("n000", "s000"), ("s000", "s001"), "evict", ("n000",))
    assert plan.nodes == ("s001", "s000")
