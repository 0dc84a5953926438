"""A torchrun worker for `faultlens run`'s tests: gloo all_reduce steps on CPU, the TrainerHook built
from the environment `faultlens run` sets, a checkpoint every few steps; faults come from files the
test writes in --control (so the test says when, never a clock):

  crash-NODE  the node's first rank raises a CUDA-like RuntimeError at its next step (file removed)
  finish      the job ends after the step every rank sees it in

Prints one JSON line per start and at the end ({"worker": ...}) on stdout.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks.hook import TrainerHook
from faultlens.trainer_hooks.process_exit import leave_without_teardown
from tests.trainer_hooks.worker_line import say as line

CUDA_ERROR = "CUDA error: an illegal memory access was encountered"


def say(**obj) -> None:
    line({"worker": obj.pop("what"), **obj})


def resume_point(ckpt_dir: Path) -> Path | None:
    named = os.environ.get("FAULTLENS_CHECKPOINT")
    if named:
        return Path(named)
    found = sorted(ckpt_dir.glob("step_*.pt"))
    if os.environ.get("FAULTLENS_RESUME") == "rollback":
        return found[-2] if len(found) >= 2 else None
    return found[-1] if found else None


def main() -> int:
    # torch here, not at the top: a test imports CUDA_ERROR from this file, and every xdist worker
    # collecting that test would import torch (~1.5-1.9 CPU-s) for a string.
    import torch
    import torch.distributed as dist

    p = argparse.ArgumentParser()
    p.add_argument("--ckpt-dir", type=Path, required=True)
    p.add_argument("--control", type=Path, required=True)
    p.add_argument("--step-sleep", type=float, default=0.05)
    p.add_argument("--ckpt-every", type=int, default=5)
    args = p.parse_args()
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    job, node = os.environ["FAULTLENS_JOB"], os.environ["FAULTLENS_NODE"]
    attempt = int(os.environ["FAULTLENS_ATTEMPT"])
    dist.init_process_group("gloo")
    target = resume_point(args.ckpt_dir)
    step = int(torch.load(target, weights_only=True)["step"]) if target is not None else 0
    settings = KafkaSettings.load(overrides={"bootstrap": os.environ["FAULTLENS_BOOTSTRAP"],
                                             "client_id": f"worker-{job}-{rank}"})
    hook = TrainerHook(job=job, rank=rank, node=node, settings=settings, state_dir=args.ckpt_dir, exit_grace_s=5.0)
    hook.wait_ready()
    say(what="started", rank=rank, node=node, attempt=attempt, world=world, resumed=step,
        nodes=os.environ["FAULTLENS_NODES"].split(","), resume=os.environ["FAULTLENS_RESUME"])
    dist.barrier()  # every hook listens before the first step
    try:
        while True:
            step += 1
            trigger = args.control / f"crash-{node}"
            if local == 0 and trigger.exists():
                trigger.unlink()
                raise RuntimeError(CUDA_ERROR)
            flag = torch.tensor([1.0, float(rank == 0 and (args.control / "finish").exists())])
            dist.all_reduce(flag)
            if flag[1] > 0:
                break
            if rank == 0 and step % args.ckpt_every == 0:
                path = args.ckpt_dir / f"step_{step:06d}.pt"
                torch.save({"step": step}, path.with_suffix(".tmp"))
                os.replace(path.with_suffix(".tmp"), path)
                hook.checkpoint_saved(step, str(path))
            time.sleep(args.step_sleep)
            hook.step(loss=1.0 / step, grad_norm=1.0, tokens=world, step=step)
    finally:
        hook.close()
    say(what="finished", rank=rank, node=node, step=step)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    leave_without_teardown(main())  # trainer_hooks/process_exit.py: gloo's threads at interpreter exit
