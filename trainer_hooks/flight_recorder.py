"""torch's Flight Recorder from inside the trainer: turn it on, and dump it bounded for one event.

The recorder numbers every collective per process group and keeps the last
``TORCH_FR_BUFFER_SIZE`` of them; it is off unless that variable is set before the process
groups are created, so the hook sets a default when it starts (a trainer's own setting wins).
On ``capture_stacks`` the hook publishes the dump beside its stack dump (``stack`` /
``recorder_dump``, docs/events.md), read by diagnosis.hang.recorder.

A dump holds a few hundred bytes per entry (and the C++/Python frames of each, when torch
records them): the newest entries are what a hang verdict reads, so frames go first and the
oldest entries next until the text fits ``max_bytes`` (events.flight_recorder.bound, which the
simulated cluster uses too).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping
from types import ModuleType

# The bound and the event's fields are shared with the simulated cluster (simulator.recorder).
from faultlens.events.flight_recorder import MAX_BYTES, BoundedDump, bound

log = logging.getLogger(__name__)

BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
DEFAULT_BUFFER = 2000  # entries per process: a few steps of a large model's collectives


def enable(environ: MutableMapping[str, str] | None = None, size: int = DEFAULT_BUFFER) -> None:
    """Turn the recorder on for process groups created from now on (unless the trainer set it)."""
    (os.environ if environ is None else environ).setdefault(BUFFER_ENV, str(size))


def dump(max_bytes: int = MAX_BYTES) -> BoundedDump | None:
    """This process's recorder dump, or None: torch not in use, no process group, or no recorder."""
    torch = sys.modules.get("torch")  # never import torch into a trainer that does not use it
    if torch is None:
        return None
    try:
        if not torch.distributed.is_available() or not torch.distributed.is_initialized():
            return None
        raw = _raw_dump(torch)
    except Exception as exc:  # an older torch, or a backend without a recorder: nothing to add
        log.debug("no flight recorder dump: %s", exc)
        return None
    return bound(raw.decode() if isinstance(raw, bytes) else raw, max_bytes)


def _raw_dump(torch: ModuleType) -> str | bytes:
    """The recorder of the job's collectives. torch keeps two: NCCL's (``_dump_nccl_trace_json``)
    and the CPU one (``_dump_fr_trace_json``: gloo groups). On torch 2.11 + NCCL the CPU one held
    none of the job's NCCL collectives, only the gloo helper of TORCH_DISTRIBUTED_DEBUG=DETAIL
    (tests/fixtures/real_gpu/gpu40/fr_cpu.json), so an NCCL job is dumped from NCCL's."""
    c10d = torch._C._distributed_c10d
    nccl = getattr(c10d, "_dump_nccl_trace_json", None)
    if nccl is not None and "nccl" in str(torch.distributed.get_backend()).lower():
        return nccl(includeCollectives=True, onlyActive=False)
    return c10d._dump_fr_trace_json()


__all__ = ["BUFFER_ENV", "DEFAULT_BUFFER", "MAX_BYTES", "BoundedDump", "bound", "enable", "dump"]
