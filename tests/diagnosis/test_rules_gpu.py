import pytest

from faultlens.diagnosis.rules.gpu_lost import GpuLostRule
from faultlens.diagnosis.rules.gpu_memory import MemoryHealthRule
from faultlens.diagnosis.rules.thermal import ThermalRule
from faultlens.diagnosis.rules.xid import XidRule
from faultlens.events.envelope import InvalidEvent
from tests.diagnosis.diag_events import ev, gpu, sample, step, xid


def test_xid_95_is_reset_required_and_names_the_gpu():
    [f] = XidRule().observe(xid(1, "n001", 95, "gpu_reset_required", "evict_reset_gpu", pci="0000:3b:00"))
    assert (f.fault, f.action, f.nodes, f.entity) == ("gpu_reset_required", "evict_reset_gpu", ("n001",), "gpu:0000:3b:00")
    assert not f.sympathetic


def test_xid_without_fault_falls_back_to_the_xid_table():
    e = ev(1, "n001", "kernel", "xid", xid=79, pci="0000:3b:00", line="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")
    [f] = XidRule().observe(e)
    assert f.fault == "gpu_lost" and f.action == "evict"


def test_xid_45_is_sympathetic_and_43_after_13_too():
    rule = XidRule()
    assert rule.observe(xid(1, "n001", 45, "unknown", "none"))[0].sympathetic
    assert not rule.observe(xid(2, "n002", 43, "app_fault", "reattempt"))[0].sympathetic  # no 13 before
    assert not rule.observe(xid(3, "n001", 13, "app_fault", "reattempt"))[0].sympathetic
    assert rule.observe(xid(5, "n001", 43, "app_fault", "reattempt"))[0].sympathetic


def test_xid_missing_code_is_a_dead_letter():
    with pytest.raises(InvalidEvent, match="data.xid"):
        XidRule().observe(ev(1, "n001", "kernel", "xid", pci="x"))


def test_gpu_lost_from_nvml_and_kernel():
    rule = GpuLostRule()
    [a] = rule.observe(ev(1, "n003", "gpu", "lost", gpu=2, error="NVML_ERROR_GPU_IS_LOST"))
    [b] = rule.observe(ev(1, "n003", "kernel", "gpu_lost", pci="0000:3b:00", line="GPU has fallen off the bus"))
    assert a.fault == b.fault == "gpu_lost" and a.action == b.action == "evict"


def test_ecc_counts_only_an_increase():
    rule = MemoryHealthRule()
    assert rule.observe(sample(0, "n001", [gpu(0, ecc_dbe_aggregate=3), gpu(1)])) == []  # old history
    assert rule.observe(sample(1, "n001", [gpu(0, ecc_dbe_aggregate=3), gpu(1)])) == []
    [f] = rule.observe(sample(2, "n001", [gpu(0, ecc_dbe_aggregate=4), gpu(1)]))
    assert f.fault == "gpu_memory" and f.action == "evict" and f.entity == "gpu:0" and "rose 3 → 4" in f.detail


@pytest.mark.parametrize("over,words", [
    ({"remap_failure": True}, "remapping failed"),
    ({"remap_pending": True}, "pending"),
    ({"retired_pages_dbe": 40, "retired_pages_sbe": 20}, "retired pages over the limit of 48 (60)"),
])
def test_memory_states_that_need_eviction(over, words):
    [f] = MemoryHealthRule().observe(sample(0, "n001", [gpu(0), gpu(1, **over)]))
    assert f.entity == "gpu:1" and words in f.detail


def test_malformed_sample_is_a_dead_letter():
    with pytest.raises(InvalidEvent, match="data.gpus"):
        MemoryHealthRule().observe(ev(0, "n001", "gpu", "sample", gpus="nope"))


def _thermal_run(slow: float) -> list:
    rule = ThermalRule()
    out = []
    for i in range(10):
        out += rule.observe(step(i * 10, "n001", 0, i, step_time_s=10.0))
        out += rule.observe(sample(i * 10 + 1, "n001"))
    for i in range(10, 16):
        out += rule.observe(sample(i * 10 + 1, "n001", [gpu(0, temp_c=93, throttle=["hw_thermal"]), gpu(1)]))
        out += rule.observe(step(i * 10 + 5, "n001", 0, i, step_time_s=slow))
    return out


def test_thermal_throttle_with_slower_steps_is_gpu_thermal():
    found = _thermal_run(slow=13.0)
    assert found and found[0].fault == "gpu_thermal" and found[0].action == "evict"
    assert "hw_thermal" in found[0].detail and "1.30×" in found[0].detail


def test_thermal_throttle_alone_is_not_a_fault():
    assert _thermal_run(slow=10.1) == []


def test_a_folded_xid_flood_is_one_finding_that_says_its_count():
    """The agent folds an Xid flood (collectors/flood_fold.py): its folded event is one finding
    carrying the count in its detail, and a sympathetic Xid's fold stays sympathetic."""
    from faultlens.diagnosis.rules.xid import XidRule
    from faultlens.events.envelope import Envelope

    rule = XidRule()
    base = {"xid": 95, "pci": "0000:3b:00", "fault": "gpu_memory", "action": "evict_reset_gpu",
            "line": "NVRM: Xid (PCI:0000:3b:00): 95, pid=1, name=python3, Uncontained"}
    first = Envelope(ts=1_700_000_000.0, job="j", node="n1", source="kernel", kind="xid", data=base)
    folded = Envelope(ts=1_700_000_005.0, job="j", node="n1", source="kernel", kind="xid",
                      data={**base, "count": 799_999, "folded": True, "first_ts": 1_700_000_000.1,
                            "last_ts": 1_700_000_005.0})
    assert len(rule.observe(first)) == 1
    (f,) = rule.observe(folded)
    assert "799999 more identical line(s) folded" in f.detail and f.fault == "gpu_memory"
    echo = Envelope(ts=1_700_000_006.0, job="j", node="n1", source="kernel", kind="xid",
                    data={"xid": 45, "pci": "0000:3b:00", "count": 5000, "folded": True, "line": "Xid 45"})
    (s,) = rule.observe(echo)
    assert s.sympathetic and "5000 more" in s.detail


def test_a_folded_xid_flood_through_the_engine_is_one_diagnosis():
    from faultlens.diagnosis.engine.offline import analyze
    from faultlens.events.envelope import Envelope

    line = "[ 10.000000] NVRM: Xid (PCI:0000:3b:00): 95, pid=1, name=python3, Uncontained: FBHUB. RST: No, D-RST: No"
    first = Envelope(ts=1_700_000_000.0, job="j", node="n1", source="kernel", kind="line", data={"line": line})
    events = [first] + [Envelope(ts=1_700_000_005.0 * 1 + 5 * i, job="j", node="n1", source="kernel", kind="xid",
                                 data={"xid": 95, "pci": "0000:3b:00", "line": line, "count": 100_000,
                                       "folded": True}) for i in range(8)]
    diagnoses = [d for d in analyze(events) if d.fault != "unknown"]
    assert len({d.id for d in diagnoses}) == 1 and diagnoses[0].nodes == ("n1",)
