"""POET (trainer_hooks.poet) and the reference trainer's --optimizer poet, on CPU torch, no broker."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.trainer_hooks.torch_lazy import needs_torch
from tests.trainer_hooks.torch_lazy import poet_libs as _libs

if TYPE_CHECKING:
    import torch

pytestmark = needs_torch


def mlp() -> torch.nn.Module:
    torch = _libs()[0]
    torch.manual_seed(1)
    # square, wide and narrow layers, and a width (24) that the block size does not divide
    return torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.Tanh(), torch.nn.Linear(48, 24), torch.nn.Tanh(),
                               torch.nn.Linear(24, 24), torch.nn.Tanh(), torch.nn.Linear(24, 1))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch = _libs()[0]
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 32, generator=g)
    return x, torch.sin(x[:, :3].sum(dim=1, keepdim=True))


@pytest.mark.parametrize("init", ["normalized_gaussian", "uniform_spectrum"])
def test_spectrum_stays_w0s_through_merges_while_the_weights_turn(init):
    torch, poet, rt = _libs()
    model = mlp()
    config = poet.PoetConfig(block_size=16, merge_every=7, init=init)
    layers = poet.reparameterise(model, config, exclude=("6",))
    assert [(layer.b_out, layer.b_in) for layer in layers] == [(16, 16), (12, 16), (12, 12)]
    start = [layer.weight().detach().clone() for layer in layers]
    if init == "uniform_spectrum":
        assert all(torch.allclose(layer.sv0, torch.ones_like(layer.sv0), atol=1e-6) for layer in layers)
    else:  # every neuron a unit vector
        assert all(torch.allclose(layer.weight0.norm(dim=1), torch.ones(layer.out_features), atol=1e-5) for layer in layers)
    opt = poet.make_optimizer(model, "poet", 3e-2)  # a large step: Q grows fast, early merges happen
    merges = 0
    for step in range(1, 71):
        x, y = batch(step)
        rt.train_step(model, opt, x, y)
        for layer in layers:
            r, p = layer.matrices()
            # Cayley-Neumann misses the exact transform by E, ‖E‖ ≤ ‖Q‖^(k+1), so ‖RᵀR − I‖ ≤ 2‖E‖ + ‖E‖²;
            # the early merge keeps ‖Q‖ near 0.3
            e = layer.q_norm() ** (config.neumann_terms + 1)
            bound = 2 * e + e * e + 1e-5
            assert layer.q_norm() <= 0.3 + 3e-2 * 12
            assert (r @ r.T - torch.eye(r.shape[0])).abs().max() < bound
            assert (p.T @ p - torch.eye(p.shape[0])).abs().max() < bound
        merges += poet.after_step(model, opt, step, config)
        if step % config.merge_every == 0:
            for layer in layers:
                assert layer.q_norm() == 0.0 and layer.spectrum_error() < 1e-4
    assert merges > 3 * 10  # scheduled (10 per layer) and early ones
    for layer, w in zip(layers, start, strict=True):
        assert int(layer.merges) >= 10
        # the weights really moved: the check above is not about a model that stood still
        assert (layer.weight().detach() - w).norm() > 0.2 * w.norm()
        assert layer.spectrum_error() < 1e-4


def test_cayley_neumann_approaches_the_exact_transform():
    torch, poet, rt = _libs()
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 16 * 15 // 2, generator=g, dtype=torch.float64)
    Q = poet.skew(q, 16)
    Q = 0.2 * Q / torch.linalg.matrix_norm(Q, ord=2).max()
    exact = poet.cayley(Q, 0)
    eye = torch.eye(16, dtype=torch.float64)
    assert (exact @ exact.transpose(1, 2) - eye).abs().max() < 1e-12
    errors = [float((poet.cayley(Q, k) - exact).abs().max()) for k in (1, 3, 5)]
    assert errors[0] > errors[1] > errors[2] and errors[2] < 0.2 ** 6


def test_the_poet_trainer_learns():
    torch, poet, rt = _libs()
    args = rt.parse_args(["--ckpt-dir", "unused", "--optimizer", "poet", "--lr", "3e-3"])
    model, opt, config = rt.build(args)
    assert isinstance(model[0], poet.PoetLinear) and isinstance(model[2], torch.nn.Linear)
    losses = []
    for step in range(1, 301):
        losses.append(rt.train_step(model, opt, *rt.batch(step, 0))[0])
        poet.after_step(model, opt, step, config)
    first, last = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
    assert last < 0.25 * first, (first, last)
    assert model[0].spectrum_error() < 1e-4


def run(model, opt, config, steps):
    torch, poet, rt = _libs()
    out = []
    for step in steps:
        out.append(rt.train_step(model, opt, *rt.batch(step, 0)))
        poet.after_step(model, opt, step, config)
    return out


def test_a_poet_checkpoint_resumes_to_the_same_losses(tmp_path):
    torch, poet, rt = _libs()
    args = rt.parse_args(["--ckpt-dir", str(tmp_path), "--optimizer", "poet", "--lr", "1e-2", "--poet-merge-every", "10"])
    model, opt, config = rt.build(args)
    whole = run(model, opt, config, range(1, 41))

    model, opt, config = rt.build(args)
    run(model, opt, config, range(1, 26))  # mid merge period: Adam moments and drawn permutations in flight
    torch.save(rt.checkpoint_state(model, opt, 25, "poet"), tmp_path / "step_000025.pt")
    model, opt, config = rt.build(args)
    assert rt.load(tmp_path / "step_000025.pt", model, opt, "poet") == 25
    assert run(model, opt, config, range(26, 41)) == whole[25:]

    with pytest.raises(SystemExit, match="written with --optimizer poet, not adamw"):
        model, opt, _ = rt.build(rt.parse_args(["--ckpt-dir", str(tmp_path), "--optimizer", "adamw"]))
        rt.load(tmp_path / "step_000025.pt", model, opt, "adamw")


def test_bad_configs_are_refused():
    torch, poet, rt = _libs()
    with pytest.raises(ValueError, match="max_q_norm"):
        poet.PoetConfig(max_q_norm=1.5)
    with pytest.raises(ValueError, match="unknown POET init"):
        poet.PoetConfig(init="xavier")
    with pytest.raises(ValueError, match="needs a model reparameterised"):
        poet.make_optimizer(torch.nn.Linear(2, 2), "poet", 1e-3)


def test_a_poet_model_moves_between_devices_and_dtypes():
    torch, poet, rt = _libs()
    # nn.Module.to() goes through Module._apply: a layer method of that name broke `model.to(device)`,
    # which the reference trainer calls for --device (found when the POET broker test ran after it).
    model = mlp()
    layers = poet.reparameterise(model, poet.PoetConfig(block_size=16), exclude=("6",))
    before = [layer.weight().detach().clone() for layer in layers]
    model.to("cpu").to(torch.float64).to(torch.float32)
    assert all(layer.weight0.dtype == torch.float32 for layer in layers)
    assert all(torch.allclose(layer.weight().detach(), w) for layer, w in zip(layers, before, strict=True))
