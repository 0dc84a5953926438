"""Record the POET bench's per-step loss curves as fixtures for the stalled-loss detector.

    PYTHONPATH=. .venv/bin/python -m bench.record_poet_curves [--steps 400] [--out tests/fixtures/loss_curves]

The same model, corpus, batches, warm-up + cosine schedule and optimizers as bench/bench_poet.py
(``one_run``), for the runs whose curves the tests read: AdamW at lr 0.3 (the stalled run of issue
50: loss at chance, ln 16, for all 400 steps), POET at 0.3, and AdamW at 1e-2 and 0.1 (healthy
ones, the second with grad-norm spikes). Each curve is a CSV (step, loss, grad_norm) with the
command and the vocabulary size in its header, so the tests can send ``classes``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from bench.poet_lm import TinyLM, batch, markov_corpus, train_step
from faultlens.trainer_hooks import poet

RUNS = (("adamw", 0.3), ("poet", 0.3), ("adamw", 0.01), ("adamw", 0.1))


def curve(kind: str, lr: float, seed: int, steps: int) -> list[tuple[int, float, float]]:
    corpus = markov_corpus()
    torch.manual_seed(seed)
    model = TinyLM(corpus.vocab, corpus.train.shape[1] - 1, d=64, layers=2)
    config = poet.PoetConfig(block_size=16, merge_every=25, seed=seed)
    if kind == "poet":
        poet.reparameterise(model, config, exclude=("head",))
    opt = poet.make_optimizer(model, kind, lr, weight_decay=0.0)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))))
    rows = []
    for step in range(1, steps + 1):
        x, y = batch(corpus, step, seed, 16)
        loss, grad_norm = train_step(model, opt, sched, x, y, config if kind == "poet" else None, step)
        rows.append((step, loss, grad_norm))
    return rows


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("tests/fixtures/loss_curves"))
    args = p.parse_args()
    torch.set_num_threads(1)
    for kind, lr in RUNS:
        rows = curve(kind, lr, args.seed, args.steps)
        path = args.out / f"poet_bench_{kind}_lr{lr:g}.csv"
        with path.open("w") as f:
            f.write(f"# source: faultlens bench/bench_poet.py model and schedule, {kind} lr {lr:g} seed {args.seed}, "
                    f"{args.steps} steps (warm-up {max(1, args.steps // 20)} steps, cosine to 0.1x)\n")
            f.write("# command: PYTHONPATH=. .venv/bin/python -m bench.record_poet_curves\n")
            f.write("# classes: 16\n")
            f.write("step,loss,grad_norm\n")
            for step, loss, g in rows:
                f.write(f"{step},{loss:.6f},{g:.6f}\n")
        print(path, f"final {rows[-1][1]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
