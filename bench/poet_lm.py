"""The bench's language model and its data, both generated here (nothing is downloaded).

The "language" is an order-2 Markov chain over a small vocabulary whose next-token laws are
drawn from a sparse Dirichlet: it has structure a transformer must learn (two tokens of
context, attention to find them) and a known floor, the chain's own cross-entropy, which the
bench prints beside the losses so they can be read against what is learnable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Corpus:
    train: torch.Tensor  # (sequences, length + 1) token ids
    held_out: torch.Tensor
    floor: float  # the generating chain's cross-entropy on the held-out tokens, nats per token
    vocab: int


def markov_corpus(vocab: int = 16, length: int = 64, sequences: int = 4096, held_out: int = 256,
                  alpha: float = 0.1, seed: int = 1234) -> Corpus:
    rng = np.random.default_rng(seed)
    law = rng.dirichlet(np.full(vocab, alpha), size=(vocab, vocab))  # law[a, b] = P(next | a, b)
    cdf = np.cumsum(law, axis=-1)
    total = sequences + held_out
    tokens = np.empty((total, length + 1), dtype=np.int64)
    tokens[:, :2] = rng.integers(0, vocab, size=(total, 2))
    for t in range(2, length + 1):
        u = rng.random((total, 1))
        row = cdf[tokens[:, t - 2], tokens[:, t - 1]]
        tokens[:, t] = np.minimum((row < u).sum(axis=1), vocab - 1)
    test = tokens[sequences:]
    # the first two tokens of a sequence are uniform, the rest follow the chain
    p = law[test[:, :-2], test[:, 1:-1], test[:, 2:]]
    nll = np.concatenate([np.full(test.shape[0] * 1, np.log(vocab)), -np.log(p).ravel()])
    return Corpus(torch.from_numpy(tokens[:sequences]), torch.from_numpy(test), float(nll.mean()), vocab)


def batch(corpus: Corpus, step: int, seed: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    rows = corpus.train[torch.randint(0, corpus.train.shape[0], (size,), generator=g)]
    return rows[:, :-1], rows[:, 1:]


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(att)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyLM(nn.Module):
    """A pre-norm GPT: token and position embeddings, ``layers`` blocks, an untied head."""

    def __init__(self, vocab: int, length: int, d: int = 64, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(length, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        for m in self.modules():  # GPT-2's initialisation, the AdamW baseline's
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def train_step(model: nn.Module, opt: torch.optim.Optimizer, sched, x: torch.Tensor, y: torch.Tensor,
               poet_config=None, step: int = 0) -> tuple[float, float]:
    """One optimizer step of the bench's LM: (loss, gradient norm before any clipping). With a POET
    config, the step ends with POET's merge check, as the trainer's loop does."""
    loss = lm_loss(model, x, y)
    opt.zero_grad(set_to_none=False)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")).item()
    opt.step()
    sched.step()
    if poet_config is not None:
        from faultlens.trainer_hooks import poet
        poet.after_step(model, opt, step, poet_config)
    return loss.item(), grad_norm
