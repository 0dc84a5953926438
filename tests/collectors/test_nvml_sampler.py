"""The NVML source with a fake NVML module (unit tests only): payload values, guards, lost GPUs, Xid events."""

from __future__ import annotations

import threading
import types

import pytest

from bench.testbed.fake_nvml import LIBRARY_NOT_FOUND, NOT_SUPPORTED, UNKNOWN, FakeNvml, FakeNVMLError
from faultlens.collectors.gpu_sample import gpu_payload, throttle_names
from faultlens.collectors.nvml_sampler import NvmlReader, NvmlSampler, NvmlUnavailable, open_nvml
from tests.progress import wait_until


def test_throttle_bits_decode_to_names_and_unknown_bits_are_kept():
    assert throttle_names(0) == []
    assert throttle_names(None) is None
    assert throttle_names(0x1 | 0x80) == ["gpu_idle", "hw_power_brake"]
    assert throttle_names(0x40 | 0x1000) == ["hw_thermal", "bit_0x1000"]


def test_a_full_reading_becomes_the_documented_payload():
    reader = NvmlReader(FakeNvml())
    reading = reader.read(1, 1)
    p = gpu_payload(reading)
    assert p["index"] == 1 and p["uuid"] == "GPU-0001"
    assert p["util"] == 97 and p["mem_util"] == 40
    assert p["mem_used_mb"] == 40 * 1024.0 and p["mem_total_mb"] == 80 * 1024.0
    assert p["temp_c"] == 72 and p["power_w"] == 612.35 and p["power_limit_w"] == 700.0
    assert (p["sm_clock_mhz"], p["mem_clock_mhz"], p["sm_clock_max_mhz"]) == (1980, 2619, 1980)
    assert p["throttle"] == ["sw_power_cap", "hw_thermal"]
    assert (p["ecc_sbe_volatile"], p["ecc_dbe_volatile"], p["ecc_sbe_aggregate"], p["ecc_dbe_aggregate"]) == (3, 0, 120, 2)
    assert (p["remap_correctable"], p["remap_uncorrectable"], p["remap_pending"], p["remap_failure"]) == (5, 1, False, True)
    assert (p["retired_pages_sbe"], p["retired_pages_dbe"], p["retired_pending"]) == (2, 1, False)
    assert p["pcie_replay"] == 7
    # Two active links of four; counters summed over them.
    assert p["nvlink_errors"] == {"replay": 2, "recovery": 0, "crc_flit": 20, "crc_data": 0}
    assert p["recovery_action"] == "gpu_reset"
    documented = {"index", "uuid", "util", "mem_util", "mem_used_mb", "mem_total_mb", "temp_c", "power_w",
                  "power_limit_w", "sm_clock_mhz", "mem_clock_mhz", "sm_clock_max_mhz", "throttle",
                  "ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_aggregate",
                  "remap_correctable", "remap_uncorrectable", "remap_pending", "remap_failure", "retired_pages_sbe",
                  "retired_pages_dbe", "retired_pending", "pcie_replay", "nvlink_errors", "recovery_action"}
    assert set(p) == documented


def test_unsupported_fields_read_as_null_and_fall_back_where_there_is_an_older_call():
    nvml = FakeNvml(unsupported={"ecc", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetRetiredPages", "nvlink",
                                 "nvmlDeviceGetFieldValues", "nvmlDeviceGetCurrentClocksEventReasons"})
    p = gpu_payload(NvmlReader(nvml).read(0, 0))
    assert p["ecc_sbe_volatile"] is None and p["ecc_dbe_aggregate"] is None
    assert p["remap_correctable"] is None and p["remap_failure"] is None
    assert p["retired_pages_sbe"] is None and p["nvlink_errors"] is None and p["recovery_action"] is None
    assert p["throttle"] == ["hw_power_brake"]  # the older ThrottleReasons call answered
    assert p["util"] == 97  # the rest is still read


def test_one_sample_per_interval_for_all_gpus_and_one_lost_event_per_lost_gpu():
    nvml = FakeNvml(n=3, lost={1})
    sampler = NvmlSampler(job="j", node="n1", interval_s=1.0, publish=lambda e: None, nvml=nvml)
    reader = NvmlReader(nvml)
    first = sampler.sample_once(reader)
    assert [(e.source, e.kind) for e in first] == [("gpu", "sample"), ("gpu", "lost")]
    sample, lost = first
    assert [g["index"] for g in sample.data["gpus"]] == [0, 2] and sample.data["interval_s"] == 1.0
    assert lost.data["gpu"] == 1 and lost.data["fault"] == "gpu_lost" and lost.data["action"] == "evict"
    assert "nvmlDeviceGetUUID" in lost.data["error"]
    # Still lost a second later: the sample goes on without it, no second lost event.
    assert [e.kind for e in sampler.sample_once(reader)] == ["sample"]
    nvml.lost = {0, 1, 2}
    assert [e.data["gpu"] for e in sampler.sample_once(reader)] == [0, 2]  # no sample when no GPU answers


def test_unknown_error_on_a_gpu_counts_as_lost():
    class Unknown(FakeNvml):
        def nvmlDeviceGetUtilizationRates(self, h):
            raise FakeNVMLError(UNKNOWN)

    r = NvmlReader(Unknown()).read(0, 0)
    assert r.lost and "nvmlDeviceGetUtilizationRates" in r.lost


def test_an_unexpected_error_is_null_and_remembered():
    class Odd(FakeNvml):
        def nvmlDeviceGetPcieReplayCounter(self, h):
            raise FakeNVMLError(21)

    r = NvmlReader(Odd()).read(0, 0)
    assert r.pcie_replay is None and r.lost is None and "pcie_replay" in r.errors


def test_no_nvml_is_a_one_line_unavailable_error():
    with pytest.raises(NvmlUnavailable) as err:
        open_nvml(FakeNvml(init_error=LIBRARY_NOT_FOUND))
    assert "no NVIDIA driver or GPU" in str(err.value) and "\n" not in str(err.value)


def test_real_pynvml_on_a_machine_without_a_gpu_is_unavailable():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVML")
    with pytest.raises(NvmlUnavailable):
        NvmlSampler(job="j", node="n", interval_s=1, publish=lambda e: None).run(threading.Event())


def test_run_publishes_samples_and_xid_events_until_stopped():
    nvml = FakeNvml(n=2, xids=[(1, 79), (0, 13), (0, 99999)])
    out = []
    stop = threading.Event()

    def publish(event):
        out.append(event)
        if sum(e.kind == "xid" for e in out) == 3 and sum(e.kind == "sample" for e in out) >= 2:
            stop.set()

    sampler = NvmlSampler(job="j", node="n1", interval_s=0.01, publish=publish, nvml=nvml)
    t = threading.Thread(target=sampler.run, args=(stop,))
    t.start()
    # Until the sampler has seen what it waits for and stopped: waited for while it publishes, not
    # a fixed 10 s a loaded machine's 10 ms intervals could outrun (issue 47).
    try:
        wait_until(lambda: not t.is_alive(), progress=lambda: len(out), stall_s=60, limit_s=240,
                   what="the sampler to publish the three Xids and stop")
    finally:
        stop.set()  # a failed wait leaves no sampler thread running
    assert nvml.shutdown
    xids = {e.data["xid"]: e.data for e in out if e.kind == "xid"}
    assert xids[79]["gpu"] == 1 and xids[79]["fault"] == "gpu_lost" and xids[79]["action"] == "evict"
    assert xids[13]["fault"] == "app_fault"
    assert xids[99999]["fault"] == "unknown"  # not in the table: recorded, not dropped


def test_probe_says_why_in_one_line_without_nvml(capsys):
    from tools import nvml_probe

    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        assert nvml_probe.main(["--seconds", "0.1"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "NVML not available" in err
    else:
        pynvml.nvmlShutdown()
        assert nvml_probe.main(["--seconds", "1.5"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert '"summary": true' in lines[-1] and any('"kind": "sample"' in line for line in lines)


class CountedNvml(FakeNvml):
    """A GPU without NVLink and without page retirement (as an H100 in a VM answered), calls counted."""

    def __init__(self, **kw):
        super().__init__(n=1, unsupported={"nvlink", "nvmlDeviceGetRetiredPages"}, **kw)
        self.calls = {}

    def __getattribute__(self, name):
        attr = super().__getattribute__(name)
        if name.startswith("nvmlDevice") and callable(attr):
            calls = super().__getattribute__("calls")
            calls[name] = calls.get(name, 0) + 1
        return attr


def test_a_call_refused_as_unsupported_is_not_asked_every_sample_and_is_asked_again_later():
    nvml = CountedNvml()
    now = [0.0]
    reader = NvmlReader(nvml, clock=lambda: now[0])
    first = reader.read(0, 0)
    assert first.nvlink_errors is None and first.retired_pages_sbe is None and first.errors == {}
    assert nvml.calls["nvmlDeviceGetNvLinkState"] == FakeNvml.NVML_NVLINK_MAX_LINKS
    assert nvml.calls["nvmlDeviceGetRetiredPages"] == 2
    before = dict(nvml.calls)
    second = reader.read(0, 0)
    asked = {k: v - before.get(k, 0) for k, v in nvml.calls.items() if v != before.get(k, 0)}
    assert "nvmlDeviceGetNvLinkState" not in asked and "nvmlDeviceGetRetiredPages" not in asked
    # Nor what does not change while the driver runs (2 ms a call on the H100 for the max clock).
    assert "nvmlDeviceGetMaxClockInfo" not in asked and "nvmlDeviceGetUUID" not in asked
    assert reader.handle(0) == reader.handle(0) == 0 and nvml.calls["nvmlDeviceGetHandleByIndex"] == 1
    assert asked["nvmlDeviceGetUtilizationRates"] == 1 and second.util == 97
    assert gpu_payload(second) == gpu_payload(first)
    # Not for good: a reset GPU may answer now.
    now[0] += 601.0
    reader.read(0, 0)
    assert nvml.calls["nvmlDeviceGetMaxClockInfo"] == 2
    assert nvml.calls["nvmlDeviceGetNvLinkState"] == 2 * FakeNvml.NVML_NVLINK_MAX_LINKS
    assert nvml.calls["nvmlDeviceGetRetiredPages"] == 4


def test_nvlink_links_are_found_once_and_only_their_counters_read():
    nvml = CountedNvml()
    nvml.unsupported = set()
    reader = NvmlReader(nvml)
    assert reader.read(0, 0).nvlink_errors == {"replay": 2, "recovery": 0, "crc_flit": 20, "crc_data": 0}
    states, counters = nvml.calls["nvmlDeviceGetNvLinkState"], nvml.calls["nvmlDeviceGetNvLinkErrorCounter"]
    assert reader.read(0, 0).nvlink_errors == {"replay": 2, "recovery": 0, "crc_flit": 20, "crc_data": 0}
    assert nvml.calls["nvmlDeviceGetNvLinkState"] == states  # two live links of four, known
    assert nvml.calls["nvmlDeviceGetNvLinkErrorCounter"] == counters + 2 * 4


def test_memory_used_leaves_out_the_drivers_reserved_memory_where_the_driver_says():
    class V2(FakeNvml):
        nvmlMemory_v2 = 0x2000028

        def nvmlDeviceGetMemoryInfo(self, h, version=None):
            if version is None:  # v1: used counts the 480 MiB the driver reserves (H100, driver 580)
                return types.SimpleNamespace(used=1363 * 1024**2, total=81559 * 1024**2)
            return types.SimpleNamespace(used=883 * 1024**2, total=81559 * 1024**2, reserved=480 * 1024**2)

    assert gpu_payload(NvmlReader(V2()).read(0, 0))["mem_used_mb"] == 883.0  # nvidia-smi's "Used"

    class OnlyV1(V2):
        def nvmlDeviceGetMemoryInfo(self, h, version=None):
            if version is not None:
                raise FakeNVMLError(NOT_SUPPORTED)
            return super().nvmlDeviceGetMemoryInfo(h)

    assert gpu_payload(NvmlReader(OnlyV1()).read(0, 0))["mem_used_mb"] == 1363.0


def test_an_unexpected_nvml_error_is_logged_once_per_gpu_and_field(caplog):
    class Odd(FakeNvml):
        def nvmlDeviceGetPcieReplayCounter(self, h):
            raise FakeNVMLError(21)

    nvml = Odd(n=2)
    sampler = NvmlSampler(job="j", node="n1", interval_s=1.0, publish=lambda e: None, nvml=nvml)
    reader = NvmlReader(nvml)
    with caplog.at_level("WARNING", logger="faultlens.collectors.nvml_sampler"):
        for _ in range(3):
            [sample] = sampler.sample_once(reader)
    assert [g["pcie_replay"] for g in sample.data["gpus"]] == [None, None]
    said = [r.getMessage() for r in caplog.records if "pcie_replay" in r.getMessage()]
    assert len(said) == 2 and "GPU 0" in said[0] and "GPU 1" in said[1]
