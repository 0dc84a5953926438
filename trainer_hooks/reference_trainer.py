"""A small torch job that obeys faultlens: data-parallel MLP on gloo (CPU) with fault injection.

``--device cuda`` trains on the rank's GPU (``cuda:LOCAL_RANK``) over NCCL instead: the same job
on real hardware, for captures such as docs/real_gpu.md's py-spy dump of a CUDA trainer.

Run under trainer_hooks.launcher, which sets the torch.distributed variables (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) and the faultlens ones (FAULTLENS_JOB, FAULTLENS_NODE, FAULTLENS_NODES,
FAULTLENS_BOOTSTRAP, FAULTLENS_ATTEMPT, FAULTLENS_RESUME, FAULTLENS_VERIFY_KEY, FAULTLENS_STATE_DIR).

Faults are injected in the first attempt only (``--inject-attempts``), so a restart after the
remedy runs clean, as a real job would after the bad machine or batch is gone — except
``--bad-node``, a broken machine: its ranks fail on every attempt until it leaves the job.

Under a dual-phase reproduction (``FAULTLENS_REPLAY_STEPS`` set by trainer_hooks.launcher) the trainer
runs that many steps from the latest checkpoint, saves no checkpoint and publishes no topology:
a reproduction tests machines, it must not move the job's state.

``--optimizer poet`` trains the hidden layer as W = R·W0·P (trainer_hooks.poet, docs/poet.md):
its singular values stay those of W0, the prevention side of the loss spikes and NaN losses
faultlens detects. ``sgd`` (the default, unchanged) and ``adamw`` train the weights directly.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from faultlens.events.env_number import env_whole
from faultlens.events.topology import Topology
from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks import poet
from faultlens.trainer_hooks.hook import TrainerHook
from faultlens.trainer_hooks.process_exit import leave_without_teardown

log = logging.getLogger("faultlens.trainer")

FEATURES = 32
DEFAULT_LR = {"sgd": 0.01, "adamw": 1e-3, "poet": 1e-3}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m faultlens.trainer_hooks.reference_trainer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--node", default=os.environ.get("FAULTLENS_NODE"),
                   help="node name (default FAULTLENS_NODE); on the command line it lets a node agent's "
                        "--proc-pattern tell the nodes of one machine apart")
    p.add_argument("--steps", type=int, default=200, help="total training steps")
    p.add_argument("--step-sleep", type=float, default=0.1, help="extra seconds per step (stands in for GPU work)")
    p.add_argument("--ckpt-dir", type=Path, required=True, help="checkpoint folder (shared by all ranks)")
    p.add_argument("--ckpt-every", type=int, default=10, help="checkpoint every N steps")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size claimed in the topology")
    p.add_argument("--pp", type=int, default=1, help="pipeline-parallel size claimed in the topology")
    p.add_argument("--pg-timeout", type=float, default=600.0, help="collective timeout, seconds")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu (default: gloo) or cuda (the GPU of LOCAL_RANK, over NCCL; one GPU per rank)")
    p.add_argument("--nan-at", type=int, default=None, help="loss becomes NaN from this step")
    p.add_argument("--hang-rank", type=int, default=None, help="this rank blocks forever ...")
    p.add_argument("--hang-at", type=int, default=None, help="... from this step")
    p.add_argument("--slow-rank", type=int, default=None, help="this rank is slow ...")
    p.add_argument("--slow-s", type=float, default=0.5, help="... by this many extra seconds per step")
    p.add_argument("--crash-rank", type=int, default=None, help="this rank raises ...")
    p.add_argument("--crash-at", type=int, default=None, help="... at this step")
    p.add_argument("--crash-error", default=None, metavar="TEXT",
                   help="... a RuntimeError with this message, as torch raises a CUDA error (e.g. 'CUDA error: "
                        "an illegal memory access was encountered'; default: a plain injected crash)")
    p.add_argument("--inject-attempts", type=int, default=1, help="inject faults in the first N attempts")
    p.add_argument("--bad-node", default=None, help="a broken machine: its ranks raise on every attempt ...")
    p.add_argument("--bad-node-at", type=int, default=1, help="... at this step or the first step after resuming")
    p.add_argument("--optimizer", choices=("sgd", "adamw", "poet"), default="sgd",
                   help="sgd (default) or adamw train the weights; poet trains the hidden layer as R·W0·P "
                        "(orthogonal R, P; W0 fixed) with AdamW on the generators of R and P")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: sgd 0.01, adamw and poet 1e-3)")
    p.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay (never on POET's generators)")
    p.add_argument("--poet-block", type=int, default=16, help="POET: block size of R and P")
    p.add_argument("--poet-merge-every", type=int, default=20, help="POET: merge R, P into W0 every N steps")
    p.add_argument("--poet-neumann", type=int, default=5, help="POET: Neumann terms of the Cayley transform (0: exact)")
    p.add_argument("--poet-init", choices=poet.INITS[:2], default="normalized_gaussian", help="POET: W0's initialisation")
    return p.parse_args(argv)


def stuck_in_all_gather_into_tensor(step: int) -> None:
    """The injected hang: a rank that never returns from a collective (a distinctive py-spy frame)."""
    while True:
        time.sleep(0.5)


def checkpoints(folder: Path) -> list[Path]:
    return sorted(folder.glob("step_*.pt"))


def choose_resume(folder: Path, mode: str) -> Path | None:
    """The checkpoint to load: the last one, or for a rollback the one before it."""
    found = checkpoints(folder)
    if mode == "rollback":
        return found[-2] if len(found) >= 2 else None
    return found[-1] if found else None


def batch(step: int, rank: int, size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(size, FEATURES, generator=g)
    y = x[:, :4].sum(dim=1, keepdim=True)
    return x, y


def build(args: argparse.Namespace) -> tuple[torch.nn.Module, torch.optim.Optimizer, poet.PoetConfig | None]:
    """The model and its optimizer; under POET every layer but the output head is reparameterised
    (as the POET authors leave the LM head alone)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    config = None
    if args.optimizer == "poet":
        config = poet.PoetConfig(block_size=args.poet_block, merge_every=args.poet_merge_every,
                                 neumann_terms=args.poet_neumann, init=args.poet_init)
        poet.reparameterise(model, config, exclude=("2",))
    lr = args.lr if args.lr is not None else DEFAULT_LR[args.optimizer]
    return model, poet.make_optimizer(model, args.optimizer, lr, args.weight_decay), config


def checkpoint_state(model: torch.nn.Module, opt: torch.optim.Optimizer, step: int, optimizer: str) -> dict:
    """What a checkpoint holds (under POET: W0, the generators of R and P, the permutations)."""
    return {"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "optimizer": optimizer}


def load(target: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, optimizer: str) -> int:
    """Restore a checkpoint into ``model`` and ``opt``; the step it was written at."""
    state = torch.load(target, weights_only=True)
    written_by = state.get("optimizer", "sgd")
    if written_by != optimizer:
        raise SystemExit(f"{target} was written with --optimizer {written_by}, not {optimizer}: "
                         "its model state does not fit (POET keeps W0, R and P, not W)")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return int(state["step"])


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               world: int = 1, poison: bool = False) -> tuple[float, float]:
    """One step (gradients averaged over ``world`` ranks when torch.distributed is up); (loss, grad norm)."""
    loss = torch.nn.functional.mse_loss(model(x), y)
    if poison:
        loss = loss * float("nan")
    opt.zero_grad()
    loss.backward()
    if world > 1:
        for p in model.parameters():
            if p.grad is None:  # the loss did not reach it (on every rank alike: the same model)
                continue
            dist.all_reduce(p.grad)
            p.grad /= world
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")).item()
    opt.step()
    return loss.item(), grad_norm


def _join_group(args: argparse.Namespace, rank: int, world: int) -> torch.device:
    """This rank's device, and the process group joined on it (NCCL on a GPU, gloo on the CPU)."""
    device = torch.device(args.device if args.device == "cpu" else f"cuda:{os.environ.get('LOCAL_RANK', '0')}")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        # device_id binds the group to this GPU up front (NCCL would otherwise guess it at the first barrier).
        dist.init_process_group("nccl", rank=rank, world_size=world, timeout=timedelta(seconds=args.pg_timeout),
                                device_id=device)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=args.pg_timeout))
    return device


def _resume(args: argparse.Namespace, model: torch.nn.Module, opt: torch.optim.Optimizer, rank: int,
            attempt: int) -> tuple[int, Path | None]:
    """(the step to go on from, the checkpoint read or None) as FAULTLENS_RESUME says; rank 0 then
    deletes the checkpoints newer than the one read (a rollback's future)."""
    start = 0
    target = choose_resume(args.ckpt_dir, os.environ.get("FAULTLENS_RESUME", "latest"))
    dist.barrier()  # every rank chose its checkpoint before rank 0 prunes the newer ones
    if target is not None:
        start = load(target, model, opt, args.optimizer)
        if rank == 0:
            for newer in checkpoints(args.ckpt_dir):
                if newer > target:
                    newer.unlink(missing_ok=True)
        log.info("resumed from %s (step %d, attempt %d)", target.name, start, attempt)
    return start, target


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=os.environ.get("FAULTLENS_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format=f"%(asctime)s rank{os.environ.get('RANK', '?')} %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.ERROR)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    job, node = os.environ["FAULTLENS_JOB"], args.node
    attempt = env_whole("FAULTLENS_ATTEMPT", 0, on_bad="warn", at_least=0)
    inject = attempt < args.inject_attempts
    reproduction_steps = env_whole("FAULTLENS_REPLAY_STEPS", None, on_bad="warn", at_least=0)
    settings = KafkaSettings.load(overrides={"bootstrap": os.environ["FAULTLENS_BOOTSTRAP"],
                                             "client_id": f"trainer-{job}-{rank}"})
    args.ckpt_dir.mkdir(parents=True, exist_ok=True)

    device = _join_group(args, rank, world)
    model, opt, poet_config = build(args)
    model.to(device)
    start, target = _resume(args, model, opt, rank, attempt)

    def save(step: int) -> None:
        if rank != 0 or reproduction_steps is not None:
            return
        path = args.ckpt_dir / f"step_{step:06d}.pt"
        tmp = path.with_suffix(".tmp")
        torch.save(checkpoint_state(model, opt, step, args.optimizer), tmp)
        os.replace(tmp, path)
        hook.checkpoint_saved(step, str(path))

    # The trainer's word for the stalled-loss diagnosis (diagnosis/rules/loss_stalled.py): a first start trains
    # from build()'s random weights, a resumed one from a checkpoint's.
    hook = TrainerHook(job=job, rank=rank, node=node, settings=settings, state_dir=args.ckpt_dir,
                       on_checkpoint=lambda: save(hook.steps),
                       flops_per_step=6.0 * sum(p.numel() for p in model.parameters()) * 64, peak_flops=1e11,
                       from_scratch=target is None)
    hook.wait_ready()
    if rank == 0 and reproduction_steps is None:
        nodes = os.environ.get("FAULTLENS_NODES", node).split(",")
        per_node = world // len(nodes)
        tp, pp = args.tp, args.pp
        if world % (tp * pp):
            log.warning("world size %d does not fit tp=%d x pp=%d; publishing a pure data-parallel topology", world, tp, pp)
            tp = pp = 1
        hook.publish_topology(Topology.grid(nodes, per_node, tp, pp, world // (tp * pp)))
    dist.barrier()  # every listener is ready before the first step, so no command slips past

    try:
        last = args.steps if reproduction_steps is None else min(args.steps, start + reproduction_steps)
        for step in range(start + 1, last + 1):
            t0 = time.monotonic()
            if node == args.bad_node and step >= args.bad_node_at:
                raise RuntimeError(f"injected fault: broken machine {node} (rank {rank}, step {step})")
            if inject and rank == args.crash_rank and step == args.crash_at:
                raise RuntimeError(args.crash_error or f"injected crash on rank {rank} at step {step}")
            if inject and rank == args.hang_rank and args.hang_at is not None and step >= args.hang_at:
                stuck_in_all_gather_into_tensor(step)
            x, y = (t.to(device) for t in batch(step, rank))
            loss, grad_norm = train_step(model, opt, x, y, world,
                                         poison=inject and args.nan_at is not None and step >= args.nan_at)
            if reproduction_steps is not None and not math.isfinite(loss):
                # A reproduction run shows a NaN by failing: the launcher judges groups by exit codes.
                raise RuntimeError(f"non-finite loss {loss} in a reproduction run (rank {rank}, step {step})")
            if poet_config is not None:
                poet.after_step(model, opt, step, poet_config)  # before the checkpoint: it holds merged W0
            time.sleep(args.step_sleep + (args.slow_s if inject and rank == args.slow_rank else 0.0))
            compute_s = time.monotonic() - t0
            # A diverged model is never a rollback target: checkpoint only finite losses.
            if step % args.ckpt_every == 0 and math.isfinite(loss):
                save(step)
            hook.step(loss=loss, grad_norm=grad_norm, tokens=x.shape[0], compute_s=compute_s, step=step)
        dist.barrier()
    finally:
        hook.close()
    log.info("finished %d steps", args.steps)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    leave_without_teardown(main())  # trainer_hooks/process_exit.py: gloo's threads at interpreter exit
