"""What-if ETTR engines at scale: the closed form, its interval search, the Monte Carlo.

Prints one JSON line per job size: each engine's time, both ETTRs, the Monte Carlo's 95 % interval
and whether the closed form lies in it, and the band over the assumed inputs (provenance.band) with
its time. The Monte Carlo walks every fault, so its time grows with
GPUs x days x runs; the closed form's does not.

    .venv/bin/python -m bench.bench_ettr [--preset byterobust] [--runs 200] [--gpus 9600 100000 200000]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

from faultlens.history.whatif.closed_form import optimal_interval, project
from faultlens.history.whatif.monte_carlo import simulate
from faultlens.history.whatif.presets import PRESETS
from faultlens.history.whatif.provenance import band


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="byterobust")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--gpus", type=int, nargs="+", default=[9600, 100_000, 200_000])
    args = ap.parse_args()
    for gpus in args.gpus:
        s = replace(PRESETS[args.preset](), gpus=gpus)
        t0 = time.perf_counter()
        tau = optimal_interval(s)
        t1 = time.perf_counter()
        p = project(s, tau)
        t2 = time.perf_counter()
        mc = simulate(s, runs=args.runs, seed=0, interval_s=tau)
        t3 = time.perf_counter()
        b = band(s)
        t4 = time.perf_counter()
        print(json.dumps({
            "preset": args.preset, "gpus": gpus, "days": s.days, "faults": round(p.faults_expected),
            "interval_search_s": round(t1 - t0, 4), "closed_form_s": round(t2 - t1, 5),
            "monte_carlo_s": round(t3 - t2, 3), "band_s": round(t4 - t3, 3), "runs": args.runs,
            "band": [round(b.low, 5), round(b.central, 5), round(b.high, 5)],
            "ettr": round(p.ettr, 5), "ettr_monte_carlo": round(mc.ettr, 5),
            "ettr_ci": [round(x, 5) for x in mc.ci], "agree": mc.ci[0] <= p.ettr <= mc.ci[1],
        }), flush=True)


if __name__ == "__main__":
    main()
