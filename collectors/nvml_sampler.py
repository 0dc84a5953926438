"""The NVML source: every NVML call of the agent lives here; payloads are built by :mod:`collectors.gpu_sample`.

Every call is guarded: a field the driver does not support reads as ``None``; a GPU whose handle
is gone (``NVML_ERROR_GPU_IS_LOST`` / ``NVML_ERROR_UNKNOWN``) is marked lost and reported once as
a `gpu`/`lost` event; an NVML that is not there at all (no driver, no library) raises
:class:`NvmlUnavailable` with a one-line message and the agent carries on without this source.
The NVML module is a parameter (default ``pynvml``), so unit tests pass a fake one.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from collectors.gpu_sample import GpuReading, sample_events, xid_event
from streams.events import Envelope

log = logging.getLogger(__name__)

_MISSING_CODES = ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_FUNCTION_NOT_FOUND",
                  "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_UNINITIALIZED")
_LOST_CODES = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN")
_QUIET_CODES = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NOT_FOUND", "NVML_ERROR_NO_PERMISSION",
                "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NO_DATA")


class NvmlUnavailable(RuntimeError):
    """No usable NVML on this node (no GPU driver, no library)."""


class GpuLost(Exception):
    def __init__(self, error: str):
        self.error = error
        super().__init__(error)


def _codes(nvml: Any, names: tuple[str, ...]) -> set[int]:
    return {getattr(nvml, n) for n in names if hasattr(nvml, n)}


class NvmlReader:
    """Reads one GPU at a time through ``nvml``; raises :class:`GpuLost` when the handle is gone."""

    def __init__(self, nvml: Any):
        self.nvml = nvml
        self._lost = _codes(nvml, _LOST_CODES)
        self._quiet = _codes(nvml, _QUIET_CODES)

    def call(self, reading: GpuReading | None, name: str, fn_name: str, *args: Any) -> Any:
        """``nvml.<fn_name>(*args)``; ``None`` when unsupported, :class:`GpuLost` when the GPU is gone."""
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:  # an older binding without this function
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in self._lost:
                raise GpuLost(f"{fn_name}: {exc}") from None
            if code not in self._quiet and reading is not None:
                reading.errors[name] = str(exc)
            return None

    def count(self) -> int:
        return int(self.nvml.nvmlDeviceGetCount())

    def handle(self, index: int) -> Any:
        return self.call(None, "handle", "nvmlDeviceGetHandleByIndex", index)

    def read(self, index: int, handle: Any) -> GpuReading:
        r = GpuReading(index=index)
        try:
            self._read_into(r, handle)
        except GpuLost as lost:
            r.lost = lost.error
        return r

    def _read_into(self, r: GpuReading, h: Any) -> None:
        n, c = self.nvml, self.call
        uuid = c(r, "uuid", "nvmlDeviceGetUUID", h)
        r.uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        util = c(r, "util", "nvmlDeviceGetUtilizationRates", h)
        if util is not None:
            r.util, r.mem_util = int(util.gpu), int(util.memory)
        mem = c(r, "mem", "nvmlDeviceGetMemoryInfo", h)
        if mem is not None:
            r.mem_used_bytes, r.mem_total_bytes = int(mem.used), int(mem.total)
        r.temp_c = c(r, "temp_c", "nvmlDeviceGetTemperature", h, n.NVML_TEMPERATURE_GPU)
        r.power_mw = c(r, "power", "nvmlDeviceGetPowerUsage", h)
        r.power_limit_mw = c(r, "power_limit", "nvmlDeviceGetEnforcedPowerLimit", h)
        r.sm_clock_mhz = c(r, "sm_clock", "nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_SM)
        r.mem_clock_mhz = c(r, "mem_clock", "nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_MEM)
        r.sm_clock_max_mhz = c(r, "sm_clock_max", "nvmlDeviceGetMaxClockInfo", h, n.NVML_CLOCK_SM)
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
        r.remapped_rows = tuple(int(x) for x in rows) if rows is not None else None
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
        totals: dict[str, int] | None = None
        for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 0)):
            state = self.call(None, "nvlink", "nvmlDeviceGetNvLinkState", h, link)
            if state is None:
                continue  # no such link on this GPU (or no NVLink at all)
            if totals is None:
                totals = {name: 0 for name in counters}
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


def open_nvml(nvml: Any = None) -> Any:
    """``pynvml`` initialised, or :class:`NvmlUnavailable` with a one-line reason."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            raise NvmlUnavailable("NVML not available: the nvidia-ml-py package is not installed") from None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        missing = getattr(exc, "value", None) in _codes(nvml, _MISSING_CODES)
        why = "no NVIDIA driver or GPU on this node" if missing else "NVML failed to start"
        raise NvmlUnavailable(f"NVML not available ({why}): {exc}") from None
    except OSError as exc:
        raise NvmlUnavailable(f"NVML not available: {exc}") from None
    return nvml


class NvmlSampler:
    """Agent source: one `gpu`/`sample` per interval for the whole node; Xid events in a second thread."""

    name = "nvml"

    def __init__(self, *, job: str, node: str, interval_s: float, publish: Callable[[Envelope], Any],
                 nvml: Any = None, xid_events: bool = True):
        self.job = job
        self.node = node
        self.interval_s = interval_s
        self.publish = publish
        self.nvml_module = nvml
        self.xid_events = xid_events
        self.lost: set[int] = set()
        self.samples = 0

    def sample_once(self, reader: NvmlReader) -> list[Envelope]:
        readings = []
        for index in range(reader.count()):
            try:
                handle = reader.handle(index)
            except GpuLost as lost:
                readings.append(GpuReading(index=index, lost=lost.error))
                continue
            if handle is None:
                continue
            readings.append(reader.read(index, handle))
        events = []
        for event in sample_events(readings, job=self.job, node=self.node, interval_s=self.interval_s):
            if event.kind == "lost":
                # Once per GPU: a lost GPU stays lost, and a repeat every second is noise.
                if event.data["gpu"] in self.lost:
                    continue
                self.lost.add(event.data["gpu"])
                log.error("GPU %s lost: %s", event.data["gpu"], event.data["error"])
            events.append(event)
        self.samples += 1
        return events

    def run(self, stop: threading.Event) -> None:
        nvml = open_nvml(self.nvml_module)
        reader = NvmlReader(nvml)
        log.info("NVML: %d GPU(s)", reader.count())
        watcher = None
        if self.xid_events:
            watcher = threading.Thread(target=self._watch_xids, args=(reader, stop), name="nvml-xid", daemon=True)
            watcher.start()
        try:
            due = time.monotonic()
            while not stop.is_set():
                for event in self.sample_once(reader):
                    self.publish(event)
                due += self.interval_s
                now = time.monotonic()
                due = max(due, now)
                if stop.wait(due - now):
                    break
        finally:
            if watcher is not None:
                watcher.join(2.0)
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError:
                pass

    def _watch_xids(self, reader: NvmlReader, stop: threading.Event) -> None:
        """NVML's event API: blocks in nvmlEventSetWait (with a timeout, to notice ``stop``)."""
        nvml = reader.nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except (nvml.NVMLError, AttributeError) as exc:
            log.info("NVML Xid events not available: %s", exc)
            return
        registered = 0
        for index in range(reader.count()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, event_set)
                registered += 1
            except nvml.NVMLError as exc:
                log.info("GPU %d: no Xid events (%s)", index, exc)
        timeout = getattr(nvml, "NVML_ERROR_TIMEOUT", None)
        try:
            while registered and not stop.is_set():
                try:
                    data = nvml.nvmlEventSetWait_v2(event_set, 500)
                except nvml.NVMLError as exc:
                    if getattr(exc, "value", None) == timeout:
                        continue
                    log.warning("NVML event wait failed: %s; Xid events stop", exc)
                    return
                if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
                    continue
                try:
                    index = int(nvml.nvmlDeviceGetIndex(data.device))
                except nvml.NVMLError:
                    index = None
                event = xid_event(index, int(data.eventData), job=self.job, node=self.node)
                log.warning("NVML Xid %d on GPU %s", event.data["xid"], index)
                self.publish(event)
        finally:
            try:
                nvml.nvmlEventSetFree(event_set)
            except nvml.NVMLError:
                pass
