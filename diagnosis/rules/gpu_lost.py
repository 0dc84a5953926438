"""A lost GPU: fallen off the bus (kernel text) or gone from NVML, confirmed before eviction when
NVML's error does not say the GPU is gone.

A ``gpu``/``sample`` is read as its rows (events.gpu_table), not as its payload Struct: the node
stage's biggest and most frequent message is left undecoded by the payload check's quick way
(events/payloads.py), so decoding it here would be the whole cost it saves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from faultlens.diagnosis.rules.base import Finding, gpu_of, line_of
from faultlens.events.envelope import Envelope
from faultlens.events.payloads import typed
from faultlens.events.payloads_node import GpuLost, KernelGpuLost

log = logging.getLogger(__name__)


# NVML's answer that the GPU itself is gone; any other error (NVML_ERROR_UNKNOWN, a timeout) may be
# a hiccup of the driver call and is retried before the GPU is called lost.
NVML_GONE = ("NVML_ERROR_GPU_IS_LOST",)
# A GPU is lost after this many unreadable samples spanning at least LOST_CONFIRM_S.
LOST_CONFIRM_SAMPLES = 3
LOST_CONFIRM_S = 10.0


def _nvml_said(event: Envelope) -> object:
    """The NVML error a ``gpu``/``lost`` event reported."""
    return typed(event, GpuLost).error


@dataclass(slots=True)
class _Unsure:
    event: Envelope
    unreadable: int = 0
    last_ts: float = 0.0
    evidence: list[str] = field(default_factory=list)


class GpuLostRule:
    """A GPU that fell off the bus (kernel text) or whose NVML handle is gone: evict at once.

    An NVML error that does not say the GPU is gone is confirmed first: the GPU's row must stay
    unreadable over the next samples (LOST_CONFIRM_SAMPLES spanning LOST_CONFIRM_S); a row that
    reads again ends the doubt with a record-only note. A kernel "fallen off the bus" confirms it."""

    sources = frozenset({"kernel", "gpu"})

    def __init__(self) -> None:
        self._unsure: dict[tuple[str, str, str], _Unsure] = {}

    def observe(self, event: Envelope) -> list[Finding]:
        if event.source == "gpu" and event.kind == "sample" and self._unsure:
            return self._retry(event)
        if not ((event.source == "kernel" and event.kind == "gpu_lost") or (event.source == "gpu" and event.kind == "lost")):
            return []
        if event.source == "gpu":
            lost = typed(event, GpuLost)
            gpu, why = gpu_of(lost.gpu, None), lost.error or line_of(event)
        else:
            fell = typed(event, KernelGpuLost)
            gpu, why = gpu_of(None, fell.pci), line_of(event)
        if event.source == "gpu" and not any(code in str(why) for code in NVML_GONE):
            self._unsure.setdefault((event.job, event.node, str(gpu)), _Unsure(event, last_ts=event.ts, evidence=[event.id]))
            return []
        for key in [k for k in self._unsure if k[:2] == (event.job, event.node)]:
            del self._unsure[key]  # the kernel saw it go: one loss, one finding
        return [self._lost(event, gpu, f"GPU {gpu} lost: {why}")]

    @staticmethod
    def _lost(event: Envelope, gpu, detail: str, evidence: tuple[str, ...] | None = None, onset: float | None = None) -> Finding:
        # One entity per node: the kernel names the GPU by PCI address, NVML by index, and one loss
        # seen by both is one diagnosis.
        return Finding(
            job=event.job, ts=event.ts, onset=onset, fault="gpu_lost", action="evict", nodes=(event.node,),
            entity="gpu_lost", evidence=evidence or (event.id,), detail=detail,
        )

    def _retry(self, event: Envelope) -> list[Finding]:
        # A gpu/sample: its rows as they came (the module's docstring says why).
        gpus = event.data.get("gpus")
        if not isinstance(gpus, list):
            return []
        out: list[Finding] = []
        rows = {str(g.get("index")): g for g in gpus if isinstance(g, Mapping)}
        for key in [k for k in self._unsure if k[:2] == (event.job, event.node)]:
            u = self._unsure[key]
            row = rows.get(key[2])
            if row is None:
                continue
            if any(row.get(k) is not None for k in ("util", "temp_c", "power_w", "sm_clock_mhz")):
                del self._unsure[key]
                log.info("%s GPU %s reads again after %s: not lost", event.node, key[2], _nvml_said(u.event))
                out.append(Finding(
                    job=event.job, ts=event.ts, onset=u.event.ts, fault="gpu_lost", action="none", nodes=(event.node,),
                    entity="gpu_lost:transient", evidence=tuple(u.evidence),
                    detail=f"GPU {key[2]}: NVML said {_nvml_said(u.event)!r} once, then read normally: not lost",
                ))
                continue
            u.unreadable += 1
            u.last_ts = event.ts
            if len(u.evidence) < 8:
                u.evidence.append(event.id)
            if u.unreadable >= LOST_CONFIRM_SAMPLES and event.ts - u.event.ts >= LOST_CONFIRM_S:
                del self._unsure[key]
                out.append(self._lost(event, key[2], f"GPU {key[2]} lost: NVML {_nvml_said(u.event)!r}, then "
                                                     f"{u.unreadable} unreadable samples over {event.ts - u.event.ts:.0f}s",
                                      tuple(u.evidence), onset=u.event.ts))
        return out

    def tick(self, now: float) -> list[Finding]:
        return []
