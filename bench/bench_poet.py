"""AdamW against POET on a small transformer LM, judged by faultlens's own detectors.

    PYTHONPATH=. python -m bench.bench_poet            # the default sweep (~10 min on 2 busy cores)
    PYTHONPATH=. python -m bench.bench_poet --quick    # a smoke run (~1 min)

Every run publishes its steps through trainer_hooks.hook.TrainerHook (into memory, not a broker:
the events are the ones a trainer sends). Those events then go, in-process, through
diagnosis.rules.training.TrainingRule (the loss-spike / NaN detector: the per-1,000-step rates)
and the whole diagnosis engine (diagnosis.engine.offline.analyze), whose diagnoses the escalation ladder
(remediation.ladder.JobLadder) turns into the rollbacks it would have ordered. The hook stamps
events with the wall clock; the bench restamps step ``s`` at ``s × --step-s`` seconds (default
10 s, an LLM step) so that the folding windows and the ladder's settle time see a job's pace,
not a CPU toy's. Per optimizer and learning rate, over the seeds, it prints the held-out loss,
spikes and NaN losses per 1,000 steps, rollbacks ordered, wall time per step and memory.
"""

from __future__ import annotations

import argparse
import logging
import math
import resource
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.poet_lm import Corpus, TinyLM, batch, lm_loss, markov_corpus, train_step
from bench.testbed.sent_events import SentEvents
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.rules.training import TrainingRule
from faultlens.events.envelope import Envelope
from faultlens.events.topology import Topology
from faultlens.remediation.ladder import JobLadder
from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks import poet
from faultlens.trainer_hooks.hook import TrainerHook

log = logging.getLogger("bench.poet")
NODE = "bench0"


@dataclass(frozen=True)
class Run:
    optimizer: str
    lr: float
    seed: int
    final_loss: float  # held-out, nats per token (nan once diverged)
    loss_spikes: int
    grad_spikes: int
    nan_steps: int
    rollbacks: int
    other_rungs: int  # climbs past rollback: reproductions ordered, or "needs a person"
    step_ms: float
    state_mb: float
    trainable: int
    sigma_growth: float  # largest σ_max(W_end) / σ_max(W_start) over the linear layers (head excluded)


def state_bytes(model: torch.nn.Module, opt: torch.optim.Optimizer) -> int:
    """Parameters, buffers, gradients and optimizer state: what a step keeps between steps."""
    tensors = list(model.parameters()) + list(model.buffers())
    tensors += [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in tensors)


def linear_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for name, m in model.named_modules():
        if name == "head":
            continue
        if isinstance(m, poet.PoetLinear):
            out[name] = m.weight().detach().clone()
        elif isinstance(m, torch.nn.Linear):
            out[name] = m.weight.detach().clone()
    return out


def sigma_max(w: torch.Tensor) -> float:
    return float(torch.linalg.matrix_norm(w.double(), ord=2)) if torch.isfinite(w).all() else math.inf


def judge(events: list[Envelope], step_s: float) -> tuple[Counter, Counter]:
    """(detector findings by what they flagged, ladder decisions by rung) for one run's events."""
    t0 = 1.7e9
    restamped = [Envelope(ts=t0 + e.data["step"] * step_s, job=e.job, node=e.node, source=e.source, kind=e.kind,
                          data=e.data, id=e.id) for e in events]
    # the trainer publishes its topology first (trainer_hooks.reference_trainer does)
    restamped.insert(0, Topology.grid([NODE], 1, 1, 1, 1).to_event(events[0].job, t0))
    found: Counter = Counter()
    rule = TrainingRule()
    for e in restamped:
        for f in rule.observe(e):
            found["nan" if f.fault == "nan_loss" else "grad_spike" if f.detail.startswith("grad_norm") else "loss_spike"] += 1
    ladder = JobLadder(events[0].job)
    rungs: Counter = Counter()
    for d in sorted(analyze(restamped), key=lambda d: d.ts):
        rungs[ladder.decide(d, (NODE,)).rung] += 1
    return found, rungs


def one_run(kind: str, lr: float, seed: int, corpus: Corpus, args: argparse.Namespace) -> Run:
    torch.manual_seed(seed)
    model = TinyLM(corpus.vocab, corpus.train.shape[1] - 1, d=args.width, layers=args.layers)
    if kind == "poet":
        config = poet.PoetConfig(block_size=args.poet_block, merge_every=args.poet_merge_every, seed=seed)
        poet.reparameterise(model, config, exclude=("head",))  # the authors leave the LM head alone
    start = linear_weights(model)
    opt = poet.make_optimizer(model, kind, lr, weight_decay=args.weight_decay)
    warmup = max(1, args.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps)))))
    sent = SentEvents()
    hook = TrainerHook(job=f"poet-bench-{kind}-{lr:g}-{seed}", rank=0, node=NODE, settings=KafkaSettings(),
                       listen=False, producer=sent, flight_recorder=False)
    times = []
    for step in range(1, args.steps + 1):
        t = time.perf_counter()
        x, y = batch(corpus, step, seed, args.batch)
        loss, grad_norm = train_step(model, opt, sched, x, y, config if kind == "poet" else None, step)
        times.append(time.perf_counter() - t)
        hook.step(loss=loss, grad_norm=grad_norm, tokens=x.numel(), compute_s=times[-1], step=step)
    hook.close()
    with torch.no_grad():
        held = corpus.held_out[:128]
        final = float(lm_loss(model, held[:, :-1], held[:, 1:]))
    found, rungs = judge(sent.events, args.step_s)
    end = linear_weights(model)
    growth = max(sigma_max(end[n]) / sigma_max(start[n]) for n in start)
    return Run(kind, lr, seed, final, found["loss_spike"], found["grad_spike"], found["nan"], rungs["rollback"],
               sum(v for r, v in rungs.items() if r not in ("rollback", "same_incident", "record")),
               1000 * statistics.median(times), state_bytes(model, opt) / 2**20,
               sum(p.numel() for p in model.parameters() if p.requires_grad), growth)


def per_k(count: float, steps: int) -> float:
    return 1000.0 * count / steps


def table(runs: list[Run], steps: int, floor: float) -> str:
    head = ("| optimizer | lr | held-out loss (median [min–max]) | diverged | loss spikes /1k | grad spikes /1k "
            "| NaN /1k | rollbacks ordered | other rungs | ms/step | state MB | trainable | σmax growth |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for kind in dict.fromkeys(r.optimizer for r in runs):
        for lr in dict.fromkeys(r.lr for r in runs if r.optimizer == kind):
            rs = [r for r in runs if r.optimizer == kind and r.lr == lr]
            finite = [r.final_loss for r in rs if math.isfinite(r.final_loss)]
            loss = (f"{statistics.median(finite):.3f} [{min(finite):.3f}–{max(finite):.3f}]" if finite else "nan")
            n = len(rs)
            lines.append(
                f"| {kind} | {lr:g} | {loss} | {n - len(finite)}/{n} "
                f"| {per_k(sum(r.loss_spikes for r in rs) / n, steps):.1f} | {per_k(sum(r.grad_spikes for r in rs) / n, steps):.1f} "
                f"| {per_k(sum(r.nan_steps for r in rs) / n, steps):.1f} | {sum(r.rollbacks for r in rs)} "
                f"| {sum(r.other_rungs for r in rs)} | {statistics.median(r.step_ms for r in rs):.1f} "
                f"| {statistics.median(r.state_mb for r in rs):.2f} | {rs[0].trainable} "
                f"| {statistics.median(r.sigma_growth for r in rs):.2f} |")
    lines.append(f"\nfloor (the generating chain's own held-out loss): {floor:.3f} nats/token; "
                 f"{len(runs)} runs of {steps} steps; rollbacks and other rungs are totals over the seeds.")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.bench_poet", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a smoke run: 2 learning rates, 1 seed, 100 steps")
    p.add_argument("--steps", type=int, default=400, help="training steps per run")
    p.add_argument("--lrs", default="1e-3,3e-3,1e-2,3e-2,1e-1,3e-1", help="learning rates, comma-separated (both optimizers)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per optimizer and learning rate")
    p.add_argument("--optimizers", default="adamw,poet", help="comma-separated: adamw, poet")
    p.add_argument("--batch", type=int, default=16, help="sequences per step")
    p.add_argument("--width", type=int, default=64, help="model width")
    p.add_argument("--layers", type=int, default=2, help="transformer blocks")
    p.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay (not on POET's generators)")
    p.add_argument("--poet-block", type=int, default=16, help="POET block size")
    p.add_argument("--poet-merge-every", type=int, default=25, help="POET merge period, steps")
    p.add_argument("--step-s", type=float, default=10.0, help="seconds of event time per step for the detectors")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the bench shares small machines)")
    p.add_argument("--out", type=Path, default=None, help="also write the table to this markdown file")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.seeds, args.lrs = 100, 1, "3e-3,3e-2"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    torch.set_num_threads(args.threads)
    corpus = markov_corpus()
    lrs = [float(x) for x in args.lrs.split(",")]
    runs = []
    began = time.monotonic()
    for kind in args.optimizers.split(","):
        for lr in lrs:
            for seed in range(args.seeds):
                r = one_run(kind, lr, seed, corpus, args)
                runs.append(r)
                print(f"{kind:5s} lr={lr:<6g} seed={seed} loss={r.final_loss:.3f} spikes={r.loss_spikes}+{r.grad_spikes} "
                      f"nan={r.nan_steps} rollbacks={r.rollbacks} {r.step_ms:.1f} ms/step", file=sys.stderr, flush=True)
    text = table(runs, args.steps, corpus.floor)
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    text += f" Whole bench: {time.monotonic() - began:.0f} s, peak RSS {maxrss:.0f} MB, torch threads {args.threads}."
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
