"""NVML's event API (Xid events), in its own thread: a wait that hangs holds up nobody.

The thread blocks in ``nvmlEventSetWait_v2`` with a short timeout (to notice ``stop``); no other
thread ever waits for it (the sampler joins it for two seconds at most on stop), so a driver that
wedges here costs this thread only.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from faultlens.collectors.gpu_sample import xid_event
from faultlens.events.envelope import Envelope

log = logging.getLogger(__name__)


def watch_xids(nvml: Any, count: Callable[[], int], stop: threading.Event, publish: Callable[[Envelope], Any], *,
               job: str, node: str) -> None:
    """NVML's event API: blocks in nvmlEventSetWait (with a timeout, to notice ``stop``)."""
    try:
        event_set = nvml.nvmlEventSetCreate()
    except (nvml.NVMLError, AttributeError) as exc:
        log.info("NVML Xid events not available: %s", exc)
        return
    registered = 0
    gpus = count()
    for index in range(gpus):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, event_set)
            registered += 1
        except nvml.NVMLError as exc:
            log.info("GPU %d: no Xid events (%s)", index, exc)
    # Said once at start: a node whose GPUs refuse registration has no Xid events but its kernel log's.
    log.info("NVML Xid events: watching %d of %d GPU(s)", registered, gpus)
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
                gpu: int | None = int(nvml.nvmlDeviceGetIndex(data.device))
            except nvml.NVMLError:
                gpu = None
            event = xid_event(gpu, int(data.eventData), job=job, node=node)
            log.warning("NVML Xid %d on GPU %s", event.data["xid"], gpu)
            publish(event)
    finally:
        try:
            nvml.nvmlEventSetFree(event_set)
        except nvml.NVMLError:
            pass
