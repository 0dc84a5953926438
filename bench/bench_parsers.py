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

    .venv/bin/python -m bench.bench_parsers --same DIR

checks instead that DIR's parsers give today's events and counters, record for record, on every
line we hold (held_lines: the log corpus but its sealed batches, every line event of the fixtures'
traces, the text logs beside them, the rules' examples, the testbed's samples, 30k lines of each
bench mix), each set fed as one stream to a fresh parser of each source on both sides; it exits
1 and names the sets that differ. DIR is this tree with an earlier matching engine copied in, so
both read the same tables (rules.toml changes under other hands), e.g. the engine before 1a392de:

    mkdir /tmp/ref && tar --exclude=.git --exclude=.venv -cf - . | tar -xf - -C /tmp/ref
    git show 1a392de^:parsing/rules.py > /tmp/ref/parsing/rules.py     # and line.py; rm needles.py;
    # kernel_log._prefilter back to every rule's needles (ccad5be)
"""

from __future__ import annotations

import argparse
import hashlib
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
from faultlens.parsing.line_corpus import sealed
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


FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
# The log corpus's sealed fresh batches (issue 54: collected, then scored once unread on frozen code
# before anyone reads them) are not read here: parsing.line_corpus.OPENED_BATCHES says which are open.


def held_lines(bench_lines: int = 3000) -> dict[str, list[str]]:
    """Every log line we hold, by where it comes from (a file, or a named set), in order: the
    corpus rows (multi-line records whole), the ``line`` events of the fixtures' traces, the text
    logs and stack dumps beside them, the rules' examples and the parsers' test samples, and
    ``bench_lines`` of each of the bench's mixes. Read only to compare what parsers make of them."""
    from faultlens.parsing.rules import shipped

    out: dict[str, list[str]] = {}
    for path in sorted(FIXTURES.rglob("*")):
        rel = path.relative_to(FIXTURES)
        if not path.is_file() or sealed(rel) or path.suffix not in (".jsonl", ".log", ".txt"):
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        if path.suffix != ".jsonl":
            out[str(rel)] = text.splitlines()
            continue
        lines: list[str] = []
        for row in text.splitlines():
            if row.strip() and not row.lstrip().startswith("//"):
                try:
                    _line_values(json.loads(row), lines)
                except ValueError:
                    continue
        if lines:
            out[str(rel)] = lines
    out["rules.examples"] = [e.line for r in shipped() for e in r.examples]
    out["testbed.log_samples"] = [x for v in vars(S).values() for x in (v if isinstance(v, list) else [v]) if isinstance(x, str)]
    rng = random.Random(1)
    out["bench.kernel"] = make_log(KERNEL_NOISE, KERNEL_FAULTS, bench_lines, rng)
    out["bench.trainer"] = make_log(TRAINER_NOISE, TRAINER_FAULTS, bench_lines, rng)
    return out


def _line_values(value: object, into: list[str]) -> None:
    if isinstance(value, dict):
        for key, v in value.items():
            if key == "line" and isinstance(v, str):
                into.append(v)
            elif key == "lines" and isinstance(v, list):
                into.extend(x for x in v if isinstance(x, str))
            else:
                _line_values(v, into)
    elif isinstance(value, list):
        for v in value:
            _line_values(v, into)


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
    ap.add_argument("--same", metavar="DIR", help="check DIR's parsers give today's events on every line we hold (see the docstring)")
    args = ap.parse_args()
    if args.same:
        return same_events(args.same)
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


# The events of every held line set, fed as one stream to a fresh parser of each source, as one
# JSON text per set and source (run in this process and in the other tree's, the same code).
_EVENTS_SCRIPT = """
import json, sys
try:
    from faultlens.parsing.registry import parser_for
except ImportError:
    from parsing.registry import parser_for

def events_of(sets):
    out = {}
    for name, lines in sets.items():
        for source in ("kernel", "nccl"):
            parser = parser_for(source)
            found = [p for i, line in enumerate(lines) for p in parser.feed(line, ts=1.8e9 + i)] + parser.flush()
            out[f"{name} [{source}]"] = json.dumps([[p.kind, p.data, p.ts, p.mono] for p in found] + [parser.stats.as_dict()],
                                                 sort_keys=True, default=repr)
    return out

if __name__ == "__main__":
    print(json.dumps(events_of(json.load(open(sys.argv[1], encoding="utf-8")))))
"""


def same_events(other_dir: str) -> int:
    """0 when ``other_dir``'s parsers give today's events and counters on every held line set."""
    sets = held_lines(bench_lines=30_000)
    scope: dict = {}
    exec(_EVENTS_SCRIPT, scope)
    ours = scope["events_of"](sets)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sets.json"
        path.write_text(json.dumps(sets), encoding="utf-8")
        done = subprocess.run([sys.executable, "-c", _EVENTS_SCRIPT, str(path)], cwd=other_dir, env={**os.environ, "PYTHONPATH": other_dir},
                              capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{other_dir}'s parsers did not run: {done.stderr.strip()[-500:]}")
    theirs = json.loads(done.stdout)
    differ = sorted(k for k in ours if ours[k] != theirs.get(k))
    events = sum(len(json.loads(v)) - 1 for v in ours.values())
    digest = hashlib.sha256("".join(ours[k] for k in sorted(ours)).encode()).hexdigest()[:16]
    print(json.dumps({"line_sets": len(sets), "lines": sum(map(len, sets.values())), "streams": len(ours), "events": events,
                      "differ": differ[:20], "same": not differ, "sha256": digest}))
    return 1 if differ else 0


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
