"""What the trainer hook costs a training step (issue 58), at realistic step times.

A "step" here is a sleep of --step-s seconds (the GPU's time; the hook runs beside it on the CPU).
For each step time, the same number of steps runs three ways in this process: bare, with the
hook publishing to the embedded broker, and with the hook and no broker (spooling). Printed per
way: the wall time inside ``hook.step`` (p50 / p99 / max, ms) and the process's CPU seconds per
step over the run (``resource.getrusage``: the training thread, the hook's sender and its command
listener together), less the bare run's. Run: ``.venv/bin/python -m bench.bench_hook``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
import uuid

from faultlens.streams.admin import ensure_topics
from faultlens.streams.broker import EmbeddedBroker, free_port
from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks.hook import TrainerHook


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(steps: int, step_s: float, settings: KafkaSettings | None) -> tuple[list[float], float]:
    """Times inside hook.step (s) and CPU seconds per step."""
    hook = None
    if settings is not None:
        hook = TrainerHook(job=f"bench-hook-{uuid.uuid4().hex[:6]}", rank=0, node="n000", settings=settings, keys=(),
                           state_dir=tempfile.mkdtemp(), flight_recorder=False)
        hook.wait_ready(10)
    inside: list[float] = []
    start = cpu_s()
    for step in range(1, steps + 1):
        time.sleep(step_s)
        if hook is not None:
            t = time.perf_counter()
            hook.step(loss=1.0 / step, grad_norm=1.0, tokens=4096, step=step)
            inside.append(time.perf_counter() - t)
    used = cpu_s() - start
    if hook is not None:
        hook.close()
    return inside, used / steps


def ms(values: list[float], q: float) -> float:
    return 1000 * statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--step-s", type=float, nargs="+", default=[0.1, 0.5])
    args = p.parse_args()
    with EmbeddedBroker() as broker:
        up = KafkaSettings(bootstrap=broker.bootstrap)
        ensure_topics(up)
        down = KafkaSettings(bootstrap=f"127.0.0.1:{free_port()}")
        print(f"{'step s':>7} {'way':>10} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'CPU ms/step':>12} {'over bare':>10}")
        for step_s in args.step_s:
            _, bare = run(args.steps, step_s, None)
            print(f"{step_s:7.2f} {'bare':>10} {'-':>8} {'-':>8} {'-':>8} {1000 * bare:12.3f} {'-':>10}")
            for way, settings in (("broker", up), ("no broker", down)):
                inside, per = run(args.steps, step_s, settings)
                print(f"{step_s:7.2f} {way:>10} {ms(inside, 50):8.3f} {ms(inside, 99):8.3f} {1000 * max(inside):8.3f} "
                      f"{1000 * per:12.3f} {1000 * (per - bare):10.3f}")


if __name__ == "__main__":
    main()
