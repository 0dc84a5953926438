"""The node stage's quick paths for plain GPU samples decide exactly what the GPU-by-GPU code does."""

from collections import deque

import pytest

from faultlens.diagnosis.peers.features import FeatureWindows
from faultlens.diagnosis.rules.gpu_memory import MemoryHealthRule
from faultlens.diagnosis.rules.thermal import ThermalRule
from faultlens.diagnosis.rules.training import _Baseline
from faultlens.events.envelope import encode
from faultlens.events.gpu_reading import decode_gpu_message
from tests.diagnosis.diag_events import ev, step

# One GPU's entry as collectors/gpu_sample.gpu_payload writes it (every documented key).
_FULL = {"index": 0, "uuid": "GPU-0", "util": 97, "mem_util": 41, "mem_used_mb": 76746.0, "mem_total_mb": 81559.0,
         "temp_c": 64, "power_w": 554.17, "power_limit_w": 700.0, "sm_clock_mhz": 1935, "mem_clock_mhz": 2619,
         "sm_clock_max_mhz": 1980, "throttle": [], "ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0,
         "ecc_sbe_aggregate": 0, "ecc_dbe_aggregate": 0, "remap_correctable": 0, "remap_uncorrectable": 0,
         "remap_pending": False, "remap_failure": False, "retired_pages_sbe": 0, "retired_pages_dbe": 0,
         "retired_pending": False, "pcie_replay": 0, "nvlink_errors": 0, "recovery_action": None}


def _gpu(index: int, plain: bool, **over) -> dict:
    g = {**_FULL, "index": index, "uuid": f"GPU-{index}", **over}
    if not plain:
        g["index"] = str(index)  # not an int: the sample is read GPU by GPU (the same GPU names)
    return g


def _sample(ts: float, plain: bool | str, node: str = "n000", **over):
    """``plain="typed"``: a plain sample as the consumers read it from Kafka (events.gpu_reading)."""
    event = ev(ts, node, "gpu", "sample", gpus=[_gpu(i, bool(plain), **over) for i in range(4)], interval_s=1.0)
    return decode_gpu_message(encode(event)) if plain == "typed" else event


@pytest.mark.parametrize("plain", [True, "typed"])
def test_a_rise_after_a_sample_read_gpu_by_gpu_is_still_seen(plain):
    rule = MemoryHealthRule()
    seen = [rule.observe(_sample(0, plain)),
            rule.observe(_sample(1, False, ecc_dbe_volatile=2)),  # rises, read GPU by GPU
            rule.observe(_sample(2, plain)),  # back to the first sample's counters
            rule.observe(_sample(3, plain, ecc_dbe_volatile=2))]  # rises again
    assert [len(f) for f in seen] == [0, 4, 0, 4]
    assert "rose 0 → 2" in seen[3][0].detail


@pytest.mark.parametrize("plain", [True, "typed"])
def test_repeated_samples_judge_nothing_new_and_a_change_is_judged(plain):
    rule = MemoryHealthRule()
    assert all(rule.observe(_sample(t, plain)) == [] for t in range(5))
    found = rule.observe(_sample(5, plain, remap_pending=True))
    assert [f.entity for f in found] == ["gpu:0", "gpu:1", "gpu:2", "gpu:3"]
    assert rule.observe(_sample(6, plain, remap_pending=True)) == []  # a standing state is reported once


@pytest.mark.parametrize("plain", [True, False, "typed"])
def test_thermal_throttling_that_slows_a_rank_is_found_either_way(plain):
    rule = ThermalRule(min_recent=3)
    for t in range(5):
        rule.observe(_sample(t, plain))
        rule.observe(step(t, "n000", rank=0, n=t, compute_s=1.0))
        rule.observe(step(t, "n000", rank=1, n=t, compute_s=1.0))
    found = []
    for t in range(5, 10):
        found += rule.observe(_sample(t, plain, temp_c=93, throttle=["hw_thermal"]))
        found += rule.observe(step(t, "n000", rank=0, n=t, compute_s=1.4))
    assert [f.fault for f in found] == ["gpu_thermal"]
    assert "GPU 0 hw_thermal at 93.0°C" in found[0].detail


def test_windows_of_plain_and_loose_samples_are_the_same_to_the_last_bit():
    def windows(plain: bool):
        fw = FeatureWindows(window_s=10.0)
        out = []
        for t in range(25):
            over = {"util": 90 + (t * 7) % 11 + 0.1 * t, "sm_clock_mhz": 1400 + 13 * t, "power_w": 500.3 + t,
                    "temp_c": 60 + t % 5, "pcie_replay": 3 * t, "throttle": ["hw_slowdown"] if t % 4 == 0 else []}
            out += fw.observe(_sample(t, plain, **over))
        return out + fw.flush()
    plain, loose, typed = windows(True), windows(False), windows("typed")
    assert [w.features for w in plain] == [w.features for w in loose] == [w.features for w in typed]
    assert [list(w.features) for w in plain][0] == ["util", "util_min", "sm_clock_ratio", "power_ratio", "temp_c",
                                                    "throttle", "pcie_replay_rate"]


def test_the_baseline_minimum_follows_values_in_and_out():
    baseline = _Baseline(deque(maxlen=4), deque(maxlen=4))
    for value in [3.0, 1.0, 2.0, 5.0, 4.0, 1.5, 6.0, 7.0, 8.0, 0.5, 9.0]:
        baseline.push(value, False)
        assert baseline.least == min(baseline.values)


def test_the_baseline_minimum_follows_values_in_and_out_with_repeats_and_long_climbs():
    """The count down to the least's leaving (issue 56): repeated minima, climbs longer than the window,
    a window filling up; ``least`` is min(values) after every push, as the value-out reading had it."""
    import random

    seeded = random.Random(56)
    for maxlen in (1, 2, 3, 5, 50):
        baseline = _Baseline(deque(maxlen=maxlen), deque(maxlen=maxlen))
        values = ([float(v) for v in range(120)] + [3.0] * 7 + [2.0, 3.0, 2.0, 4.0] * 20
                  + [float(seeded.choice((1, 2, 3, 9))) for _ in range(400)] + [-1.0, 0.0, -0.0, 5.0] * 30)
        for value in values:
            baseline.push(value, False)
            assert baseline.least == min(baseline.values), (maxlen, value)
