"""GPU health from NVML: device reachable, no uncorrectable ECC since boot, no row remap pending or
failed, no retired page pending, no driver recovery action asked, no hardware clock slowdown.

The reading reuses the sampler's :class:`collectors.nvml_reader.NvmlReader` and payload
(:func:`collectors.gpu_sample.gpu_payload`), so a check sees exactly the fields the `gpu`/`sample`
events carry; :func:`judge_gpu_health` is pure over those payloads.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from faultlens.collectors.checks.result import CheckResult, skipped
from faultlens.collectors.gpu_sample import gpu_payload
from faultlens.collectors.nvml_sampler import GpuLost, NvmlReader, NvmlUnavailable, open_nvml

NAME = "gpu_health"
# At stop time the GPUs are idle: a hardware slowdown asserted then is the board, not the load.
HARDWARE_THROTTLE = ("hw_slowdown", "hw_thermal", "hw_power_brake")


def read_gpu_health(nvml: Any = None) -> list[dict[str, Any]]:
    """One payload per GPU (``lost`` set to the NVML error when its handle is gone).
    Raises NvmlUnavailable when there is no NVML on this node."""
    nvml = open_nvml(nvml)
    try:
        reader = NvmlReader(nvml)
        out: list[dict[str, Any]] = []
        for index in range(reader.count()):
            try:
                handle = reader.handle(index)
            except GpuLost as lost:
                out.append({"index": index, "lost": lost.error})
                continue
            if handle is None:  # NVML would not give a handle for a reason it calls harmless
                out.append({"index": index, "lost": "no NVML handle"})
                continue
            reading = reader.read(index, handle)
            out.append({**gpu_payload(reading), "lost": reading.lost})
        return out
    finally:
        try:  # NVML counts nvmlInit calls: this leaves the sampler's own session open
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down is best effort
            pass


def gpu_problems(gpu: Mapping[str, Any]) -> list[str]:
    """Why one GPU is unfit to train on; empty when it is fit."""
    idx = gpu.get("index", "?")
    if gpu.get("lost"):
        return [f"gpu{idx}: lost ({gpu['lost']})"]
    problems = []
    if (gpu.get("ecc_dbe_volatile") or 0) > 0:
        problems.append(f"gpu{idx}: {gpu['ecc_dbe_volatile']} uncorrectable ECC error(s) since boot")
    if gpu.get("remap_failure"):
        problems.append(f"gpu{idx}: row remapping failed")
    if gpu.get("remap_pending"):
        problems.append(f"gpu{idx}: row remap pending (needs a GPU reset)")
    if gpu.get("retired_pending"):
        problems.append(f"gpu{idx}: page retirement pending (needs a GPU reset)")
    action = gpu.get("recovery_action")
    if action not in (None, "none"):
        problems.append(f"gpu{idx}: driver asks for recovery action {action}")
    hw = [t for t in gpu.get("throttle") or () if t in HARDWARE_THROTTLE]
    if hw:
        problems.append(f"gpu{idx}: clocks held down by {','.join(hw)} at idle "
                        f"(sm {gpu.get('sm_clock_mhz')}/{gpu.get('sm_clock_max_mhz')} MHz)")
    return problems


def judge_gpu_health(gpus: Sequence[Mapping[str, Any]]) -> CheckResult:
    if not gpus:
        return skipped(NAME, "NVML reports no GPU")
    problems = [p for g in gpus for p in gpu_problems(g)]
    if problems:
        return CheckResult(NAME, False, "; ".join(problems))
    return CheckResult(NAME, True, f"{len(gpus)} GPU(s) healthy")


def check_gpu_health(nvml: Any = None) -> CheckResult:
    try:
        gpus = read_gpu_health(nvml)
    except NvmlUnavailable as exc:
        return skipped(NAME, f"no NVML ({exc})")
    return judge_gpu_health(gpus)
