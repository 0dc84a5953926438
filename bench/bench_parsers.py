"""Parser throughput: lines per second of each log parser on a realistic mixed log.

    .venv/bin/python -m bench.bench_parsers [--lines 300000] [--seed 1] [--old DIR]

With --old DIR (a checkout of an older commit, e.g. ``git archive b088223^ | tar -x -C /tmp/old``:
the commit before the rules moved into data), the same lines are also fed to that checkout's
parsers in a process of their own, pass for pass beside today's (``--rounds`` pairs, the order
alternating), and each figure is printed beside the old one (``old_lines_per_s``; ``ratio``, the
median of the pairs' ratios, and ``pair_ratios``): on a shared machine only a ratio measured in one
run, pass beside pass, means much.

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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.testbed import log_samples as S
from faultlens.events.envelope import Envelope
from faultlens.parsing.registry import LineEventParser, parser_for

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


def one_pass(source: str, lines: list[str]) -> tuple[float, int]:
    """(seconds, events) of one pass over ``lines`` with a fresh parser (which pays its one-time
    loads: the tables, and the line model at the first line that reaches it)."""
    parser = parser_for(source)
    start = time.perf_counter()
    events = 0
    for line in lines:
        events += len(parser.feed(line))
    events += len(parser.flush())
    return time.perf_counter() - start, events


def measure(source: str, lines: list[str], passes: int = 2) -> dict:
    """The best of ``passes`` passes."""
    runs = [one_pass(source, lines) for _ in range(passes)]
    best, events = min(runs)
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
    ap.add_argument("--rounds", type=int, default=5, help="with --old: paired passes per parser (default 5)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    kernel = make_log(KERNEL_NOISE, KERNEL_FAULTS, args.lines, rng)
    trainer = make_log(TRAINER_NOISE, TRAINER_FAULTS, args.lines, rng)
    results = compare(args.old, args.rounds, kernel, trainer) if args.old else [measure("kernel", kernel), measure("nccl", trainer)]
    for result in (*results, measure_line_events("kernel", kernel), measure_line_events("nccl", trainer)):
        print(json.dumps(result), flush=True)
    return 0


def compare(old_dir: str, rounds: int, kernel: list[str], trainer: list[str]) -> list[dict]:
    """Today's parsers against the old checkout's, in pairs: each round one pass of each side back
    to back (the order alternating), so a change of the machine's load falls on both sides of a
    pair. ``ratio`` is the median of the pairs' ratios (today's speed over the old one);
    ``lines_per_s`` and ``old_lines_per_s`` each side's best pass."""
    out = []
    with _OldParsers(old_dir, kernel, trainer) as old:
        for source, lines in (("kernel", kernel), ("nccl", trainer)):
            one_pass(source, lines)
            old.one_pass(source)  # both sides warm: tables and model loaded, caches filled
            pairs = []
            for i in range(rounds):
                if i % 2:
                    then = old.one_pass(source)
                    now, events = one_pass(source, lines)
                else:
                    now, events = one_pass(source, lines)
                    then = old.one_pass(source)
                pairs.append((now, then))
            best_now, best_then = min(p[0] for p in pairs), min(p[1] for p in pairs)
            out.append({"parser": source, "lines": len(lines), "seconds": round(best_now, 3), "lines_per_s": round(len(lines) / best_now),
                        "events": events, "old_lines_per_s": round(len(lines) / best_then),
                        "ratio": round(statistics.median(then / now for now, then in pairs), 2),
                        "pair_ratios": [round(then / now, 2) for now, then in pairs]})
    return out


# Run inside the old checkout: its own parser_for, one pass over the named source's lines per
# request on stdin (the same loop as one_pass), answering the seconds it took. A checkout from
# before the one namespace (3926c91) knows only the bare name; a later one refuses it (issue 57).
_OLD_SCRIPT = """
import sys, time
try:
    from faultlens.parsing.registry import parser_for
except ImportError:
    from parsing.registry import parser_for
logs = {"kernel": open(sys.argv[1], encoding="utf-8").read().split("\\n"), "nccl": open(sys.argv[2], encoding="utf-8").read().split("\\n")}
for request in sys.stdin:
    source = request.strip()
    lines = logs[source]
    parser = parser_for(source)
    start = time.perf_counter()
    for line in lines:
        parser.feed(line)
    parser.flush()
    print(time.perf_counter() - start, flush=True)
"""


class _OldParsers:
    """The old checkout's parsers in a process of their own (its modules have our names), kept
    running so each pass is asked for beside one of ours."""

    def __init__(self, old_dir: str, kernel: list[str], trainer: list[str]):
        self._dir = old_dir
        self._tmp = tempfile.TemporaryDirectory()
        self._paths = []
        for name, lines in (("kernel", kernel), ("nccl", trainer)):
            path = Path(self._tmp.name) / f"{name}.log"
            path.write_text("\n".join(lines), encoding="utf-8")
            self._paths.append(str(path))

    def __enter__(self) -> "_OldParsers":
        env = {**os.environ, "PYTHONPATH": self._dir}
        self._proc = subprocess.Popen([sys.executable, "-c", _OLD_SCRIPT, *self._paths], cwd=self._dir, env=env, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return self

    def one_pass(self, source: str) -> float:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(source + "\n")
        self._proc.stdin.flush()
        answer = self._proc.stdout.readline()
        if not answer:
            raise SystemExit(f"the old checkout {self._dir} did not run: {self._proc.stderr.read().strip()[-500:] if self._proc.stderr else ''}")
        return float(answer)

    def __exit__(self, *exc: object) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait()
        self._tmp.cleanup()


if __name__ == "__main__":
    raise SystemExit(main())
