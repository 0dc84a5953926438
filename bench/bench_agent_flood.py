"""The node agent's kernel log source under a flood: one Xid repeated 100,000 times a second.

    .venv/bin/python -m bench.bench_agent_flood [--rate 100000] [--seconds 10] [--no-baseline]

A writer process (bench/flood_writer.py) appends the flood, with a different line every 0.5 s,
to a file that a LogSource + KernelFileReader follows in a thread of this process, as the agent
does. Prints one JSON line per run (``folded``: the agent as shipped; ``unfolded``: folding off,
for comparison): lines read per second, the follower thread's CPU (share of one core), the
process's peak RSS, events published, folded events, and how late the other lines went out
(p50 / max seconds from write to publish).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from faultlens.collectors.flood_fold import Folder
from faultlens.collectors.kernel_follower import KernelFileReader
from faultlens.collectors.log_source import LogSource, keyed
from faultlens.parsing.registry import parser_for

ROOT = Path(__file__).resolve().parents[1]


def run(rate: float, seconds: float, fold: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "kern.log"
        log.write_text("")
        published: dict[str, float] = {}
        counts = {"events": 0, "folded_events": 0}

        def publish(event) -> None:
            counts["events"] += 1
            counts["folded_events"] += bool(event.data.get("folded"))
            if event.data.get("xid") == 48:
                published[event.data["process"]] = time.time()

        source = LogSource("kernel", lambda: keyed(KernelFileReader(str(log), from_start=True), "kernel"),
                           lambda: parser_for("kernel", None), job="bench", node="n", publish=publish,
                           fold=Folder() if fold else None, fold_lines=fold)
        stop = threading.Event()
        cpu: dict[str, float] = {}

        def follow() -> None:
            r0 = resource.getrusage(resource.RUSAGE_THREAD)
            source.run(stop)
            r1 = resource.getrusage(resource.RUSAGE_THREAD)
            cpu["s"] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)

        proc = psutil.Process()
        rss0 = proc.memory_info().rss
        follower = threading.Thread(target=follow, daemon=True)
        start = time.monotonic()
        follower.start()
        writer = subprocess.Popen([sys.executable, "-m", "bench.flood_writer", str(log), "--rate", str(rate),
                                   "--seconds", str(seconds), "--other-every", "0.5"],
                                  cwd=ROOT, stdout=subprocess.PIPE, text=True)
        peak = rss0
        while writer.poll() is None:
            peak = max(peak, proc.memory_info().rss)
            time.sleep(0.05)
        report = json.loads(writer.stdout.read())
        total = report["flood_lines"] + len(report["others"])
        deadline = time.monotonic() + 120
        while source.stats.lines < total and time.monotonic() < deadline:
            peak = max(peak, proc.memory_info().rss)
            time.sleep(0.05)
        caught_up = time.monotonic()
        stop.set()
        follower.join(30)
        wall = caught_up - start
        delays = [published[name] - t for name, t in report["others"] if name in published]
        return {
            "run": "folded" if fold else "unfolded", "flood_rate": rate, "flood_lines": report["flood_lines"],
            "lines_read": source.stats.lines, "lines_per_s": round(source.stats.lines / wall),
            "follower_cpu_share": round(cpu.get("s", float("nan")) / wall, 3),
            "rss_peak_mb": round(peak / 2**20, 1), "rss_growth_mb": round((peak - rss0) / 2**20, 1),
            "events_published": counts["events"], "folded_events": counts["folded_events"],
            "others_written": len(report["others"]), "others_published": len(delays),
            "other_delay_p50_s": round(statistics.median(delays), 3) if delays else None,
            "other_delay_max_s": round(max(delays), 3) if delays else None,
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=100_000.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--no-baseline", action="store_true", help="skip the run with folding off")
    args = p.parse_args(argv)
    print(json.dumps(run(args.rate, args.seconds, fold=True)), flush=True)
    if not args.no_baseline:
        print(json.dumps(run(args.rate, args.seconds, fold=False)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
