"""What putting every NVML call under a deadline costs a sample, and how a wedged GPU delays one.

    .venv/bin/python -m bench.bench_nvml_deadline [--gpus 8] [--samples 300] [--real]

Uses the unit tests' fake NVML module (calls cost microseconds, so the difference is the worker
hand-off, not the driver); ``--real`` reads this machine's GPUs through the real driver instead
(then no wedge: nothing can be made to hang; docs/real_gpu.md). Prints one JSON line: wall ms per
sample through NvmlSampler (per-GPU workers, deadline waits) and through direct NvmlReader reads
in one thread, p50 and mean; then the first sample after one GPU's call blocks for good (deadline
+ handle probe) and the samples after it (the stuck GPU skipped).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from bench.testbed.fake_nvml import HangingNvml
from faultlens.collectors.nvml_sampler import NvmlReader, NvmlSampler, NvmlUnavailable, open_nvml


def _ms(xs: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(xs) * 1e3, 3), "mean": round(statistics.fmean(xs) * 1e3, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--samples", type=int, default=300)
    p.add_argument("--deadline", type=float, default=0.5)
    p.add_argument("--real", action="store_true", help="this machine's GPUs through pynvml (--gpus ignored)")
    args = p.parse_args(argv)
    try:
        nvml = open_nvml() if args.real else HangingNvml(n=args.gpus, hang_gpu=-1)  # nothing hangs yet
    except NvmlUnavailable as exc:
        print(f"bench_nvml_deadline: {exc}", file=sys.stderr)
        return 1
    reader = NvmlReader(nvml)
    if args.real:
        args.gpus = reader.count()
    sampler = NvmlSampler(job="bench", node="n", interval_s=1.0, publish=lambda e: None, nvml=nvml,
                          xid_events=False, deadline_s=args.deadline)
    sampler.sample_once(reader)
    workers = []
    for _ in range(args.samples):
        t = time.perf_counter()
        sampler.sample_once(reader)
        workers.append(time.perf_counter() - t)
    direct = []
    for _ in range(args.samples):
        t = time.perf_counter()
        for g in range(args.gpus):
            reader.read(g, reader.handle(g))
        direct.append(time.perf_counter() - t)
    result = {"bench": "nvml_deadline", "gpus": args.gpus, "deadline_s": args.deadline, "real": args.real,
              "sample_ms_workers": _ms(workers), "sample_ms_direct_reads": _ms(direct)}
    if args.real:
        sampler.calls.close()
        print(json.dumps(result))
        return 0
    nvml.hang_gpu = 1
    t = time.perf_counter()
    sampler.sample_once(reader)
    wedged_first = time.perf_counter() - t
    after = []
    for _ in range(20):
        t = time.perf_counter()
        sampler.sample_once(reader)
        after.append(time.perf_counter() - t)
    nvml.release.set()
    print(json.dumps({**result, "first_sample_after_wedge_ms": round(wedged_first * 1e3, 1),
                      "samples_after_wedge_ms": _ms(after)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
