"""The NVML source of the node agent: one `gpu`/`sample` per interval, every NVML call under a deadline.

The calls themselves are :class:`collectors.nvml_reader.NvmlReader`'s; payloads are built by
:mod:`collectors.gpu_sample`; the deadline workers are :mod:`collectors.nvml_deadline`. A GPU
whose handle is gone is reported once as a `gpu`/`lost` event; a call past its deadline once as
`gpu`/`unresponsive`; an NVML that is not there at all (no driver, no library) raises
:class:`NvmlUnavailable` with a one-line message and the agent carries on without this source.
The NVML module is a parameter (default ``pynvml``), so unit tests pass a fake one.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any, Callable

from faultlens.collectors.gpu_sample import GpuReading, responsive_event, sample_events, unresponsive_event
from faultlens.collectors.nvml_deadline import CallTimeout, DeadlineCalls, Stuck, note_call
from faultlens.collectors.nvml_events import watch_xids
from faultlens.collectors.nvml_reader import _MISSING_CODES, REASK_S, GpuLost, NvmlReader, _codes
from faultlens.events.envelope import Envelope

log = logging.getLogger(__name__)

__all__ = ["DEADLINE_S", "REASK_S", "GpuLost", "NvmlReader", "NvmlSampler", "NvmlStuck", "NvmlUnavailable",
           "open_nvml"]

# A call that takes longer than this is stuck: NVML answers in milliseconds (2 ms for the slowest
# call on a real H100, docs/real_gpu.md); seconds leave room for a loaded host, not for a hang.
DEADLINE_S = 10.0
NVML_GONE_CODES = ("NVML_ERROR_GPU_IS_LOST",)
# How long a stop waits for the Xid watcher (its event wait returns every 0.5 s) and, in all, for
# the idle call workers (they end at once): a thread stuck in NVML is not waited for.
XID_JOIN_S = 2.0
CLOSE_JOIN_S = 1.0


class NvmlUnavailable(RuntimeError):
    """No usable NVML on this node (no GPU driver, no library)."""


class NvmlStuck(RuntimeError):
    """NVML itself does not answer (nvmlInit or a node-wide call past its deadline)."""


def open_nvml(nvml: Any = None) -> Any:
    """``pynvml`` initialised, or :class:`NvmlUnavailable` with a one-line reason."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            raise NvmlUnavailable("NVML not available: the nvidia-ml-py package is not installed") from None
        nvml = pynvml
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
        self._watcher: threading.Thread | None = None  # the Xid events' thread, while it runs

    # --- one sample ------------------------------------------------------------------------------
    def sample_once(self, reader: NvmlReader) -> list[Envelope]:
        events: list[Envelope] = []
        count = self._gpu_count(reader, events)
        if count is None:
            return events
        jobs = {index: self.calls.submit(index, functools.partial(self._read_gpu, reader, index))
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
                                   uuid=None if index is None else self._uuids.get(index) or reader.known_uuid(index),
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
        """Sample until ``stop``; whatever way it ends, the threads it started are ended and joined
        (:meth:`_close`), so an agent's stop() leaves none of them behind but one stuck in NVML."""
        try:
            self._run(stop)
        finally:
            self.state = "stopped"
            self._close()

    def _run(self, stop: threading.Event) -> None:
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
        # The watcher has a stop of its own, set however this run ends: after a failure the agent
        # runs the sampler again, and a watcher still running beside the new one sent each Xid twice.
        watcher_stop = threading.Event()
        if self.xid_events:
            self._watcher = threading.Thread(target=self._watch_xids, args=(reader, watcher_stop), name="nvml-xid",
                                             daemon=True)
            self._watcher.start()
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
            watcher_stop.set()
            if self._watcher is not None:
                self._watcher.join(XID_JOIN_S)  # its event wait returns every 0.5 s to look at `stop`
            if not self.calls.is_stuck("node"):
                def shutdown() -> None:
                    note_call("nvmlShutdown")
                    nvml.nvmlShutdown()
                try:
                    self.calls.run("node", shutdown)
                except (CallTimeout, nvml.NVMLError):
                    pass

    def _close(self) -> None:
        """End the call workers (an agent's stop() joins this thread, and with it them). A call
        stuck in the driver cannot be ended: its worker, and an Xid watcher stuck in its event
        wait, are left behind, named in a warning; daemon threads, they end when the call returns
        or with the process, and stop() does not wait for them."""
        left = self.calls.close(CLOSE_JOIN_S)
        if self._watcher is not None and self._watcher.is_alive():
            left.append(self._watcher.name)
        if left:
            log.warning("NVML: %s still in a call at stop; left behind", ", ".join(left))

    def _watch_xids(self, reader: NvmlReader, stop: threading.Event) -> None:
        watch_xids(reader.nvml, reader.count, stop, self.publish, job=self.job, node=self.node)
