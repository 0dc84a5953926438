"""Ask a real driver every NVML question the sampler asks, and some it could ask, once each.

    python -m tools.nvml_survey > survey.jsonl

One JSON line per call: ``{"gpu", "call", "args", "ok", "value" | "error", "code", "us"}``, so a
person can see which calls the driver answers, in which units, what each costs, and which error
codes it gives for what it does not support. Not used by the agent: its findings are written up
in docs/real_gpu.md and the sampler follows them.
"""

from __future__ import annotations

import ctypes
import json
import sys
import time
from typing import Any, Callable, Iterator

from faultlens.collectors.nvml_sampler import NvmlUnavailable, open_nvml


def plain(value: Any) -> Any:
    """A JSON-able copy of what pynvml returned (ctypes structs become dicts)."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple, ctypes.Array)):
        return [plain(v) for v in value]
    fields = getattr(value, "_fields_", None)
    if fields is not None:
        return {name: plain(getattr(value, name)) for name, *_ in fields}
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return repr(value)


def _calls(n: Any) -> Iterator[tuple[str, tuple[Any, ...], Callable[[Any], tuple[Any, ...]]]]:
    """(function, label of its arguments, arguments given the handle) for one GPU."""
    c = lambda *a: a  # noqa: E731 - keeps the table below one line per call
    yield "nvmlDeviceGetName", (), lambda h: c(h)
    yield "nvmlDeviceGetUUID", (), lambda h: c(h)
    yield "nvmlDeviceGetArchitecture", (), lambda h: c(h)
    yield "nvmlDeviceGetPciInfo", (), lambda h: c(h)
    yield "nvmlDeviceGetUtilizationRates", (), lambda h: c(h)
    yield "nvmlDeviceGetMemoryInfo", (), lambda h: c(h)
    yield "nvmlDeviceGetTemperature", ("GPU",), lambda h: c(h, n.NVML_TEMPERATURE_GPU)
    yield "nvmlDeviceGetPowerUsage", (), lambda h: c(h)
    yield "nvmlDeviceGetEnforcedPowerLimit", (), lambda h: c(h)
    yield "nvmlDeviceGetPowerManagementLimit", (), lambda h: c(h)
    yield "nvmlDeviceGetTotalEnergyConsumption", (), lambda h: c(h)
    for clock in ("SM", "MEM", "GRAPHICS"):
        yield "nvmlDeviceGetClockInfo", (clock,), lambda h, k=clock: c(h, getattr(n, f"NVML_CLOCK_{k}"))
        yield "nvmlDeviceGetMaxClockInfo", (clock,), lambda h, k=clock: c(h, getattr(n, f"NVML_CLOCK_{k}"))
    yield "nvmlDeviceGetCurrentClocksEventReasons", (), lambda h: c(h)
    yield "nvmlDeviceGetCurrentClocksThrottleReasons", (), lambda h: c(h)
    yield "nvmlDeviceGetSupportedClocksEventReasons", (), lambda h: c(h)
    yield "nvmlDeviceGetPerformanceState", (), lambda h: c(h)
    yield "nvmlDeviceGetEccMode", (), lambda h: c(h)
    for kind in ("CORRECTED", "UNCORRECTED"):
        for counter in ("VOLATILE", "AGGREGATE"):
            yield "nvmlDeviceGetTotalEccErrors", (kind, counter), lambda h, k=kind, t=counter: c(
                h, getattr(n, f"NVML_MEMORY_ERROR_TYPE_{k}"), getattr(n, f"NVML_{t}_ECC"))
    yield "nvmlDeviceGetRemappedRows", (), lambda h: c(h)
    yield "nvmlDeviceGetRetiredPages", ("SBE",), lambda h: c(
        h, n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    yield "nvmlDeviceGetRetiredPages", ("DBE",), lambda h: c(h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    yield "nvmlDeviceGetRetiredPagesPendingStatus", (), lambda h: c(h)
    yield "nvmlDeviceGetPcieReplayCounter", (), lambda h: c(h)
    yield "nvmlDeviceGetCurrPcieLinkGeneration", (), lambda h: c(h)
    yield "nvmlDeviceGetCurrPcieLinkWidth", (), lambda h: c(h)
    yield "nvmlDeviceGetPersistenceMode", (), lambda h: c(h)
    yield "nvmlDeviceGetComputeRunningProcesses", (), lambda h: c(h)
    yield "nvmlDeviceGetSupportedEventTypes", (), lambda h: c(h)
    for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 0)):
        yield "nvmlDeviceGetNvLinkState", (link,), lambda h, k=link: c(h, k)
        for counter in ("DL_REPLAY", "DL_RECOVERY", "DL_CRC_FLIT", "DL_CRC_DATA"):
            yield "nvmlDeviceGetNvLinkErrorCounter", (link, counter), lambda h, k=link, t=counter: c(
                h, k, getattr(n, f"NVML_NVLINK_ERROR_{t}"))
    fields = [f for f in ("NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                          "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
                          "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
                          "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "NVML_FI_DEV_NVLINK_LINK_COUNT",
                          "NVML_FI_DEV_PCIE_REPLAY_COUNTER", "NVML_FI_DEV_ECC_SBE_VOL_TOTAL",
                          "NVML_FI_DEV_ECC_DBE_VOL_TOTAL", "NVML_FI_DEV_RETIRED_PENDING",
                          "NVML_FI_DEV_REMAPPED_COR", "NVML_FI_DEV_REMAPPED_UNC", "NVML_FI_DEV_REMAPPED_PENDING",
                          "NVML_FI_DEV_REMAPPED_FAILURE", "NVML_FI_DEV_NVLINK_GET_STATE")
              if hasattr(n, f)]
    for name in fields:
        yield "nvmlDeviceGetFieldValues", (name,), lambda h, f=name: c(h, [getattr(n, f)])


def survey(nvml: Any) -> Iterator[dict[str, Any]]:
    for call, args in (("nvmlSystemGetDriverVersion", ()), ("nvmlSystemGetNVMLVersion", ()),
                       ("nvmlSystemGetCudaDriverVersion", ()), ("nvmlDeviceGetCount", ())):
        yield _one(nvml, None, call, args, ())
    for index in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        for call, label, args in _calls(nvml):
            try:
                given = args(handle)
            except AttributeError as exc:  # a constant this pynvml lacks
                yield {"gpu": index, "call": call, "args": list(label), "ok": False, "error": str(exc),
                       "code": None, "us": None}
                continue
            yield _one(nvml, index, call, label, given)


def _one(nvml: Any, gpu: int | None, call: str, label: tuple[Any, ...], args: tuple[Any, ...]) -> dict[str, Any]:
    row: dict[str, Any] = {"gpu": gpu, "call": call, "args": list(label)}
    fn = getattr(nvml, call, None)
    if fn is None:
        return {**row, "ok": False, "error": "not in this pynvml", "code": None, "us": None}
    start = time.perf_counter()
    try:
        value = fn(*args)
    except Exception as exc:  # noqa: BLE001 - a survey reports every failure, NVML's or the binding's
        return {**row, "ok": False, "error": f"{type(exc).__name__}: {exc}", "code": getattr(exc, "value", None),
                "us": round((time.perf_counter() - start) * 1e6, 1)}
    us = round((time.perf_counter() - start) * 1e6, 1)
    return {**row, "ok": True, "value": plain(value), "us": us}


def main(argv: list[str] | None = None, nvml: Any = None) -> int:
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        nvml = open_nvml(nvml)
    except NvmlUnavailable as exc:
        print(f"nvml_survey: {exc}", file=sys.stderr)
        return 1
    try:
        for row in survey(nvml):
            print(json.dumps(row), flush=True)
    finally:
        nvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
