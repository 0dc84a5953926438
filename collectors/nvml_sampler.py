"""The NVML source: every NVML call of the agent lives here; payloads are built by :mod:`collectors.gpu_sample`.

Every call is guarded: a field the driver does not support reads as ``None``; a GPU whose handle
is gone (``NVML_ERROR_GPU_IS_LOST`` / ``NVML_ERROR_UNKNOWN``) is marked lost and reported once as
a `gpu`/`lost` event; an NVML that is not there at all (no driver, no library) raises
:class:`NvmlUnavailable` with a one-line message and the agent carries on without this source.
The NVML module is a parameter (default ``pynvml``), so unit tests pass a fake one.

What a real driver taught (docs/real_gpu.md, H100 80GB HBM3, driver 580.159.04): a GPU without
NVLink answers NOT_SUPPORTED for every one of NVML's 36 link slots, and an H100 for both retired-
page calls (it remaps rows instead); asked every second, those refusals were 39 of 58 calls per
sample. A call the driver refused as unsupported is not asked again for :data:`REASK_S`; the
GPU's handle, UUID, maximum SM clock and NVLink links are read once in that time (the handle
call cost 0.9 ms and the maximum clock 2 ms there, more than all the rest of a sample). Memory
used is NVML's v2 reading, which leaves out the driver's reserved memory (480 MiB on that H100)
as nvidia-smi does.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from collectors.gpu_sample import GpuReading, responsive_event, sample_events, unresponsive_event
from collectors.nvml_events import watch_xids
from collectors.nvml_deadline import CallTimeout, DeadlineCalls, Stuck, note_call
from streams.events import Envelope

log = logging.getLogger(__name__)

_MISSING_CODES = ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_FUNCTION_NOT_FOUND",
                  "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_UNINITIALIZED")
_LOST_CODES = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN")
# A refusal that is a property of the GPU and driver, not of the moment.
_UNSUPPORTED_CODES = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND")
_QUIET_CODES = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NOT_FOUND", "NVML_ERROR_NO_PERMISSION",
                "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NO_DATA")


# A call that takes longer than this is stuck: NVML answers in milliseconds (2 ms for the slowest
# call on a real H100, docs/real_gpu.md); seconds leave room for a loaded host, not for a hang.
DEADLINE_S = 10.0
NVML_GONE_CODES = ("NVML_ERROR_GPU_IS_LOST",)

# Unsupported calls and NVLink links are asked again this often, in case a GPU reset changed them.
REASK_S = 600.0


class NvmlUnavailable(RuntimeError):
    """No usable NVML on this node (no GPU driver, no library)."""


class NvmlStuck(RuntimeError):
    """NVML itself does not answer (nvmlInit or a node-wide call past its deadline)."""


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


def open_nvml(nvml: Any = None) -> Any:
    """``pynvml`` initialised, or :class:`NvmlUnavailable` with a one-line reason."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            raise NvmlUnavailable("NVML not available: the nvidia-ml-py package is not installed") from None
    note_call("nvmlInit")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        missing = getattr(exc, "value", None) in _codes(nvml, _MISSING_CODES)
        why = "no NVIDIA driver or GPU on this node" if missing else "NVML failed to start"
        raise NvmlUnavailable(f"NVML not available ({why}): {exc}") from None
    except OSError as exc:
        raise NvmlUnavailable(f"NVML not available: {exc}") from None
    return nvml


def _probe_handle(nvml: Any, index: int) -> Any:
    """A fresh handle for GPU ``index``, asked right after one of its calls hung (raises NVMLError)."""
    note_call("nvmlDeviceGetHandleByIndex")
    return nvml.nvmlDeviceGetHandleByIndex(index)


class NvmlSampler:
    """Agent source: one `gpu`/`sample` per interval for the whole node; Xid events in a second thread.

    Every NVML call runs on a per-GPU worker under ``deadline_s`` (collectors/nvml_deadline.py):
    a call past it is one `gpu`/`unresponsive` event naming the GPU and the call, the GPU is left
    out of the samples until the call returns (then one `gpu`/`responsive`), and the other GPUs
    are sampled on as before. The sampler's own thread never waits on NVML longer than that."""

    name = "nvml"

    def __init__(self, *, job: str, node: str, interval_s: float, publish: Callable[[Envelope], Any],
                 nvml: Any = None, xid_events: bool = True, deadline_s: float = DEADLINE_S,
                 init_deadline_s: float | None = None):
        self.job = job
        self.node = node
        self.interval_s = interval_s
        self.publish = publish
        self.nvml_module = nvml
        self.xid_events = xid_events
        self.deadline_s = deadline_s
        # Starting NVML without persistence mode wakes every GPU: seconds each, legitimately.
        self.init_deadline_s = init_deadline_s or max(3 * deadline_s, 30.0)
        self.lost: set[int] = set()
        self.samples = 0
        self.calls = DeadlineCalls(deadline_s, on_late_return=self._late_return)
        self._errors_logged: set[tuple[int, str, str]] = set()
        self._last_count: int | None = None  # the GPU count last read (kept while its call is stuck)
        self._uuids: dict[int, str] = {}
        self._started = time.monotonic()
        self.last_sample_end: float | None = None  # monotonic
        self.last_ok_ts: float | None = None  # wall time of the last sample any GPU answered in
        self.state = "starting"

    # --- one sample ------------------------------------------------------------------------------
    def sample_once(self, reader: NvmlReader) -> list[Envelope]:
        events: list[Envelope] = []
        count = self._gpu_count(reader, events)
        if count is None:
            return events
        jobs = {index: self.calls.submit(index, lambda i=index: self._read_gpu(reader, i))
                for index in range(count) if not self.calls.is_stuck(index)}
        given_up = self.calls.wait(list(jobs.values()))
        stuck_now = {s.key for s in given_up}
        readings = []
        for index, job in jobs.items():
            if index in stuck_now:
                continue
            if job.error is not None:
                raise job.error
            if job.result is not None:
                self._log_errors(job.result)
                if job.result.uuid:
                    self._uuids[index] = job.result.uuid
                readings.append(job.result)
        answered = sum(1 for r in readings if r.lost is None)
        for stuck in given_up:
            events.append(self._unresponsive(reader, stuck, answered))
        for event in sample_events(readings, job=self.job, node=self.node, interval_s=self.interval_s):
            if event.kind == "lost":
                # Once per GPU: a lost GPU stays lost, and a repeat every second is noise.
                if event.data["gpu"] in self.lost:
                    continue
                self.lost.add(event.data["gpu"])
                log.error("GPU %s lost: %s", event.data["gpu"], event.data["error"])
            events.append(event)
        if answered:
            self.last_ok_ts = time.time()
        self.samples += 1
        self.last_sample_end = time.monotonic()
        return events

    def _gpu_count(self, reader: NvmlReader, events: list[Envelope]) -> int | None:
        """The GPU count (cached by the reader); its call, when due, under the deadline too."""
        count = reader.known_count()
        if count is not None:
            return count
        if self.calls.is_stuck("node"):
            return self._last_count
        try:
            self._last_count = self.calls.run("node", reader.count)
        except CallTimeout as exc:
            events.append(self._unresponsive(reader, exc.stuck, 0))
        return self._last_count

    @staticmethod
    def _read_gpu(reader: NvmlReader, index: int) -> GpuReading | None:
        try:
            handle = reader.handle(index)
        except GpuLost as lost:
            return GpuReading(index=index, lost=lost.error)
        if handle is None:
            return None
        return reader.read(index, handle)

    def _unresponsive(self, reader: NvmlReader, stuck: Stuck, answered: int) -> Envelope:
        """The event for a call past its deadline; asks a fresh worker whether the GPU's handle is gone."""
        index = stuck.key if isinstance(stuck.key, int) else None
        handle = "unknown"
        probe = ("probe", index)
        if index is not None and not self.calls.is_stuck(probe):
            try:
                self.calls.run(probe, lambda: _probe_handle(reader.nvml, index),
                               deadline_s=min(self.deadline_s, self.interval_s))
                handle = "answers"
            except CallTimeout:
                handle = "unresponsive"
            except reader.nvml.NVMLError as exc:
                handle = "lost" if getattr(exc, "value", None) in _codes(reader.nvml, NVML_GONE_CODES) else "answers"
        event = unresponsive_event(index, stuck.call, deadline_s=self.deadline_s, waited_s=stuck.age(),
                                   handle=handle, others_answered=answered,
                                   uuid=self._uuids.get(index) or (reader.known_uuid(index) if index is not None else None),
                                   job=self.job, node=self.node)
        log.error("GPU %s: NVML %s did not return within %gs (handle %s; %d other GPU(s) answered)",
                  "node-wide" if index is None else index, stuck.call, self.deadline_s, handle, answered)
        return event

    def _late_return(self, stuck: Stuck, took_s: float) -> None:
        """A stuck call came back (on its abandoned worker's thread): say so; it is sampled again."""
        if isinstance(stuck.key, tuple):
            return  # a handle probe: its answer was not waited for
        self.publish(responsive_event(stuck.key if isinstance(stuck.key, int) else None, stuck.call, took_s,
                                      job=self.job, node=self.node))

    def _log_errors(self, reading: GpuReading) -> None:
        """An NVML error that is neither "unsupported" nor "lost" reads as null; said once, not every second."""
        for name, text in reading.errors.items():
            key = (reading.index, name, text)
            if key not in self._errors_logged:
                self._errors_logged.add(key)
                log.warning("GPU %d: NVML error reading %s (reported as null): %s", reading.index, name, text)

    # --- health, for the heartbeat -------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        """What the heartbeat says of this source: lag, last good call, GPUs stuck in a call."""
        now = time.monotonic()
        last = self.last_sample_end if self.last_sample_end is not None else self._started
        stuck = self.calls.stuck()
        return {
            "state": self.state,
            "lag_s": round(max(0.0, now - last - self.interval_s), 3),
            "last_ok_ts": self.last_ok_ts,
            "samples": self.samples,
            "deadline_s": self.deadline_s,
            "unresponsive": {("node" if s.key == "node" else str(s.key)): {"call": s.call, "for_s": round(s.age(now), 1)}
                             for s in stuck.values() if not isinstance(s.key, tuple)},
            "abandoned_calls": self.calls.abandoned,
        }

    # --- life ------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        self.state = "starting"
        if self.calls.is_stuck("node"):
            raise NvmlStuck(f"an earlier NVML call ({self.calls.stuck()['node'].call}) has not returned")
        try:
            nvml = self.calls.run("node", lambda: open_nvml(self.nvml_module), deadline_s=self.init_deadline_s)
        except CallTimeout as exc:
            self.state = "blind"
            raise NvmlStuck(f"nvmlInit did not return within {self.init_deadline_s:g}s") from exc
        except NvmlUnavailable:
            self.state = "off"
            raise
        reader = NvmlReader(nvml)
        log.info("NVML: %d GPU(s), every call under a %gs deadline", self._gpu_count(reader, []) or 0, self.deadline_s)
        self.state = "ok"
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
            self.state = "stopped"
            if watcher is not None:
                watcher.join(2.0)
            if not self.calls.is_stuck("node"):
                try:
                    self.calls.run("node", lambda: (note_call("nvmlShutdown"), nvml.nvmlShutdown()))
                except (CallTimeout, nvml.NVMLError):
                    pass
            self.calls.close()

    def _watch_xids(self, reader: NvmlReader, stop: threading.Event) -> None:
        watch_xids(reader.nvml, reader.count, stop, self.publish, job=self.job, node=self.node)
