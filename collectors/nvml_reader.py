"""Reading one GPU through NVML: every call of the agent to the driver goes through :meth:`NvmlReader.call`.

Every call is guarded: a field the driver does not support reads as ``None``; a GPU whose handle
is gone (``NVML_ERROR_GPU_IS_LOST`` / ``NVML_ERROR_UNKNOWN``) raises :class:`GpuLost`. Each call
is announced to :func:`collectors.nvml_deadline.note_call` first, so the sampler's deadline is
per call and a call past it is named.

What a real driver taught (docs/real_gpu.md, H100 80GB HBM3, driver 580.159.04): a GPU without
NVLink answers NOT_SUPPORTED for every one of NVML's 36 link slots, and an H100 for both retired-
page calls (it remaps rows instead); asked every second, those refusals were 39 of 58 calls per
sample. A call the driver refused as unsupported is not asked again for :data:`REASK_S`; the
GPU's handle, UUID, maximum SM clock, NVLink links and the GPU count are read once in that time
(the handle call cost 0.9 ms and the maximum clock 2 ms there, more than all the rest of a
sample). Memory used is NVML's v2 reading, which leaves out the driver's reserved memory (480 MiB
on that H100) as nvidia-smi does.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from faultlens.collectors.gpu_sample import GpuReading
from faultlens.collectors.nvml_deadline import note_call

_MISSING_CODES = ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_FUNCTION_NOT_FOUND",
                  "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_UNINITIALIZED")
_LOST_CODES = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN")
# A refusal that is a property of the GPU and driver, not of the moment.
_UNSUPPORTED_CODES = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND")
_QUIET_CODES = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NOT_FOUND", "NVML_ERROR_NO_PERMISSION",
                "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NO_DATA")


# Unsupported calls and NVLink links are asked again this often, in case a GPU reset changed them.
REASK_S = 600.0


class GpuLost(Exception):
    def __init__(self, error: str):
        self.error = error
        super().__init__(error)


def _codes(nvml: Any, names: tuple[str, ...]) -> set[int]:
    return {getattr(nvml, n) for n in names if hasattr(nvml, n)}


class NvmlReader:
    """Reads one GPU at a time through ``nvml``; raises :class:`GpuLost` when the handle is gone."""

    def __init__(self, nvml: Any, clock: Callable[[], float] = time.monotonic):
        self.nvml = nvml
        self.clock = clock
        self._lost = _codes(nvml, _LOST_CODES)
        self._quiet = _codes(nvml, _QUIET_CODES)
        self._unsupported_codes = _codes(nvml, _UNSUPPORTED_CODES)
        self._unsupported: set[tuple[Any, ...]] = set()  # (GPU index, function, arguments after the handle)
        self._links: dict[int, tuple[int, ...]] = {}  # GPU index → its NVLink links
        # What does not change while the driver runs: a call for it cost up to 2 ms on the H100.
        self._handles: dict[int, Any] = {}
        self._static: dict[int, tuple[str, int]] = {}  # GPU index → (uuid, max SM clock)
        self._count: int | None = None
        self._since = clock()
        self._memory_v2 = getattr(nvml, "nvmlMemory_v2", None)  # older bindings take no version

    def call(self, reading: GpuReading | None, name: str, fn_name: str, *args: Any) -> Any:
        """``nvml.<fn_name>(*args)``; ``None`` when unsupported, :class:`GpuLost` when the GPU is gone.

        ``args[0]`` is the GPU's handle; a call the GPU of ``reading`` refused as unsupported is not
        made again."""
        key = None if reading is None else (
            reading.index, fn_name, *(tuple(a) if isinstance(a, list) else a for a in args[1:]))
        if key in self._unsupported:
            return None
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:  # an older binding without this function
            return None
        note_call(fn_name)
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in self._lost:
                raise GpuLost(f"{fn_name}: {exc}") from None
            if code in self._unsupported_codes and key is not None:
                self._unsupported.add(key)
            elif code not in self._quiet and reading is not None:
                reading.errors[name] = str(exc)
            return None

    def known_uuid(self, index: int) -> str | None:
        """The GPU's UUID if it was read already (no NVML call: safe while the GPU is stuck)."""
        static = self._static.get(index)
        return static[0] if static else None

    def count(self) -> int:
        """The GPU count, read once per REASK_S (it does not change while the driver runs)."""
        self._forget_when_due()
        if self._count is None:
            note_call("nvmlDeviceGetCount")
            self._count = int(self.nvml.nvmlDeviceGetCount())
        return self._count

    def known_count(self) -> int | None:
        """The count if read already (no NVML call)."""
        self._forget_when_due()
        return self._count

    def handle(self, index: int) -> Any:
        self._forget_when_due()
        handle = self._handles.get(index)
        if handle is None:
            handle = self.call(None, "handle", "nvmlDeviceGetHandleByIndex", index)
            if handle is not None:
                self._handles[index] = handle
        return handle

    def _forget_when_due(self) -> None:
        if self.clock() - self._since > REASK_S:
            self._unsupported.clear()
            self._links.clear()
            self._handles.clear()
            self._static.clear()
            self._count = None
            self._since = self.clock()

    def read(self, index: int, handle: Any) -> GpuReading:
        self._forget_when_due()
        r = GpuReading(index=index)
        try:
            self._read_into(r, handle)
        except GpuLost as lost:
            r.lost = lost.error
        return r

    def _read_into(self, r: GpuReading, h: Any) -> None:
        n, c = self.nvml, self.call
        static = self._static.get(r.index)
        if static is None:
            uuid = c(r, "uuid", "nvmlDeviceGetUUID", h)
            r.uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            r.sm_clock_max_mhz = c(r, "sm_clock_max", "nvmlDeviceGetMaxClockInfo", h, n.NVML_CLOCK_SM)
            if r.uuid is not None and r.sm_clock_max_mhz is not None:
                self._static[r.index] = (r.uuid, r.sm_clock_max_mhz)
        else:
            r.uuid, r.sm_clock_max_mhz = static
        util = c(r, "util", "nvmlDeviceGetUtilizationRates", h)
        if util is not None:
            r.util, r.mem_util = int(util.gpu), int(util.memory)
        mem = None if self._memory_v2 is None else c(r, "mem", "nvmlDeviceGetMemoryInfo", h, self._memory_v2)
        if mem is None:
            mem = c(r, "mem", "nvmlDeviceGetMemoryInfo", h)
        if mem is not None:
            r.mem_used_bytes, r.mem_total_bytes = int(mem.used), int(mem.total)
        r.temp_c = c(r, "temp_c", "nvmlDeviceGetTemperature", h, n.NVML_TEMPERATURE_GPU)
        r.power_mw = c(r, "power", "nvmlDeviceGetPowerUsage", h)
        r.power_limit_mw = c(r, "power_limit", "nvmlDeviceGetEnforcedPowerLimit", h)
        r.sm_clock_mhz = c(r, "sm_clock", "nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_SM)
        r.mem_clock_mhz = c(r, "mem_clock", "nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_MEM)
        # Newer drivers call them clock event reasons; same bits.
        mask = c(r, "throttle", "nvmlDeviceGetCurrentClocksEventReasons", h)
        if mask is None:
            mask = c(r, "throttle", "nvmlDeviceGetCurrentClocksThrottleReasons", h)
        r.throttle_mask = mask
        corrected, uncorrected = n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        r.ecc_sbe_volatile = c(r, "ecc", "nvmlDeviceGetTotalEccErrors", h, corrected, n.NVML_VOLATILE_ECC)
        r.ecc_dbe_volatile = c(r, "ecc", "nvmlDeviceGetTotalEccErrors", h, uncorrected, n.NVML_VOLATILE_ECC)
        r.ecc_sbe_aggregate = c(r, "ecc", "nvmlDeviceGetTotalEccErrors", h, corrected, n.NVML_AGGREGATE_ECC)
        r.ecc_dbe_aggregate = c(r, "ecc", "nvmlDeviceGetTotalEccErrors", h, uncorrected, n.NVML_AGGREGATE_ECC)
        rows = c(r, "remapped_rows", "nvmlDeviceGetRemappedRows", h)
        # correctable, uncorrectable, pending, failure: the four NVML answers
        r.remapped_rows = (int(rows[0]), int(rows[1]), int(rows[2]), int(rows[3])) if rows is not None else None
        sbe = c(r, "retired_pages", "nvmlDeviceGetRetiredPages", h, n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        dbe = c(r, "retired_pages", "nvmlDeviceGetRetiredPages", h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        r.retired_pages_sbe = None if sbe is None else len(sbe)
        r.retired_pages_dbe = None if dbe is None else len(dbe)
        pending = c(r, "retired_pending", "nvmlDeviceGetRetiredPagesPendingStatus", h)
        r.retired_pending = None if pending is None else bool(pending)
        r.pcie_replay = c(r, "pcie_replay", "nvmlDeviceGetPcieReplayCounter", h)
        r.nvlink_errors = self._nvlink(r, h)
        r.recovery_action = self._recovery_action(r, h)

    def _nvlink(self, r: GpuReading, h: Any) -> dict[str, int] | None:
        n = self.nvml
        counters = {"replay": "NVML_NVLINK_ERROR_DL_REPLAY", "recovery": "NVML_NVLINK_ERROR_DL_RECOVERY",
                    "crc_flit": "NVML_NVLINK_ERROR_DL_CRC_FLIT", "crc_data": "NVML_NVLINK_ERROR_DL_CRC_DATA"}
        links = self._links.get(r.index)
        if links is None:
            # A slot whose state does not answer is no link of this GPU (or it has no NVLink at all).
            links = self._links[r.index] = tuple(
                link for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 0))
                if self.call(None, "nvlink", "nvmlDeviceGetNvLinkState", h, link) is not None)
        if not links:
            return None
        totals = {name: 0 for name in counters}
        for link in links:
            for name, const in counters.items():
                value = self.call(r, "nvlink", "nvmlDeviceGetNvLinkErrorCounter", h, link, getattr(n, const))
                if value is not None:
                    totals[name] += int(value)
        return totals

    def _recovery_action(self, r: GpuReading, h: Any) -> int | None:
        fid = getattr(self.nvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
        if fid is None:
            return None
        values = self.call(r, "recovery_action", "nvmlDeviceGetFieldValues", h, [fid])
        if not values or getattr(values[0], "nvmlReturn", 1) != 0:
            return None
        return int(values[0].value.uiVal)
