"""A fake NVML module (just the pynvml surface the sampler uses), for the collector unit tests and
bench/bench_nvml_deadline.py: calls cost microseconds, a GPU can be lost, a call can be refused as
unsupported, and :class:`HangingNvml` blocks one GPU's call for good, as a wedged driver does."""

from __future__ import annotations

import threading
import types


class FakeNVMLError(Exception):
    def __init__(self, value):
        self.value = value
        super().__init__(f"NVML error {value}")


NOT_SUPPORTED, TIMEOUT, LIBRARY_NOT_FOUND, GPU_IS_LOST, UNKNOWN = 3, 10, 12, 15, 999


class FakeNvml:
    """Just the pynvml surface the sampler uses. ``gpus``: index → dict of overrides."""

    NVMLError = FakeNVMLError
    NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED
    NVML_ERROR_TIMEOUT = TIMEOUT
    NVML_ERROR_LIBRARY_NOT_FOUND = LIBRARY_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = GPU_IS_LOST
    NVML_ERROR_UNKNOWN = UNKNOWN
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 0, 1
    NVML_NVLINK_MAX_LINKS = 4
    NVML_NVLINK_ERROR_DL_REPLAY, NVML_NVLINK_ERROR_DL_RECOVERY = 0, 1
    NVML_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_CRC_DATA = 2, 3
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
    nvmlEventTypeXidCriticalError = 0x8

    def __init__(self, n=2, init_error=None, unsupported=(), lost=(), xids=()):
        self.n = n
        self.init_error = init_error
        self.unsupported = set(unsupported)  # function names that raise NOT_SUPPORTED
        self.lost = set(lost)  # GPU indices whose calls raise GPU_IS_LOST
        self.xids = list(xids)  # (gpu, xid) delivered by the event set, then timeouts
        self.shutdown = False

    def _guard(self, name, h):
        if h in self.lost:
            raise FakeNVMLError(GPU_IS_LOST)
        if name in self.unsupported:
            raise FakeNVMLError(NOT_SUPPORTED)

    def nvmlInit(self):
        if self.init_error:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlDeviceGetCount(self):
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetIndex(self, h):
        return h

    def nvmlDeviceGetUUID(self, h):
        self._guard("uuid", h)
        return f"GPU-{h:04d}"

    def nvmlDeviceGetUtilizationRates(self, h):
        self._guard("util", h)
        return types.SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):
        self._guard("mem", h)
        return types.SimpleNamespace(used=40 * 1024**3, total=80 * 1024**3)

    def nvmlDeviceGetTemperature(self, h, sensor):
        self._guard("temp", h)
        return 71 + h

    def nvmlDeviceGetPowerUsage(self, h):
        self._guard("power", h)
        return 612_345

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetClockInfo(self, h, clock):
        return {1: 1980, 2: 2619}[clock]

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return 1980

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        self._guard("nvmlDeviceGetCurrentClocksEventReasons", h)
        return 0x40 | 0x4  # hw_thermal + sw_power_cap

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return 0x80

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        self._guard("ecc", h)
        return {(0, 0): 3, (1, 0): 0, (0, 1): 120, (1, 1): 2}[(kind, counter)]

    def nvmlDeviceGetRemappedRows(self, h):
        self._guard("nvmlDeviceGetRemappedRows", h)
        return (5, 1, 0, 1)

    def nvmlDeviceGetRetiredPages(self, h, cause):
        self._guard("nvmlDeviceGetRetiredPages", h)
        return [0x1000] * (2 if cause == 0 else 1)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        return 0

    def nvmlDeviceGetPcieReplayCounter(self, h):
        self._guard("pcie", h)
        return 7

    def nvmlDeviceGetNvLinkState(self, h, link):
        self._guard("nvlink", h)
        if link >= 2:
            raise FakeNVMLError(NOT_SUPPORTED)
        return 1

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        return {0: 1, 1: 0, 2: 10, 3: 0}[counter]

    def nvmlDeviceGetFieldValues(self, h, ids):
        self._guard("nvmlDeviceGetFieldValues", h)
        assert ids == [230]
        return [types.SimpleNamespace(nvmlReturn=0, value=types.SimpleNamespace(uiVal=1))]

    def nvmlEventSetCreate(self):
        return "set"

    def nvmlDeviceRegisterEvents(self, h, types_, event_set):
        pass

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        if self.xids:
            gpu, xid = self.xids.pop(0)
            return types.SimpleNamespace(device=gpu, eventType=0x8, eventData=xid)
        raise FakeNVMLError(TIMEOUT)

    def nvmlEventSetFree(self, event_set):
        pass


class HangingNvml(FakeNvml):
    """GPU ``hang_gpu``'s ``hang_call`` blocks until ``release`` is set (never, unless a test does)."""

    def __init__(self, hang_gpu=1, hang_call="nvmlDeviceGetTemperature", handle_lost=False, **kw):
        super().__init__(**kw)
        self.hang_gpu, self.hang_call, self.handle_lost = hang_gpu, hang_call, handle_lost
        self.release = threading.Event()
        self.entered = threading.Event()

    def _maybe_hang(self, name, h):
        if name == self.hang_call and h == self.hang_gpu and not self.release.is_set():
            self.entered.set()
            self.release.wait()

    def nvmlDeviceGetTemperature(self, h, sensor):
        self._maybe_hang("nvmlDeviceGetTemperature", h)
        return super().nvmlDeviceGetTemperature(h, sensor)

    def nvmlDeviceGetHandleByIndex(self, i):
        if self.handle_lost and i == self.hang_gpu and self.entered.is_set():
            raise FakeNVMLError(GPU_IS_LOST)
        return super().nvmlDeviceGetHandleByIndex(i)

    def nvmlInit(self):
        self._maybe_hang("nvmlInit", self.hang_gpu)
