"""The Slurm actuator against a real slurmctld: how long the test cluster takes to come up and
how long each operation takes, end to end (scontrol call + the state read back).

    .venv/bin/python -m bench.bench_slurm_actuator [--repeat 10]

Needs slurm-wlm + munge and root (the same private cluster the `slurm` tests start,
bench/testbed/slurm_cluster.py). Prints one JSON line per measurement: ``cluster_start``
(munged + slurmctld + slurmd until the real node is IDLE), then ``take_out``, ``bring_back``,
``requeue`` (a running batch job) with p50/max over the repeats, in seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.testbed.slurm_cluster import GHOST_NODES, REAL_NODE, SlurmCluster, skip_reason
from faultlens.remediation.actuators.base import ActionRequest
from faultlens.remediation.actuators.slurm import SlurmActuator, SlurmConfig


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _line(name: str, samples: list[float], **extra) -> None:
    print(json.dumps({"bench": name, "n": len(samples), "p50_s": round(statistics.median(samples), 4),
                      "max_s": round(max(samples), 4), **extra}), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    reason = skip_reason()
    if reason:
        print(json.dumps({"bench": "slurm_actuator", "skipped": reason}))
        return 0
    with tempfile.TemporaryDirectory(prefix="fl-bench-slurm-") as d:
        cluster = SlurmCluster(Path(d))
        try:
            cluster.start()
            print(json.dumps({"bench": "cluster_start", "s": round(cluster.started_in_s, 3)}), flush=True)
            actuator = SlurmActuator(SlurmConfig(env=cluster.env))
            nodes = (GHOST_NODES[0],)
            out = ActionRequest("take_out", "bench", nodes, "d-bench", "gpu_lost", "bench")
            back = ActionRequest("bring_back", "bench", nodes, "d-bench", "gpu_lost")
            drains, resumes, requeues = [], [], []
            for _ in range(args.repeat):
                drains.append(_timed(lambda: actuator.take_out(out)))
                resumes.append(_timed(lambda: actuator.bring_back(back)))
            _line("take_out", drains, node_state="UNKNOWN (never registered)")
            _line("bring_back", resumes)
            for _ in range(min(args.repeat, 3)):
                job = cluster.submit("sleep 300")
                cluster.wait_for(lambda job=job: cluster.job_field(job, "JobState") == "RUNNING", 30, "the job to run")
                requeues.append(_timed(lambda job=job: actuator.requeue(ActionRequest("requeue", job, (REAL_NODE,)))))
                cluster.run(["scancel", job])
            _line("requeue", requeues)
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
