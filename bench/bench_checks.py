"""What a round of stop-time checks costs on this machine (no broker).

    .venv/bin/python -m bench.bench_checks [--rounds 3] [--size 512] [--world 2]

Prints one JSON line per check per round (``name``, ``passed``, ``skipped``, ``duration_s``) and
a last line with each check's median duration and the median whole round: the floor under the
remediation consumer's ``--checks-wait``. Without a GPU, gpu_health is skipped and the compute
and collective checks run on the CPU (gloo).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from faultlens.collectors.checks.compute import check_compute, compute_devices
from faultlens.collectors.checks.suite import ChecksConfig, run_checks, suite, timeouts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--size", type=int, default=512, help="matrix size of the compute check")
    p.add_argument("--world", type=int, default=None, help="ranks of the collective (default: GPUs, or 2)")
    args = p.parse_args(argv)
    per: dict[str, list[float]] = {}
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        config = ChecksConfig(paths=(tmp,), min_free_gb=0.001, collective_world=args.world)
        checks = suite(config)
        checks["compute"] = lambda: check_compute(compute_devices(), size=args.size)
        for r in range(args.rounds):
            start = time.monotonic()
            for res in run_checks(checks, config.timeout_s, limits=timeouts(config)):
                per.setdefault(res.name, []).append(res.duration_s)
                print(json.dumps({"round": r, "name": res.name, "passed": res.passed, "skipped": res.skipped,
                                  "duration_s": round(res.duration_s, 3), "detail": res.detail[:120]}), flush=True)
            rounds.append(time.monotonic() - start)
    print(json.dumps({"summary": True, "rounds": args.rounds,
                      "median_s": {k: round(statistics.median(v), 3) for k, v in per.items()},
                      "round_median_s": round(statistics.median(rounds), 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
