"""Parser throughput: lines per second of each log parser on a realistic mixed log.

    .venv/bin/python -m bench.bench_parsers [--lines 300000] [--seed 1] [--old DIR]

With --old DIR (a checkout of an older commit, e.g. ``git archive b088223^ | tar -x -C /tmp/old``:
the commit before the rules moved into data), the same lines are also fed to that checkout's
parsers in a subprocess of the same run, and each figure is printed beside the old one
(``old_lines_per_s``, ``ratio``): on a shared machine only a ratio measured in one run means much.

A realistic log is mostly noise: the mix is ~97% ordinary lines (boot messages, NCCL INFO,
step logs) and ~3% faults of every family, multi-line records included. Prints one JSON line per
parser (lines, seconds, lines_per_s, events) and, for the kernel parser, the cost of the same
lines fed through LineEventParser as raw ``line`` events (envelopes in and out).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from faultlens.parsing.registry import LineEventParser, parser_for
from faultlens.events.envelope import Envelope
from bench.testbed import log_samples as S

KERNEL_NOISE = S.KERNEL_BENIGN + [
    "[ 9001.{:06d}] audit: type=1400 audit(1700000000.123:456): apparmor=\"STATUS\" operation=\"profile_load\"",
    "[ 9001.{:06d}] IPv4: martian source 10.0.3.255 from 10.0.3.17, on dev ib0",
    "[ 9001.{:06d}] nvidia-peermem nv_mem_get_pages: get page for va 0x7f00 size 2097152",
    "[ 9001.{:06d}] docker0: port 3(veth12ab) entered forwarding state",
    "[ 9001.{:06d}] EXT4-fs (nvme1n1): re-mounted. Quota mode: none.",
]
KERNEL_FAULTS = [
    [S.XID_13], [S.XID_31_OLD], [S.XID_48], [S.XID_63], [S.XID_94], [S.XID_95], [S.XID_119], [S.XID_145_IGNORE],
    S.FALLEN_MULTILINE, S.SXID_NONFATAL, [S.MLX_LINK_DOWN, S.MLX_LINK_UP], [S.MLX_HEALTH], [S.AER_FATAL, S.AER_FATAL_DETAIL],
    [S.AER_CORRECTED], [S.EDAC_CE], [S.MCE_UNCORRECTED, S.MCE_DUMP], [S.SOFT_LOCKUP], [S.HUNG_TASK], [S.OOM_KILL, S.OOM_SUMMARY],
    [S.SEGV_NCCL], [S.KMSG], [S.JOURNAL_ISO],
]
TRAINER_NOISE = S.TRAINER_BENIGN + [
    "[rank{r}]: 2026-11-22 10:11:12,345 - train - INFO - step {i} | loss 2.{i} | grad_norm 0.8 | tokens/s 152000",
    "gpu-node-17:48213:48213 [{r}] NCCL INFO Channel 01/32 : 0[3] -> 1[3] [send] via NET/IB/0/GDRDMA",
    "gpu-node-17:48213:48213 [{r}] NCCL INFO Connected all rings",
    "[rank{r}]: /usr/lib/python3.11/site-packages/torch/nn/modules/module.py:1511: UserWarning: something deprecated",
]
TRAINER_FAULTS = [
    [S.NCCL_WARN_IB], [S.NCCL_WARN_CUDA], [S.WATCHDOG_OLD], [S.WATCHDOG_NEW, S.LAST_WORK], [S.NCCL_ERROR_LINE], [S.NCCL_REMOTE],
    [S.CONN_RESET], [S.CUDA_ILLEGAL], [S.CUDA_ECC], [S.CUBLAS], [S.NAN_LOSS], [S.NAN_LOSS_2],
    S.TRACEBACK_USER, S.TRACEBACK_CUDA, S.TRACEBACK_LIBRARY,
]


def make_log(noise: list[str], faults: list[list[str]], n: int, rng: random.Random, fault_share: float = 0.03) -> list[str]:
    out: list[str] = []
    i = 0
    while len(out) < n:
        i += 1
        if rng.random() < fault_share:
            out.extend(rng.choice(faults))
        else:
            out.append(rng.choice(noise).format(i % 1000000, r=i % 8, i=i))
    return out[:n]


def measure(source: str, lines: list[str]) -> dict:
    """The best of two passes, each with a fresh parser (the first also pays one-time loads: the
    tables, and the line model at the first line that reaches it), as the old checkout is measured."""
    best = None
    for _ in range(2):
        parser = parser_for(source)
        start = time.perf_counter()
        events = 0
        for line in lines:
            events += len(parser.feed(line))
        events += len(parser.flush())
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    return {"parser": source, "lines": len(lines), "seconds": round(best, 3), "lines_per_s": round(len(lines) / best), "events": events}


def measure_line_events(source: str, lines: list[str]) -> dict:
    raw = [Envelope(ts=1.8e9, job="j", node=f"n{i % 16:03d}", source=source, kind="line", data={"line": line}, id=f"r{i}") for i, line in enumerate(lines)]
    lp = LineEventParser()
    start = time.perf_counter()
    events = sum(len(lp.parse(env)) for env in raw) + len(lp.flush())
    elapsed = time.perf_counter() - start
    return {"parser": f"LineEventParser/{source}", "lines": len(lines), "seconds": round(elapsed, 3), "lines_per_s": round(len(lines) / elapsed), "events": events}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=300_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--old", metavar="DIR", help="an older checkout to measure on the same lines (see the docstring)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    kernel = make_log(KERNEL_NOISE, KERNEL_FAULTS, args.lines, rng)
    trainer = make_log(TRAINER_NOISE, TRAINER_FAULTS, args.lines, rng)
    # With --old, old and new passes alternate (three rounds, the best of each side kept), so a
    # change in the machine's load during the run falls on both.
    old: dict[str, int] = {}
    best: dict[str, dict] = {}
    for _ in range(3 if args.old else 1):
        if args.old:
            for name, value in _old_figures(args.old, kernel, trainer).items():
                old[name] = max(old.get(name, 0), value)
        for source, lines in (("kernel", kernel), ("nccl", trainer)):
            result = measure(source, lines)
            if source not in best or result["lines_per_s"] > best[source]["lines_per_s"]:
                best[source] = result
    for result in (best["kernel"], best["nccl"], measure_line_events("kernel", kernel), measure_line_events("nccl", trainer)):
        before = old.get(result["parser"])
        if before:
            result["old_lines_per_s"] = before
            result["ratio"] = round(result["lines_per_s"] / before, 2)
        print(json.dumps(result), flush=True)
    return 0


# Run inside the old checkout: its own parser_for on the lines we pass, the same loop as measure().
_OLD_SCRIPT = """
import json, sys, time
from parsing.registry import parser_for
out = {}
for source, path in (("kernel", sys.argv[1]), ("nccl", sys.argv[2])):
    lines = open(path, encoding="utf-8").read().split("\\n")
    best = 0
    for _ in range(1):
        parser = parser_for(source)
        start = time.perf_counter()
        for line in lines:
            parser.feed(line)
        parser.flush()
        best = max(best, round(len(lines) / (time.perf_counter() - start)))
    out[source] = best
print(json.dumps(out))
"""


def _old_figures(old_dir: str, kernel: list[str], trainer: list[str]) -> dict[str, int]:
    """lines/s of the old checkout's parsers on the same lines (one pass each), by parser name."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, lines in (("kernel", kernel), ("nccl", trainer)):
            path = Path(tmp) / f"{name}.log"
            path.write_text("\n".join(lines), encoding="utf-8")
            paths.append(str(path))
        env = {**os.environ, "PYTHONPATH": old_dir}
        run = subprocess.run([sys.executable, "-c", _OLD_SCRIPT, *paths], cwd=old_dir, env=env, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise SystemExit(f"the old checkout {old_dir} did not run: {run.stderr.strip()[-500:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    raise SystemExit(main())
