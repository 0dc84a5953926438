from faultlens.diagnosis.rules.host import KernelRule
from faultlens.diagnosis.rules.nic import NicRule
from tests.diagnosis.diag_events import ev


def _down(ts, node="n002"):
    line = "mlx5_core 0000:5e:00.0: mlx5_port_module_event: Port 1 link down"
    return ev(ts, node, "kernel", "link_down", device="mlx5_0", port=1, state="down", line=line,
              fault="nic", action="evict", severity="error")


def _blamed(found):
    """What a flap blames: a tolerated one is only a sympathetic signal for waves (diagnosis/engine/waves.py)."""
    return [f for f in found if not f.sympathetic]


def test_single_flap_is_tolerated():
    rule = NicRule()
    [signal] = rule.observe(_down(0))
    assert signal.sympathetic and signal.entity == "nic:flap" and _blamed([signal]) == []
    assert rule.observe(ev(5, "n002", "kernel", "link_up", device="mlx5_0", port=1, state="up")) == []


def test_two_alerts_in_five_minutes_evict():
    rule = NicRule()
    assert _blamed(rule.observe(_down(0))) == []
    [f] = rule.observe(_down(120))
    assert (f.fault, f.action, f.nodes) == ("nic", "evict", ("n002",))
    assert f.onset == f.ts - 120 and len(f.evidence) == 2


def test_two_alerts_far_apart_or_on_two_nodes_do_not():
    rule = NicRule()
    assert _blamed(rule.observe(_down(0))) == [] and _blamed(rule.observe(_down(400))) == []
    assert _blamed(rule.observe(_down(401, node="n003"))) == []


def test_kernel_faults_and_oom():
    rule = KernelRule()
    [p] = rule.observe(ev(0, "n001", "kernel", "panic", text="Kernel panic - not syncing: Fatal exception", line="Kernel panic"))
    [s] = rule.observe(ev(0, "n001", "kernel", "soft_lockup", text="watchdog: BUG: soft lockup - CPU#3 stuck for 23s!"))
    [o] = rule.observe(ev(0, "n001", "kernel", "oom_kill", pid=4242, process="python3", line="Out of memory: Killed process 4242 (python3)"))
    assert (p.fault, p.action) == ("kernel", "evict")
    assert (s.fault, s.action) == ("kernel", "restart")
    assert (o.fault, o.action) == ("host_oom", "restart") and "4242" in o.detail
    assert rule.observe(ev(0, "n001", "kernel", "mce", text="corrected", corrected=True)) == []
