"""What the collector read from a real GPU (tests/fixtures/real_gpu/, docs/real_gpu.md).

`tools/real_gpu_capture.sh` ran on an NVIDIA H100 80GB HBM3 (driver 580.159.04, nvidia-ml-py
13.610.43): `faultlens collect --no-kernel --duration 60` recorded by `faultlens record`, once idle
and once under a bf16 matmul loop that held the GPU at its 700 W power cap, with nvidia-smi
sampling the same fields every second beside it. These tests hold the sampler to that run: every
sample decodes and passes the payload checks, its values agree with nvidia-smi's in nvidia-smi's
units, and a healthy GPU, power-capped at 70% of its maximum SM clock, is no fault.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import types
from datetime import datetime, timezone
from pathlib import Path

import pytest

from faultlens.collectors.gpu_sample import throttle_names
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.peers.features import FeatureWindows
from faultlens.diagnosis.replay.scoring import is_scored
from faultlens.events.envelope import Envelope
from faultlens.events.payloads import check_payload
from faultlens.events.trace import iter_trace

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "real_gpu"
PHASES = ("idle", "busy")
# What this H100 does not report: no NVLink in this machine, and row remapping in place of page retirement.
NULL_ON_H100 = {"nvlink_errors", "retired_pages_sbe", "retired_pages_dbe", "retired_pending"}


@functools.lru_cache(maxsize=None)
def events(phase: str) -> tuple[Envelope, ...]:
    return tuple(iter_trace(FIXTURES / f"{phase}.parquet"))


def samples(phase: str) -> list[Envelope]:
    return [e for e in events(phase) if (e.source, e.kind) == ("gpu", "sample")]


@functools.lru_cache(maxsize=None)
def smi(phase: str) -> list[tuple[float, dict[str, str]]]:
    """nvidia-smi --query-gpu rows of the same run: (time, field → value)."""
    with open(FIXTURES / f"smi_{phase}.csv", newline="") as f:
        rows = [[c.strip() for c in row] for row in csv.reader(f)]
    header = [h.split(" [")[0] for h in rows[0]]  # "power.draw [W]" → "power.draw"
    out = []
    for row in rows[1:]:
        fields = dict(zip(header, row, strict=True))
        at = datetime.strptime(fields["timestamp"], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=timezone.utc)
        out.append((at.timestamp(), fields))
    return out


def smi_at(phase: str, ts: float) -> dict[str, str]:
    at, fields = min(smi(phase), key=lambda row: abs(row[0] - ts))
    assert abs(at - ts) < 1.0, "nvidia-smi sampled every second beside the collector"
    return fields


@pytest.mark.parametrize("phase", PHASES)
def test_a_minute_of_real_samples_decodes_and_passes_the_payload_checks(phase):
    got = samples(phase)
    assert 55 <= len(got) <= 61  # one a second for 60 s
    assert {e.node for e in got} == {"vm"} and {e.job for e in got} == {f"real-{phase}"}
    for e in got:
        check_payload(e)
        assert e.data["interval_s"] == 1.0 and len(e.data["gpus"]) == 1
    beats = [e for e in events(phase) if e.source == "heartbeat"]
    assert len(beats) >= 12  # every 5 s


@pytest.mark.parametrize("phase", PHASES)
def test_every_documented_field_is_there_and_null_only_where_the_driver_does_not_report_it(phase):
    gpus = [e.data["gpus"][0] for e in samples(phase)]
    always_null = {k for k in gpus[0] if all(g[k] is None for g in gpus)}
    assert always_null == NULL_ON_H100
    assert all(g["uuid"].startswith("GPU-") and g["recovery_action"] == "none" for g in gpus)


@pytest.mark.parametrize("phase", PHASES)
def test_values_agree_with_nvidia_smi_in_its_units(phase):
    agree_throttle = 0
    got = samples(phase)
    for e in got:
        g, s = e.data["gpus"][0], smi_at(phase, e.ts)
        assert g["uuid"] == s["uuid"]
        assert abs(g["temp_c"] - float(s["temperature.gpu"])) <= 2  # °C
        assert abs(g["power_w"] - float(s["power.draw"])) <= max(10.0, 0.03 * g["power_w"])  # W, not mW
        assert g["power_limit_w"] == float(s["enforced.power.limit"]) == 700.0
        # The SM clock moves by tens of MHz within a second under a power cap.
        assert abs(g["sm_clock_mhz"] - float(s["clocks.current.sm"])) <= 100
        assert g["mem_clock_mhz"] == float(s["clocks.current.memory"])
        assert g["sm_clock_max_mhz"] == float(s["clocks.max.sm"]) == 1980
        # MiB, and without the driver's 480 MiB reserve (nvidia-smi's "Used"); the total is the same.
        assert abs(g["mem_used_mb"] - float(s["memory.used"])) <= 16
        assert g["mem_total_mb"] == float(s["memory.total"])
        assert abs(g["util"] - float(s["utilization.gpu"])) <= 5
        assert (g["ecc_sbe_volatile"], g["ecc_dbe_volatile"], g["ecc_sbe_aggregate"], g["ecc_dbe_aggregate"]) == tuple(
            int(s[f"ecc.errors.{k}.{c}.total"]) for c, k in
            (("volatile", "corrected"), ("volatile", "uncorrected"), ("aggregate", "corrected"),
             ("aggregate", "uncorrected")))
        assert (g["remap_correctable"], g["remap_uncorrectable"]) == (
            int(s["remapped_rows.correctable"]), int(s["remapped_rows.uncorrectable"]))
        assert (g["remap_pending"], g["remap_failure"]) == (
            s["remapped_rows.pending"] == "Yes", s["remapped_rows.failure"] == "Yes")
        assert s["retired_pages.pending"] == "[N/A]" and g["retired_pending"] is None
        agree_throttle += g["throttle"] == throttle_names(int(s["clocks_event_reasons.active"], 16))
    assert agree_throttle >= 0.9 * len(got)  # a reason may change between the two readings
    # PCIe replays: the -q snapshot taken halfway through the phase.
    replays = _smi_q((FIXTURES / f"smi_q_{phase}.txt").read_text(), "PCI", "Replays Since Reset")
    assert {e.data["gpus"][0]["pcie_replay"] for e in got} == {int(replays)}


def test_the_busy_gpu_was_power_capped_not_thermal_and_the_idle_one_idle():
    busy = [e.data["gpus"][0] for e in samples("busy")]
    idle = [e.data["gpus"][0] for e in samples("idle")]
    assert all(g["throttle"] == ["gpu_idle"] and g["util"] == 0 and g["sm_clock_mhz"] == 345 for g in idle)
    assert sum(g["throttle"] == ["sw_power_cap"] for g in busy) >= 0.9 * len(busy)
    assert all(g["util"] >= 99 and 1200 <= g["sm_clock_mhz"] <= 1500 and g["power_w"] > 650 for g in busy)


def test_node_stage_features_of_the_real_samples():
    windows = {}
    for phase in PHASES:
        fw = FeatureWindows()
        out = [w for e in events(phase) for w in fw.observe(e)] + fw.flush()
        assert len(out) >= 5  # 10 s windows over a minute
        windows[phase] = out
    busy = [w.features for w in windows["busy"]]
    assert all(0.6 <= f["sm_clock_ratio"] <= 0.75 for f in busy)  # 1320-1380 of 1980 MHz
    assert all(f["power_ratio"] >= 0.95 and f["util"] >= 99 for f in busy)
    assert all(f["throttle"] == 0.0 for f in busy)  # a power cap is not a thermal throttle
    assert all(f["util"] == 0.0 and f["sm_clock_ratio"] < 0.2 for f in (w.features for w in windows["idle"]))


def test_a_healthy_gpu_idle_then_power_capped_is_no_fault():
    dead = []
    diags = analyze(sorted(events("idle") + events("busy"), key=lambda e: e.ts),
                    on_dead=lambda e, why: dead.append(why))
    assert dead == []
    assert [d for d in diags if is_scored(d) or d.action != "none"] == []


def _with(e: Envelope, **gpu) -> Envelope:
    data = dict(e.data)
    data["gpus"] = [{**data["gpus"][0], **gpu}]
    return dataclasses.replace(e, id=e.id + "-m", data=data)


@pytest.mark.parametrize("change, says", [
    ({"remap_pending": True}, "pending"),
    ({"ecc_dbe_volatile": 1, "ecc_dbe_aggregate": 1}, "uncorrectable ECC errors rose 0 → 1"),
])
def test_the_same_real_samples_with_a_memory_fault_written_in_are_diagnosed(change, says):
    """The rules do read these samples: one changed field of one real sample is a fault."""
    evs = list(events("busy"))
    i = max(k for k, e in enumerate(evs) if e.kind == "sample") - 10
    evs[i] = _with(evs[i], **change)
    [d] = [d for d in analyze(evs) if is_scored(d)]
    assert (d.fault, d.action, d.nodes) == ("gpu_memory", "evict", ("vm",)) and says in d.detail


class RecordedDriver:
    """pynvml answering as that H100 did in survey.jsonl: each function its first answer, or its error."""

    def __init__(self):
        self.pynvml = pytest.importorskip("pynvml")
        self.NVMLError = self.pynvml.NVMLError
        self.answers = {}
        for line in (FIXTURES / "survey.jsonl").read_text().splitlines():
            row = json.loads(line)
            self.answers.setdefault(row["call"], row)
        self.calls = 0

    @staticmethod
    def _obj(value):
        if isinstance(value, dict):
            return types.SimpleNamespace(**{k: RecordedDriver._obj(v) for k, v in value.items()})
        return [RecordedDriver._obj(v) for v in value] if isinstance(value, list) else value

    def __getattr__(self, name):
        real = getattr(self.pynvml, name)
        if not (name.startswith("nvmlDevice") and callable(real)):
            return real  # constants, nvmlInit and the rest

        def answer(*args, **kwargs):
            self.calls += 1
            if name == "nvmlDeviceGetHandleByIndex":
                return 0
            row = self.answers[name]
            if not row["ok"]:
                raise self.NVMLError(row["code"])
            return self._obj(row["value"])

        return answer


def test_the_sampler_makes_the_calls_per_sample_the_probe_measured_on_the_real_driver():
    """probe_*.json: 16 NVML calls a sample as the sampler runs now, 58 when it asked everything every time."""
    from faultlens.collectors.nvml_sampler import NvmlReader, NvmlSampler

    measured = {}
    for phase in PHASES:
        for name in (f"probe_{phase}", f"probe_{phase}_nocache"):
            probe = json.loads((FIXTURES / f"{name}.json").read_text())
            assert probe["lost_gpus"] == [] and set(probe["always_null"]) == NULL_ON_H100
            measured.setdefault(name.endswith("nocache"), set()).add(probe["cost"]["nvml_calls_per_sample"]["p50"])
    for forget, want in ((False, measured[False]), (True, measured[True])):
        driver = RecordedDriver()
        now = [0.0]
        reader = NvmlReader(driver, clock=lambda now=now: now[0])
        sampler = NvmlSampler(job="j", node="vm", interval_s=1.0, publish=lambda e: None, nvml=driver)
        per_sample = []
        for _ in range(4):
            before = driver.calls
            [event] = sampler.sample_once(reader)
            per_sample.append(driver.calls - before)
            now[0] += 601.0 if forget else 1.0
        # The probe counted the GPU count call in every sample; the sampler now reads the count
        # once per REASK_S (it does not change while the driver runs), one call fewer.
        assert {per_sample[-1]} == (want if forget else {w - 1 for w in want}), per_sample
        gpu = event.data["gpus"][0]
        assert gpu["nvlink_errors"] is None and gpu["retired_pending"] is None


def _smi_q(text: str, section: str, key: str) -> str:
    """A value of `nvidia-smi -q` (smi_info.txt, taken just before the survey): first `key` after `section`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == section)
    return next(line.split(":", 1)[1].strip() for line in lines[start:] if line.strip().startswith(key))


def test_the_drivers_raw_answers_become_nvidia_smis_values_in_its_units():
    """The raw NVML values of the survey (mW, bytes) through today's payload code, against nvidia-smi -q."""
    from faultlens.collectors.gpu_sample import gpu_payload
    from faultlens.collectors.nvml_sampler import NvmlReader

    driver = RecordedDriver()
    gpu = gpu_payload(NvmlReader(driver).read(0, 0))
    q = (FIXTURES / "smi_info.txt").read_text()
    assert f"{gpu['temp_c']} C" == _smi_q(q, "Temperature", "GPU Current Temp")
    assert abs(gpu["power_w"] - float(_smi_q(q, "GPU Power Readings", "Average Power Draw").split()[0])) < 1.0
    assert f"{gpu['power_limit_w']:.2f} W" == _smi_q(q, "GPU Power Readings", "Current Power Limit")
    assert f"{gpu['mem_total_mb']:.0f} MiB" == _smi_q(q, "FB Memory Usage", "Total")
    assert f"{gpu['sm_clock_max_mhz']} MHz" == _smi_q(q, "Max Clocks", "SM")
    # NVML's v1 "used" of an idle GPU is exactly the driver's reserve: why the sampler asks for v2.
    v1_used = driver.answers["nvmlDeviceGetMemoryInfo"]["value"]["used"] / 2**20
    assert f"{v1_used:.0f} MiB" == _smi_q(q, "FB Memory Usage", "Reserved") == "480 MiB"
    assert _smi_q(q, "FB Memory Usage", "Used") == "0 MiB"
