"""Rules that must not evict without evidence a person would accept (issue 12)."""

from faultlens.diagnosis.rules.gpu_lost import GpuLostRule
from faultlens.diagnosis.rules.liveness import SilenceDetector
from faultlens.diagnosis.rules.nic import NicRule
from faultlens.diagnosis.rules.thermal import ThermalRule
from faultlens.diagnosis.rules.xid import XidRule
from tests.diagnosis.diag_events import T0, beat, ev, gpu, sample, step, xid


def test_heartbeats_gone_while_the_ranks_step_is_an_agent_alert_then_silence_when_steps_stop():
    det = SilenceDetector(grace_s=30.0)
    out = []
    for t in range(0, 200, 5):
        for node in ("n000", "n001", "n002", "n003", "n004"):
            if node != "n003" or t < 50:
                det.observe(beat(t, node))
            if node != "n003" or t < 120:
                det.observe(step(t + 1, node, rank=0, n=t))
        out += det.tick(T0 + t + 2)
    assert [(f.fault, f.action, f.nodes) for f in out] == [("node_silent", "alert", ("n003",)),
                                                           ("node_silent", "evict", ("n003",))]
    assert "agent" in out[0].detail and out[0].ts - T0 < 100 <= out[1].ts - T0


def _link(ts, device, driver=None, node="n001"):
    data = dict(device=device, port=1, state="down", fault="nic", action="evict", severity="error", line=f"{device} down")
    if driver:
        data["driver"] = driver
    return ev(ts, node, "kernel", "link_down", **data)


def test_only_training_fabric_nics_evict():
    rule = NicRule()
    assert [f for f in rule.observe(_link(0, "eno1", "e1000e")) if not f.sympathetic] == []
    [f] = rule.observe(_link(100, "eno1", "e1000e"))
    assert (f.action, f.entity) == ("alert", "nic:other")
    assert [f for f in rule.observe(_link(0, "ens7np0", "mlx5_core", node="n002")) if not f.sympathetic] == []
    [g] = rule.observe(_link(100, "ens7np0", "mlx5_core", node="n002"))
    assert (g.action, g.nodes) == ("evict", ("n002",))
    # no driver named: the device name decides (ib0 is the fabric), and it is configurable
    assert NicRule().is_fabric(None, "ib0") and not NicRule().is_fabric(None, "eth0")
    assert NicRule(fabric_devices=r"^eth").is_fabric(None, "eth0")


def test_nvml_unknown_is_retried_and_gpu_is_lost_is_believed():
    rule = GpuLostRule()
    lost = ev(0, "n001", "gpu", "lost", gpu=1, error="NVML_ERROR_UNKNOWN", fault="gpu_lost", action="evict")
    assert rule.observe(lost) == []
    [ok] = rule.observe(sample(1, "n001", [gpu(0), gpu(1)]))
    assert ok.action == "none" and "read normally" in ok.detail
    assert rule.observe(lost) == []
    dead = gpu(1, util=None, temp_c=None, power_w=None, sm_clock_mhz=None)
    found = [f for t in range(1, 15) for f in rule.observe(sample(t, "n001", [gpu(0), dead]))]
    assert [(f.fault, f.action) for f in found] == [("gpu_lost", "evict")] and found[0].ts - T0 >= 10
    [now] = GpuLostRule().observe(ev(0, "n002", "gpu", "lost", gpu=3, error="NVML_ERROR_GPU_IS_LOST"))
    assert now.action == "evict"


def test_one_xid_from_the_kernel_and_from_nvml_is_one_finding():
    rule = XidRule()
    [k] = rule.observe(xid(0, "n001", 48, "gpu_memory", "evict_reset_gpu", pci="0000:9a:00"))
    [n] = rule.observe(xid(0.4, "n001", 48, "gpu_memory", "evict_reset_gpu", source="gpu"))
    assert not k.sympathetic and n.sympathetic
    [later] = rule.observe(xid(300, "n001", 48, "gpu_memory", "evict_reset_gpu", source="gpu"))
    assert not later.sympathetic  # minutes later: a new report


def test_one_hot_gpu_slowing_one_rank_is_thermal_against_its_own_baseline_or_its_node_peers():
    rule = ThermalRule()
    out = []
    for k in range(12):
        t = 10.0 * k
        hot = k >= 5
        gpus = [gpu(i, temp_c=92 if hot and i == 1 else 66, sm_clock_mhz=1275 if hot and i == 1 else 1980,
                    throttle=["hw_thermal"] if hot and i == 1 else []) for i in range(4)]
        out += rule.observe(sample(t, "n001", gpus))
        for r in range(4):
            out += rule.observe(step(t + 1, "n001", rank=r, n=k, compute_s=7.0 * (1.4 if hot and r == 1 else 1.0)))
    [f] = out
    assert (f.fault, f.action, f.ranks) == ("gpu_thermal", "evict", (1,)) and "1275 of 1980" in f.detail
    # throttle flags with no rank slower: a warning, no finding
    rule = ThermalRule()
    for k in range(12):
        rule.observe(sample(10.0 * k, "n001", [gpu(0, throttle=["sw_thermal"], temp_c=91)]))
        assert rule.observe(step(10.0 * k + 1, "n001", rank=0, n=k, compute_s=7.0)) == []
