"""POET: linear layers trained as W = R · W0 · P, with W0 fixed and R, P orthogonal.

After Qiu et al. 2025, "Reparameterized LLM Training via Orthogonal Equivalence Transformation"
(arXiv 2506.08001). Orthogonal R and P leave the singular values of W0 untouched, so a weight can
turn but never grow: the spectral blow-up behind many loss spikes and NaN losses has no
parameter to ride on. What this module implements of the paper (docs/poet.md says more):

- W0 from the paper's initialisations: ``normalized_gaussian`` (each neuron's weight vector a
  unit-norm Gaussian direction) or ``uniform_spectrum`` (every singular value 1);
- block-stochastic primitive optimisation: R = Πᵀ·G·Π with G block-diagonal (blocks of
  ``block_size``, or uneven padded blocks for a width no fitting size divides: :class:`BlockLayout`,
  so every index of every width ≥ 2 is rotated) and Π a random permutation, drawn anew at every
  merge, so each merge period trains a different random partition of the indices into blocks;
- Cayley-Neumann parameterisation: each block G = (I + Q)(I + Q + … + Q^k), Q skew-symmetric,
  the truncated Neumann series standing in for (I − Q)⁻¹;
- merge-then-reinitialise every ``merge_every`` steps: W0 ← R·W0·P, Q ← 0 (so R = P = I),
  new permutations, and the optimiser's moments of Q dropped (they described the old blocks).

Two choices of ours, for what faultlens needs (a spectrum that provably stays put):
the merge multiplies by the exact Cayley transform of the same Q, in float64, so the truncation
error (≤ ‖Q‖^(k+1)) never accumulates into W0; and a step that carries a layer's ‖Q‖ past
``max_q_norm`` is cut where it reaches the bound and merged there (its blocks and the optimiser's
moments kept), so no merge folds in a Q where the series and the exact transform part, and the
series stays well inside its radius of convergence: R and P stay orthogonal to 2·‖Q‖^(k+1).
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass
from typing import Iterable

import torch
import torch.nn.functional as F
from torch import nn

INITS = ("normalized_gaussian", "uniform_spectrum", "keep")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoetConfig:
    block_size: int = 16
    merge_every: int = 50
    neumann_terms: int = 5  # 0: the exact Cayley transform (a solve) instead of the series
    init: str = "normalized_gaussian"
    max_q_norm: float = 0.3  # spectral norm of a block's Q that forces an early merge
    seed: int = 0

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.merge_every < 1 or self.neumann_terms < 0:
            raise ValueError(f"POET needs block_size ≥ 1, merge_every ≥ 1, neumann_terms ≥ 0; got {self}")
        if self.init not in INITS:
            raise ValueError(f"unknown POET init {self.init!r}; one of {', '.join(INITS)}")
        if not 0.0 < self.max_q_norm < 1.0:
            raise ValueError(f"max_q_norm must lie in (0, 1) for the Neumann series to converge; got {self.max_q_norm}")


def _generator(*key: object) -> torch.Generator:
    """A generator seeded from ``key``: permutations and inits depend on (seed, layer, merge) only,
    so a run resumed from a checkpoint draws exactly what the uninterrupted run drew."""
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))


def initial_weight(out_features: int, in_features: int, init: str, generator: torch.Generator,
                   keep: torch.Tensor | None = None) -> torch.Tensor:
    """W0 for one layer (float32)."""
    if init == "keep":
        if keep is None:
            raise ValueError("init 'keep' needs the layer's weight")
        return keep.detach().to(torch.float32).clone()
    w = torch.randn(out_features, in_features, generator=generator, dtype=torch.float64)
    if init == "normalized_gaussian":
        w = w / w.norm(dim=1, keepdim=True)
    elif init == "uniform_spectrum":
        u, _, vh = torch.linalg.svd(w, full_matrices=False)
        w = u @ vh
    else:
        raise ValueError(f"unknown POET init {init!r}")
    return w.to(torch.float32)


def block_for(dim: int, block_size: int) -> int:
    """The largest block size ≤ ``block_size`` that divides ``dim`` (1 at worst: no rotation)."""
    return next(b for b in range(min(block_size, dim), 0, -1) if dim % b == 0)


@dataclass(frozen=True)
class BlockLayout:
    """How one side of a layer (``dim`` indices) is cut into rotation blocks.

    Equal blocks of a divisor of ``dim`` when one lies in [block_size / 2, block_size]; otherwise
    (a prime width, 37, or one with only small divisors) ``count`` blocks as even as possible, of
    ``size`` and ``size - 1`` indices: the smaller ones are padded by one index that no generator
    touches (its row and column of Q are held at 0), so its Cayley transform is 1 there and the
    padding never mixes into a real index. Either way G is exactly block-diagonal orthogonal on
    the ``dim`` real indices: no index is left unrotated, the spectrum is kept. Only ``dim`` 1
    has no rotation (an orthogonal 1×1 is ±1)."""

    dim: int
    size: int  # the (largest) block size
    count: int
    full: int  # blocks of ``size``; the other count - full blocks hold size - 1 real indices

    @classmethod
    def of(cls, dim: int, block_size: int) -> "BlockLayout":
        divisor = block_for(dim, block_size)
        if divisor >= max(2, math.ceil(min(block_size, dim) / 2)) or dim < 2:
            return cls(dim, divisor, dim // divisor, dim // divisor)
        count = math.ceil(dim / block_size)
        size = math.ceil(dim / count)
        return cls(dim, size, count, dim - count * (size - 1))

    @property
    def padded(self) -> bool:
        return self.full < self.count

    @property
    def pairs(self) -> int:
        return self.size * (self.size - 1) // 2

    def slots(self) -> torch.Tensor:
        """Where each of the ``dim`` (permuted) indices sits in the ``count × size`` padded layout."""
        return torch.tensor([i * self.size + j for i in range(self.count)
                             for j in range(self.size if i < self.full else self.size - 1)], dtype=torch.int64)

    def mask(self) -> torch.Tensor:
        """1 for the generator entries of real index pairs, 0 for those that touch a padding index."""
        rows, cols = torch.triu_indices(self.size, self.size, 1)
        m = torch.ones(self.count, self.pairs)
        if self.padded:
            m[self.full:, cols == self.size - 1] = 0.0
        return m


def skew(q: torch.Tensor, b: int) -> torch.Tensor:
    """Skew-symmetric (blocks, b, b) matrices from their upper triangles, one row of ``q`` each."""
    rows, cols = torch.triu_indices(b, b, 1)
    out = q.new_zeros(q.shape[0], b, b)
    out[:, rows, cols] = q
    return out - out.transpose(1, 2)


def cayley(Q: torch.Tensor, terms: int) -> torch.Tensor:
    """(I + Q)(I − Q)⁻¹ for skew-symmetric blocks: exact when ``terms`` is 0, else with the
    inverse replaced by I + Q + … + Q^terms (error ≤ ‖Q‖^(terms+1) in the spectral norm)."""
    eye = torch.eye(Q.shape[-1], dtype=Q.dtype, device=Q.device).expand_as(Q)
    if terms == 0:
        # (I + Q)(I − Q)⁻¹ = ((I − Q)⁻ᵀ (I + Q)ᵀ)ᵀ = ((I + Q)⁻¹ (I − Q))ᵀ, as Q is skew
        return torch.linalg.solve(eye + Q, eye - Q).transpose(-1, -2)
    series, power = eye, eye
    for _ in range(terms):
        power = power @ Q
        series = series + power
    return series + Q @ series


def rotate_rows(blocks: torch.Tensor, perm: torch.Tensor, inverse: torch.Tensor, w: torch.Tensor,
                slots: torch.Tensor | None = None) -> torch.Tensor:
    """(Πᵀ·G·Π)·w, with G = blockdiag(blocks) and Π the permutation that picks rows ``perm``;
    ``slots`` places the rows in a padded layout of uneven blocks (:class:`BlockLayout`)."""
    count, b = blocks.shape[0], blocks.shape[-1]
    rows = w[perm]
    if slots is not None:
        rows = rows.new_zeros(count * b, *rows.shape[1:]).index_copy(0, slots, rows)
    turned = (blocks @ rows.reshape(count, b, -1)).reshape(count * b, *w.shape[1:])
    if slots is not None:
        turned = turned[slots]
    return turned[inverse]


class PoetLinear(nn.Module):
    """A linear layer whose weight is R·W0·P (R, P orthogonal; only their generators learn)."""

    # The buffers registered in __init__ (nn.Module's __getattr__ alone types them Tensor | Module).
    weight0: torch.Tensor
    sv0: torch.Tensor
    merges: torch.Tensor
    perm_out: torch.Tensor
    inv_out: torch.Tensor
    perm_in: torch.Tensor
    inv_in: torch.Tensor
    slots_out: torch.Tensor | None  # None: the side's blocks are even, nothing to pad
    slots_in: torch.Tensor | None
    mask_out: torch.Tensor | None
    mask_in: torch.Tensor | None

    def __init__(self, weight0: torch.Tensor, bias: torch.Tensor | None, config: PoetConfig, key: object) -> None:
        super().__init__()
        self.out_features, self.in_features = weight0.shape
        self.config, self.key = config, key
        self.layout_out = BlockLayout.of(self.out_features, config.block_size)
        self.layout_in = BlockLayout.of(self.in_features, config.block_size)
        self.b_out, self.b_in = self.layout_out.size, self.layout_in.size
        # Derived from the shapes: not saved, so checkpoints hold what they always held.
        for side, layout in (("out", self.layout_out), ("in", self.layout_in)):
            self.register_buffer(f"slots_{side}", layout.slots() if layout.padded else None, persistent=False)
            self.register_buffer(f"mask_{side}", layout.mask() if layout.padded else None, persistent=False)
        self.register_buffer("weight0", weight0.to(torch.float32).clone())
        # The singular values W must keep: the spectrum check reads them, nothing trains them.
        self.register_buffer("sv0", torch.linalg.svdvals(weight0.to(torch.float64)))
        self.bias = nn.Parameter(bias.detach().clone()) if bias is not None else None
        self.q_out = nn.Parameter(torch.zeros(self.layout_out.count, self.layout_out.pairs))
        self.q_in = nn.Parameter(torch.zeros(self.layout_in.count, self.layout_in.pairs))
        self.register_buffer("merges", torch.zeros((), dtype=torch.int64))
        for name in ("perm_out", "inv_out", "perm_in", "inv_in"):
            self.register_buffer(name, torch.empty(0, dtype=torch.int64))
        self._draw_permutations()
        # Q as the last optimiser step found it (after_step keeps it; a loaded checkpoint's Q is
        # the Q its run had there): the early merge reads the step from it.
        self._before: tuple[torch.Tensor, torch.Tensor] = (self.q_out.detach().clone(), self.q_in.detach().clone())
        self.register_load_state_dict_post_hook(lambda module, _keys: module.remember_q())

    @torch.no_grad()
    def remember_q(self) -> None:
        self._before = (self.q_out.detach().clone(), self.q_in.detach().clone())

    def _draw_permutations(self) -> None:
        g = _generator(self.config.seed, self.key, int(self.merges))
        self.perm_out = torch.randperm(self.out_features, generator=g)
        self.perm_in = torch.randperm(self.in_features, generator=g)
        self.inv_out, self.inv_in = torch.argsort(self.perm_out), torch.argsort(self.perm_in)

    def _rotated(self, w0: torch.Tensor, g_out: torch.Tensor, g_in: torch.Tensor) -> torch.Tensor:
        w = rotate_rows(g_out, self.perm_out, self.inv_out, w0, self.slots_out)
        # W·P = (Pᵀ·Wᵀ)ᵀ and Pᵀ = Πᵀ·Gᵀ·Π
        return rotate_rows(g_in.transpose(1, 2), self.perm_in, self.inv_in, w.t(), self.slots_in).t()

    def _skews(self, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """Each side's skew-symmetric blocks, padding entries held at 0 (their gradient is 0 too)."""
        q_out, q_in = self.q_out.to(dtype), self.q_in.to(dtype)
        if self.mask_out is not None:
            q_out = q_out * self.mask_out.to(dtype)
        if self.mask_in is not None:
            q_in = q_in * self.mask_in.to(dtype)
        return skew(q_out, self.b_out), skew(q_in, self.b_in)

    def rotations(self, exact: bool = False, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """The blocks of R and P, as the forward pass uses them (or exact, for the merge)."""
        terms = 0 if exact else self.config.neumann_terms
        s_out, s_in = self._skews(dtype)
        return cayley(s_out, terms), cayley(s_in, terms)

    @property
    def unrotated(self) -> tuple[str, ...]:
        """The sides with no rotation at all: only a width of 1 (an orthogonal 1×1 is ±1)."""
        return tuple(side for side, n in (("output", self.out_features), ("input", self.in_features)) if n < 2)

    def weight(self) -> torch.Tensor:
        return self._rotated(self.weight0, *self.rotations())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight(), self.bias)

    def matrices(self) -> tuple[torch.Tensor, torch.Tensor]:
        """R (out × out) and P (in × in) as full matrices: for checks, not for training."""
        g_out, g_in = self.rotations()
        r = rotate_rows(g_out, self.perm_out, self.inv_out, torch.eye(self.out_features), self.slots_out)
        pt = rotate_rows(g_in.transpose(1, 2), self.perm_in, self.inv_in, torch.eye(self.in_features), self.slots_in)
        return r, pt.t()

    @torch.no_grad()
    def q_norm(self) -> float:
        """The largest spectral norm of any block's Q: the Neumann error is at most its (k+1)th power."""
        norms = [torch.linalg.matrix_norm(s, ord=2).max() for s in self._skews() if s.numel()]
        return float(max(norms)) if norms else 0.0

    @torch.no_grad()
    def _norm_at(self, base: tuple[torch.Tensor, torch.Tensor], step: tuple[torch.Tensor, torch.Tensor], t: float) -> float:
        self.q_out.copy_(base[0] + t * step[0])
        self.q_in.copy_(base[1] + t * step[1])
        return self.q_norm()

    @torch.no_grad()
    def merge_at_bound(self, bound: float) -> bool:
        """After an optimiser step that carried ‖Q‖ past ``bound``: cut the step where it reached the
        bound and merge that point, where the Neumann series the forward pass used and the exact
        transform the merge folds in still agree (to 2·bound^(k+1)); the rest of the step, which
        would have turned W where the two part, is dropped (the blocks and the optimiser's moments
        are kept, so the next step goes on the same way). True when it merged."""
        if self.q_norm() <= bound:
            return False
        before = self._before
        step = (self.q_out.detach() - before[0], self.q_in.detach() - before[1])
        lo, hi = 0.0, 1.0  # ‖before + t·step‖ is convex in t and within the bound at 0
        for _ in range(16):  # to 1.5e-5 of the step: well inside the series' error at the bound
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if self._norm_at(before, step, mid) <= bound else (lo, mid)
        self._norm_at(before, step, lo)
        self.merge(redraw=False)
        return True

    @torch.no_grad()
    def merge(self, redraw: bool = True) -> None:
        """W0 ← R·W0·P with the exact rotations, in float64; then Q ← 0 and (``redraw``) new
        permutations. An early merge keeps the blocks, so the optimiser's moments still fit them."""
        merged = self._rotated(self.weight0.to(torch.float64), *self.rotations(exact=True, dtype=torch.float64))
        self.weight0.copy_(merged.to(torch.float32))
        self.q_out.zero_()
        self.q_in.zero_()
        if redraw:
            self.merges += 1
            self._draw_permutations()

    @torch.no_grad()
    def spectrum_error(self) -> float:
        """max |σᵢ(W) − σᵢ(W0 at start)| / σᵢ(W0 at start): 0 for an exactly orthogonal R and P."""
        sv = torch.linalg.svdvals(self.weight().to(torch.float64))
        floor = self.sv0.max() * 1e-6
        return float(((sv - self.sv0).abs() / self.sv0.clamp_min(floor)).max())

    def extra_repr(self) -> str:
        def blocks(layout: BlockLayout) -> str:
            return f"{layout.count}×{layout.size}" + (f" ({layout.count - layout.full} padded)" if layout.padded else "")
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"blocks={blocks(self.layout_out)}/{blocks(self.layout_in)}, bias={self.bias is not None}")


def reparameterise(model: nn.Module, config: PoetConfig, exclude: Iterable[str] = ()) -> list[PoetLinear]:
    """Replace every nn.Linear of ``model`` (but those named in ``exclude``) by a PoetLinear, in place."""
    skip = set(exclude)
    targets = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear) and name not in skip]
    layers = []
    for name, linear in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        w0 = initial_weight(linear.out_features, linear.in_features, config.init,
                            _generator(config.seed, name, "init"), keep=linear.weight)
        layer = PoetLinear(w0, linear.bias, config, key=name)
        if layer.unrotated:
            log.warning("POET: layer %r (%d → %d) has no rotation on its %s side (width 1): that side of its "
                        "weight cannot turn", name, linear.in_features, linear.out_features, " and ".join(layer.unrotated))
        setattr(parent, attr, layer)
        layers.append(layer)
    if not layers:
        raise ValueError("POET found no linear layer to reparameterise")
    return layers


def poet_layers(model: nn.Module) -> list[PoetLinear]:
    return [m for m in model.modules() if isinstance(m, PoetLinear)]


def make_optimizer(model: nn.Module, kind: str, lr: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """``sgd``, ``adamw`` or ``poet`` (AdamW on the generators of R and P, never decayed: Q = 0 is
    the identity, not a small weight, plus AdamW on the rest of the model)."""
    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr)
    if kind == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    if kind != "poet":
        raise ValueError(f"unknown optimizer {kind!r}")
    generators = {id(p) for layer in poet_layers(model) for p in (layer.q_out, layer.q_in)}
    if not generators:
        raise ValueError("optimizer 'poet' needs a model reparameterised by trainer_hooks.poet.reparameterise")
    rest = [p for p in model.parameters() if id(p) not in generators]
    groups = [{"params": [p for p in model.parameters() if id(p) in generators], "weight_decay": 0.0}]
    if rest:
        groups.append({"params": rest, "weight_decay": weight_decay})
    return torch.optim.AdamW(groups, lr=lr)


def after_step(model: nn.Module, opt: torch.optim.Optimizer, step: int, config: PoetConfig) -> int:
    """Merge-then-reinitialise the layers due (every ``merge_every`` steps), and merge early a layer
    whose last step carried a block's Q past ``max_q_norm``, at the point of the step where it
    reached the bound (:meth:`PoetLinear.merge_at_bound`). Returns how many merges were made."""
    merged = 0
    for layer in poet_layers(model):
        if step % config.merge_every == 0:
            layer.merge_at_bound(config.max_q_norm)  # the scheduled merge below folds it in
            layer.merge()
            for p in (layer.q_out, layer.q_in):
                opt.state.pop(p, None)  # Adam's moments belonged to the blocks just redrawn
            merged += 1
        elif layer.merge_at_bound(config.max_q_norm):
            merged += 1
        layer.remember_q()
    return merged
