"""Stop-time checks (collectors.checks): each judgement on healthy and injected-failure snapshots."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from bench.testbed.fake_nvml import LIBRARY_NOT_FOUND, FakeNvml
from faultlens.collectors.checks.collective import RankOutcome, check_collective, judge_collective
from faultlens.collectors.checks.compute import check_compute, judge_products, measure_products
from faultlens.collectors.checks.gpu_health import check_gpu_health, judge_gpu_health
from faultlens.collectors.checks.host import DiskSnapshot, judge_disk, judge_memory, parse_meminfo, read_disk
from faultlens.collectors.checks.result import CheckResult, run_with_timeout
from faultlens.collectors.checks.suite import CheckRunner, ChecksConfig, run_checks
from faultlens.events.envelope import decode, encode
from faultlens.events.payloads import check_payload

FIXTURES = Path(__file__).parent / "checks_fixtures"


class HealthyNvml(FakeNvml):
    """The sampler's fake, with a GPU in good order: no DBE, no remap pending/failed, idle clocks."""

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        return {(0, 0): 3, (1, 0): 0, (0, 1): 120, (1, 1): 0}[(kind, counter)]

    def nvmlDeviceGetRemappedRows(self, h):
        return (5, 0, 0, 0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x1  # gpu_idle

    def nvmlDeviceGetFieldValues(self, h, ids):
        import types
        return [types.SimpleNamespace(nvmlReturn=0, value=types.SimpleNamespace(uiVal=0))]


class PendingRemapNvml(HealthyNvml):
    def nvmlDeviceGetRemappedRows(self, h):
        return (5, 1, 1, 0) if h == 1 else (5, 0, 0, 0)


def test_healthy_gpus_pass_with_the_count():
    r = check_gpu_health(HealthyNvml(n=4))
    assert r.passed and not r.skipped and "4 GPU(s)" in r.detail


def test_the_samplers_bad_gpu_fails_on_each_of_its_faults():
    # FakeNvml's GPUs: aggregate DBE only (history: fine), remap failure, hw_thermal at idle, reset asked.
    r = check_gpu_health(FakeNvml(n=1))
    assert not r.passed
    assert "row remapping failed" in r.detail and "hw_thermal" in r.detail and "gpu_reset" in r.detail
    assert "uncorrectable ECC" not in r.detail  # volatile DBE is 0: the aggregate count is history


def test_a_pending_remap_names_only_that_gpu():
    r = check_gpu_health(PendingRemapNvml(n=2))
    assert not r.passed and r.detail == "gpu1: row remap pending (needs a GPU reset)"


def test_a_lost_gpu_fails():
    r = check_gpu_health(HealthyNvml(n=2, lost={0}))
    assert not r.passed and r.detail.startswith("gpu0: lost")


def test_no_nvml_is_skipped_not_failed():
    r = check_gpu_health(FakeNvml(init_error=LIBRARY_NOT_FOUND))
    assert r.passed and r.skipped and r.detail.startswith("skipped: no NVML")
    assert judge_gpu_health([]).skipped


def test_volatile_uncorrectable_ecc_fails():
    r = judge_gpu_health([{"index": 0, "ecc_dbe_volatile": 2, "throttle": ["gpu_idle"]}])
    assert not r.passed and "2 uncorrectable ECC" in r.detail


def test_compute_on_cpu_agrees_with_the_reference():
    r = check_compute(["cpu", "cpu"], size=128)
    assert r.passed, r.detail


def test_a_gpu_whose_product_differs_fails_and_is_named():
    def matmul(device, a, b):
        c = a @ b
        if device == "gpu2":  # a broken SM: one element wrong
            c[3, 7] += 50.0
        return c

    products = measure_products(["gpu0", "gpu1", "gpu2", "gpu3"], size=64, matmul=lambda d, a, b: matmul(d, a, b))
    r = judge_products(products)
    assert not r.passed
    assert r.detail.startswith("gpu2: product off the reference") and "gpu0" not in r.detail


def test_a_device_that_raises_a_cuda_error_fails_and_is_named():
    def matmul(device, a, b):
        if device == "gpu1":
            raise RuntimeError("CUDA error: uncorrectable ECC error encountered")
        return a @ b

    r = judge_products(measure_products(["gpu0", "gpu1", "gpu2"], size=32, matmul=matmul))
    assert not r.passed and not r.inconclusive
    assert r.detail == "gpu1: RuntimeError: CUDA error: uncorrectable ECC error encountered"


def test_a_nan_product_fails():
    products = measure_products(["gpu0"], size=16, matmul=lambda d, a, b: (a @ b) * float("nan"))
    assert not judge_products(products).passed


def test_a_peer_outlier_within_reference_tolerance_of_nobody_is_caught():
    from faultlens.collectors.checks.compute import DeviceProduct

    ps = [DeviceProduct(f"gpu{i}", 1e-6, 100.0) for i in range(3)] + [DeviceProduct("gpu3", 1e-6, 140.0)]
    r = judge_products(ps)
    assert not r.passed and r.detail.startswith("gpu3: checksum")


def test_collective_verdicts():
    ok = [RankOutcome(0, True, 0.0), RankOutcome(1, True, 0.0)]
    assert judge_collective(ok, 2).passed
    assert not judge_collective([RankOutcome(0, True, 0.0)], 2, 5.0).passed
    wrong = judge_collective([RankOutcome(0, True, 1.0), RankOutcome(1, False, error="RuntimeError: x")], 2)
    assert not wrong.passed and "off by 1.0" in wrong.detail and "rank 1: RuntimeError" in wrong.detail
    assert not wrong.inconclusive
    # Our setup failing is no evidence against the machine.
    no_torch = judge_collective([RankOutcome(0, False, error="exited 1: ModuleNotFoundError: No module named 'torch'",
                                             started=False), RankOutcome(1, True, 0.0)], 2)
    clash = judge_collective([RankOutcome(0, False, error="DistNetworkError: EADDRINUSE"), RankOutcome(1, True, 0.0)], 2)
    assert all(not r.passed and r.inconclusive and r.detail.startswith("could not run") for r in (no_torch, clash))


def test_gloo_collective_on_cpu_passes():
    r = check_collective(world=2, timeout_s=60.0)
    assert r.passed, r.detail


def test_a_collective_with_a_rank_that_never_joins_times_out_and_fails():
    # The ranks give up at half the check's window and the parent at its end: 10 s for the waiting
    # rank to report its own timeout (12 s left it 6, which a starved CI machine outlasted once).
    r = check_collective(world=2, timeout_s=20.0, stall_rank=1)
    assert not r.passed
    assert "rank(s) [1] gave no answer within 20s" in r.detail
    assert "rank 0: " in r.detail  # the rank that waited for it gave up and said so


def test_disk_with_room_passes_and_a_full_disk_fails(tmp_path):
    snap = read_disk(tmp_path)
    assert snap.write_error == "" and snap.free_bytes > 0
    assert judge_disk([snap], min_free_bytes=1, min_free_frac=0.0).passed
    # "Full": the threshold is above what any disk here has free.
    full = judge_disk([snap], min_free_bytes=snap.total_bytes + 1)
    assert not full.passed and str(tmp_path) in full.detail


def test_an_unwritable_path_fails(tmp_path):
    missing = tmp_path / "gone"
    r = judge_disk([read_disk(missing)], min_free_bytes=0, min_free_frac=0.0)
    assert not r.passed and "gone" in r.detail
    assert not judge_disk([DiskSnapshot("/ckpt", 10**12, 10**13, "cannot write a probe file: [Errno 30] "
                                                                  "Read-only file system")]).passed


def test_memory_from_real_meminfo_layouts():
    low = parse_meminfo((FIXTURES / "meminfo_low.txt").read_text())
    assert low.total_bytes == 2113645100 * 1024 and low.available_bytes == 61532768 * 1024
    assert not judge_memory(low).passed  # 3% available: a leaked process still holds the memory
    assert judge_memory(parse_meminfo((FIXTURES / "meminfo_idle.txt").read_text())).passed
    with pytest.raises(ValueError):
        parse_meminfo("MemTotal: 10 kB\n")


def test_a_check_that_hangs_times_out_and_one_that_raises_fails():
    hang = threading.Event()
    r = run_with_timeout("stuck", lambda: (hang.wait(30), CheckResult("stuck", True, ""))[1], 0.2)
    hang.set()
    assert not r.passed and r.detail == "timed out after 0.2s"
    assert r.timed_out and r.to_dict()["timed_out"] is True  # answered as "no answer in time"

    def boom():
        raise OSError("driver gone")

    r = run_with_timeout("boom", boom, 5.0)
    assert not r.passed and r.inconclusive and r.detail == "check could not run: OSError: driver gone"


def test_the_runner_publishes_one_valid_event_with_every_result(tmp_path):
    published = []
    checks = {"disk": lambda: judge_disk([read_disk(tmp_path)], min_free_bytes=1, min_free_frac=0.0),
              "memory": lambda: CheckResult("memory", False, "1% available")}
    runner = CheckRunner("j1", "n003", published.append, ChecksConfig(timeout_s=5.0), checks)
    event = runner.run("cmd-1", "diag-1")
    assert published == [event]
    back = decode(encode(event))
    check_payload(back)
    assert back.source == "check" and back.kind == "result" and back.node == "n003"
    assert back.data["request_id"] == "cmd-1" and back.data["diagnosis_id"] == "diag-1"
    assert back.data["passed"] is False and back.data["failed"] == ["memory"]
    assert [c["name"] for c in back.data["checks"]] == ["disk", "memory"]


def test_only_some_checks_and_unknown_names():
    results = run_checks({"a": lambda: CheckResult("a", True, "")}, 1.0, ["a", "nope"])
    assert [r.passed for r in results] == [True, False] and "unknown check" in results[1].detail


def _cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def test_real_gpus_answer_every_check():
    # Asked when the test runs, not in a skipif at collection: importing torch cost every xdist worker ~1 CPU-s (issue 47).
    if not _cuda():
        pytest.skip("needs a real GPU with CUDA (the CPU fallback and a fake NVML are tested above)")
    from faultlens.collectors.checks.compute import compute_devices

    health = check_gpu_health()
    assert not health.skipped, health.detail
    assert check_compute(compute_devices()).passed
    collective = check_collective(timeout_s=120.0)
    assert collective.passed or collective.skipped, collective.detail
