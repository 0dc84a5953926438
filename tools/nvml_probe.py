"""Print what the NVML sampler reads on this machine, as JSON lines (for checking on a GPU node).

    python -m tools.nvml_probe --seconds 5 [--interval 1] [--no-xid]

One line per `gpu`/`sample` (and `gpu`/`lost`, `gpu`/`xid` events as they come), each the event's
JSON, then a summary line: the fields that read null on every GPU (unsupported by this driver /
GPU), what one sample cost (CPU ms of the process and wall ms of a sample — its calls run on
per-GPU worker threads under a deadline —, NVML calls per sample and per second, by function, with
the time spent in each) and every NVML call that failed, by function
and error. Exits 1 with a
one-line message when there is no NVML.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
from collections import Counter
from typing import Any

from faultlens.collectors import nvml_reader
from faultlens.collectors.nvml_sampler import NvmlReader, NvmlSampler, NvmlUnavailable, open_nvml
from faultlens.events.envelope import Envelope


class CountingNvml:
    """``pynvml`` with every ``nvml*`` call counted (per thread, per function) and its failures kept."""

    def __init__(self, nvml: Any):
        self._nvml = nvml
        self.by_thread: Counter[str] = Counter()  # by thread name (the sampler's workers: "nvml-<gpu>")
        self.by_function: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()
        self.failures: Counter[tuple[str, str]] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._nvml, name)
        if not (name.startswith("nvml") and callable(attr)):
            return attr

        def counted(*args: Any) -> Any:
            self.by_thread[threading.current_thread().name] += 1
            self.by_function[name] += 1
            start = time.perf_counter()
            try:
                return attr(*args)
            except self._nvml.NVMLError as exc:
                self.failures[(name, str(exc))] += 1
                raise
            finally:
                self.seconds[name] += time.perf_counter() - start

        return counted


class SampleCost:
    """CPU and wall time and NVML calls of each `sample_once`: the calls of every thread but the Xid
    event thread's (a sample's calls run on per-GPU workers), the process's CPU time."""

    def __init__(self, counting: CountingNvml):
        self.counting = counting
        self.cpu_ms: list[float] = []
        self.wall_ms: list[float] = []
        self.calls: list[int] = []

    def wrap(self, sample_once: Any) -> Any:
        def timed(reader: NvmlReader) -> list[Envelope]:
            calls0, cpu0, wall0 = self._sample_calls(), time.process_time(), time.perf_counter()
            events = sample_once(reader)
            self.cpu_ms.append((time.process_time() - cpu0) * 1e3)
            self.wall_ms.append((time.perf_counter() - wall0) * 1e3)
            self.calls.append(self._sample_calls() - calls0)
            return events

        return timed

    def _sample_calls(self) -> int:
        return sum(n for name, n in list(self.counting.by_thread.items()) if name != "nvml-xid")

    def summary(self, seconds: float) -> dict[str, Any]:
        if not self.cpu_ms:
            return {}

        def stats(xs: list[float]) -> dict[str, float]:
            return {"mean": round(statistics.fmean(xs), 3), "p50": round(statistics.median(xs), 3),
                    "max": round(max(xs), 3)}

        # The first sample pays for NVML's lazy setup (handles, link discovery): kept apart.
        steady = slice(1, None) if len(self.cpu_ms) > 1 else slice(None)
        return {"first_sample_cpu_ms": round(self.cpu_ms[0], 3), "first_sample_wall_ms": round(self.wall_ms[0], 3),
                "cpu_ms_per_sample": stats(self.cpu_ms[steady]), "wall_ms_per_sample": stats(self.wall_ms[steady]),
                "nvml_calls_per_sample": stats([float(c) for c in self.calls[steady]]),
                "nvml_calls_per_s_all_threads": round(sum(self.counting.by_function.values()) / seconds, 1),
                "by_function": {fn: {"calls": n, "ms": round(self.counting.seconds[fn] * 1e3, 2)}
                                for fn, n in self.counting.by_function.most_common()}}


def main(argv: list[str] | None = None, nvml: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.nvml_probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="how long to sample (default 5)")
    parser.add_argument("--interval", type=float, default=1.0, help="sample interval in seconds (default 1)")
    parser.add_argument("--no-xid", action="store_true", help="do not listen for NVML Xid events")
    parser.add_argument("--quiet", action="store_true", help="print only the summary line")
    parser.add_argument("--no-cache", action="store_true",
                        help="ask every call every sample, unsupported ones and NVLink discovery included "
                             "(what the sampler did before it kept the driver's refusals: to measure the saving)")
    args = parser.parse_args(argv)
    if args.no_cache:
        nvml_reader.REASK_S = -1.0  # read() forgets what it learnt before every reading

    try:
        counting = CountingNvml(open_nvml(nvml))
    except NvmlUnavailable as exc:
        print(f"nvml_probe: {exc}", file=sys.stderr)
        return 1
    nulls: dict[str, bool] = {}
    lock = threading.Lock()

    def publish(event: Envelope) -> None:
        with lock:
            if not args.quiet:
                print(json.dumps(event.to_dict()), flush=True)
            if event.kind == "sample":
                for gpu in event.data["gpus"]:
                    for key, value in gpu.items():
                        nulls[key] = nulls.get(key, True) and value is None

    sampler = NvmlSampler(job="nvml-probe", node=socket.gethostname(), interval_s=args.interval, publish=publish,
                          nvml=counting, xid_events=not args.no_xid)
    cost = SampleCost(counting)
    sampler.sample_once = cost.wrap(sampler.sample_once)  # type: ignore[method-assign]
    stop = threading.Event()
    timer = threading.Timer(args.seconds, stop.set)
    timer.start()
    start = time.monotonic()
    try:
        sampler.run(stop)
    finally:
        timer.cancel()
    seconds = time.monotonic() - start
    failures: dict[str, dict[str, int]] = {}
    for (fn, error), n in sorted(counting.failures.items()):
        failures.setdefault(fn, {})[error] = n
    print(json.dumps({"summary": True, "samples": sampler.samples, "seconds": round(seconds, 2),
                      "lost_gpus": sorted(sampler.lost), "always_null": sorted(k for k, v in nulls.items() if v),
                      "cost": cost.summary(seconds), "failures": failures}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
