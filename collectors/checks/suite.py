"""The stop-time check suite: which checks run, under which timeout, and the `check`/`result` event."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from faultlens.collectors.checks.collective import check_collective
from faultlens.collectors.checks.compute import check_compute
from faultlens.collectors.checks.gpu_health import check_gpu_health
from faultlens.collectors.checks.host import judge_disk, judge_memory, read_disk, read_memory
from faultlens.collectors.checks.result import CheckResult, run_with_timeout
from faultlens.events.envelope import Envelope

log = logging.getLogger(__name__)

CHECK_NAMES = ("gpu_health", "compute", "collective", "disk", "memory")
# The collective's ranks import torch before they join; on a loaded host that alone can take long
# and says nothing about the GPUs, so it is allowed on top of the check's timeout.
COLLECTIVE_START_S = 60.0


@dataclass(frozen=True)
class ChecksConfig:
    paths: tuple[str, ...] = (".",)  # checkpoint / work folders that must have room and be writable
    min_free_gb: float = 10.0
    min_free_frac: float = 0.02
    min_mem_available_frac: float = 0.10
    timeout_s: float = 60.0  # per check
    nvml: Any = None  # a pynvml-shaped module (tests); None imports pynvml
    compute_devices: tuple[str, ...] | None = None  # None: every CUDA device, else the CPU
    collective_world: int | None = None  # None: one rank per GPU, 2 on the CPU
    collective_start_s: float = COLLECTIVE_START_S  # the collective ranks' allowance to import torch


def suite(config: ChecksConfig) -> dict[str, Callable[[], CheckResult]]:
    """Each check as a thunk; tests replace one to inject a failure."""
    return {
        "gpu_health": lambda: check_gpu_health(config.nvml),
        "compute": lambda: check_compute(config.compute_devices),
        "collective": lambda: check_collective(world=config.collective_world, timeout_s=config.timeout_s,
                                               start_s=config.collective_start_s),
        "disk": lambda: judge_disk([read_disk(p) for p in config.paths], int(config.min_free_gb * 1024 ** 3),
                                   config.min_free_frac),
        "memory": lambda: judge_memory(read_memory(), config.min_mem_available_frac),
    }


def timeouts(config: ChecksConfig) -> dict[str, float]:
    """Each check's outer limit: ``timeout_s``, the collective's start allowance on top."""
    return {**{n: config.timeout_s for n in CHECK_NAMES}, "collective": config.timeout_s + config.collective_start_s + 5.0}


def run_checks(checks: dict[str, Callable[[], CheckResult]], timeout_s: float,
               only: Iterable[str] | None = None, limits: dict[str, float] | None = None) -> list[CheckResult]:
    """The checks in order, each under ``timeout_s`` (or its entry in ``limits``); ``only`` picks
    some (unknown names fail, inconclusive, said so)."""
    wanted = list(only) if only else list(checks)
    results = []
    for name in wanted:
        if name not in checks:
            results.append(CheckResult(name, False, f"unknown check (known: {', '.join(checks)})", inconclusive=True))
            continue
        results.append(run_with_timeout(name, checks[name], (limits or {}).get(name, timeout_s)))
        log.info("check %s: %s (%s)", name, "pass" if results[-1].passed else "FAIL", results[-1].detail)
    return results


def result_event(results: list[CheckResult], *, job: str, node: str, request_id: str, diagnosis_id: str = "",
                 duration_s: float = 0.0, ts: float | None = None) -> Envelope:
    return Envelope(ts=time.time() if ts is None else ts, job=job, node=node, source="check", kind="result", data={
        "request_id": request_id, "diagnosis_id": diagnosis_id, "passed": all(r.passed for r in results),
        "failed": [r.name for r in results if not r.passed], "checks": [r.to_dict() for r in results],
        "duration_s": round(duration_s, 3)})


@dataclass
class CheckRunner:
    """Runs the suite for one command and publishes its one event."""

    job: str
    node: str
    publish: Callable[[Envelope], Any]
    config: ChecksConfig = field(default_factory=ChecksConfig)
    checks: dict[str, Callable[[], CheckResult]] | None = None

    def run(self, request_id: str, diagnosis_id: str = "", only: Iterable[str] | None = None) -> Envelope:
        start = time.monotonic()
        results = run_checks(self.checks or suite(self.config), self.config.timeout_s, only, timeouts(self.config))
        event = result_event(results, job=self.job, node=self.node, request_id=request_id,
                             diagnosis_id=diagnosis_id, duration_s=time.monotonic() - start)
        self.publish(event)
        return event
