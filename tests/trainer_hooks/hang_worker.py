"""A torchrun worker that hangs when told: gloo all_reduce steps on CPU with the trainer hook from
the environment `faultlens run` sets; once the file hang-RANK appears in --control, that rank stops
before its next collective (sleeping in Python, as a rank stuck on a lock or a dead data loader
does) and every other rank waits in the all_reduce. Every 10 steps a rank writes its step to
step-RANK there."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from faultlens.trainer_hooks.hook import TrainerHook


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--control", type=Path, required=True)
    args = p.parse_args()
    # The evict finds both ranks stuck (one sleeping, one in the all_reduce): no step boundary comes,
    # and the default 10 s of waiting for one only delayed the exit (EVICTED either way).
    hook = TrainerHook.from_env(state_dir=args.control, exit_grace_s=2.0)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    hook.wait_ready()
    dist.barrier()
    try:
        for step in range(1, 10**9):
            while (args.control / f"hang-{rank}").exists():
                time.sleep(0.5)
            dist.all_reduce(torch.ones(4))
            time.sleep(0.05)
            hook.step(loss=1.0 / step, step=step)
            if step % 10 == 0:
                (args.control / f"step-{rank}").write_text(str(step))  # the test's view of progress
    finally:
        hook.close()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
