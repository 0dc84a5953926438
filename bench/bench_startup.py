"""CLI start-up: wall time of `faultlens --help`, `parse` of a one-line file and `stacks --help`
beside `python -c pass` (the interpreter's own start), best of N fresh processes each.

    .venv/bin/python -m bench.bench_startup [--repeat 7]

The target is under 0.3 s for each: the parser imports only the command it runs (faultlens/cli.py).
Prints one JSON line per command (best_s, median_s, over_python_s) and a last line with the target.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

XID_LINE = "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
TARGET_S = 0.3


def _times(argv: list[str], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - start)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "one.log"
        log.write_text(XID_LINE)
        py = [sys.executable]
        cases = {
            "python -c pass": py + ["-c", "pass"],
            "faultlens --help": py + ["-m", "faultlens", "--help"],
            "faultlens parse ONE_LINE_FILE": py + ["-m", "faultlens", "parse", str(log)],
            "faultlens stacks --help": py + ["-m", "faultlens", "stacks", "--help"],
        }
        base = None
        worst = 0.0
        for name, argv in cases.items():
            t = _times(argv, args.repeat)
            best = min(t)
            base = best if base is None else base
            if name != "python -c pass":
                worst = max(worst, best)
            print(json.dumps({"command": name, "best_s": round(best, 3), "median_s": round(statistics.median(t), 3),
                              "over_python_s": round(best - base, 3)}))
    print(json.dumps({"target_s": TARGET_S, "worst_best_s": round(worst, 3), "met": worst < TARGET_S}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
