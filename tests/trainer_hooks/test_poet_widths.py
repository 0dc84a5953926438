"""POET at any layer width (issue 50): prime and odd widths get a rotation on both sides (uneven,
padded blocks), train, and keep their spectrum; a width of 1 is named in a warning; the early
merge comes before a block's Q passes max_q_norm."""

from __future__ import annotations

import logging

import pytest

from tests.trainer_hooks.torch_lazy import needs_torch, poet_libs

pytestmark = needs_torch


def _train(model, layers, config, steps, lr, inputs, seed=0):
    torch, poet, _ = poet_libs()
    opt = poet.make_optimizer(model, "poet", lr)
    g = torch.Generator().manual_seed(seed)
    target = torch.nn.Linear(inputs, model[-1].out_features)
    for step in range(1, steps + 1):
        x = torch.randn(32, inputs, generator=g)
        with torch.no_grad():
            y = torch.tanh(target(x))
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        poet.after_step(model, opt, step, config)
    return opt


@pytest.mark.parametrize("dim,blocks", [(37, (13, 12, 12)), (17, (9, 8)), (2, (2,)), (3, (3,)), (31, (16, 15)),
                                        (24, (12, 12)), (64, (16, 16, 16, 16)), (22, (11, 11)), (29, (15, 14))])
def test_every_width_of_two_or_more_is_cut_into_blocks_that_cover_it(dim, blocks):
    _, poet, _ = poet_libs()
    layout = poet.BlockLayout.of(dim, 16)
    sizes = tuple(layout.size if i < layout.full else layout.size - 1 for i in range(layout.count))
    assert sizes == blocks and sum(sizes) == dim and min(sizes) >= 2
    assert sorted(layout.slots().tolist()) == sorted(set(layout.slots().tolist())) and len(layout.slots()) == dim


@pytest.mark.parametrize("out_f,in_f", [(17, 37), (37, 17), (13, 29), (5, 3), (16, 37)])
def test_r_and_p_are_orthogonal_and_turn_every_index(out_f, in_f):
    torch, poet, _ = poet_libs()
    torch.manual_seed(0)
    layer = poet.PoetLinear(torch.randn(out_f, in_f), None, poet.PoetConfig(), key="l")
    with torch.no_grad():
        layer.q_out.normal_(std=0.05)
        layer.q_in.normal_(std=0.05)
    r, p = layer.matrices()
    e = layer.q_norm() ** 6
    for m in (r, p):
        eye = torch.eye(m.shape[0])
        assert (m @ m.T - eye).abs().max() < 2 * e + e * e + 1e-5
        # no index is left out: every row of R and P mixes in another index
        assert ((m - torch.diag(torch.diagonal(m))).abs().sum(dim=1) > 1e-4).all()


def test_a_linear_37_to_17_trains_and_keeps_its_spectrum():
    torch, poet, _ = poet_libs()
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(37, 17), torch.nn.Tanh(), torch.nn.Linear(17, 8))
    config = poet.PoetConfig(block_size=16, merge_every=10)
    layers = poet.reparameterise(model, config)
    start = [layer.weight().detach().clone() for layer in layers]
    _train(model, layers, config, 30, 1e-2, inputs=37)
    for layer, w in zip(layers, start, strict=True):
        moved = float((layer.weight().detach() - w).norm() / w.norm())
        assert moved > 0.05, f"{layer}: moved {moved:.3f}"
        assert layer.spectrum_error() < 1e-4


def test_a_model_of_prime_widths_trains_every_layer_without_a_warning(caplog):
    torch, poet, _ = poet_libs()
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(13, 37), torch.nn.Tanh(), torch.nn.Linear(37, 29), torch.nn.Tanh(),
                                torch.nn.Linear(29, 17), torch.nn.Tanh(), torch.nn.Linear(17, 7))
    config = poet.PoetConfig(block_size=16, merge_every=10)
    with caplog.at_level(logging.WARNING, logger="faultlens.trainer_hooks.poet"):
        layers = poet.reparameterise(model, config)
    assert not [r for r in caplog.records if r.name == "faultlens.trainer_hooks.poet"]
    start = [layer.weight().detach().clone() for layer in layers]
    _train(model, layers, config, 40, 1e-2, inputs=13)
    for layer, w in zip(layers, start, strict=True):
        assert float((layer.weight().detach() - w).norm() / w.norm()) > 0.05
        assert layer.spectrum_error() < 1e-4


def test_a_layer_of_width_one_is_named_in_a_warning(caplog):
    torch, poet, _ = poet_libs()
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    with caplog.at_level(logging.WARNING, logger="faultlens.trainer_hooks.poet"):
        layers = poet.reparameterise(model, poet.PoetConfig())
    assert layers[1].unrotated == ("output",) and layers[0].unrotated == ()
    assert [r.getMessage() for r in caplog.records if r.name == "faultlens.trainer_hooks.poet"] == [
        "POET: layer '2' (8 → 1) has no rotation on its output side (width 1): that side of its weight cannot turn"]


def test_the_early_merge_comes_before_q_passes_the_bound(monkeypatch):
    torch, poet, _ = poet_libs()
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(37, 48), torch.nn.Tanh(), torch.nn.Linear(48, 17))
    config = poet.PoetConfig(block_size=16, merge_every=50, max_q_norm=0.3)
    layers = poet.reparameterise(model, config)
    early: list[float] = []
    merge = poet.PoetLinear.merge

    jumps: list[float] = []

    def watched(self, redraw=True):
        if not redraw:
            early.append(self.q_norm())  # the ‖Q‖ an early merge folds into W0
        w = self.weight().detach().clone()  # what the forward pass (Neumann series) had
        merge(self, redraw)
        jumps.append(float((self.weight().detach() - w).abs().max() / w.abs().max()))

    monkeypatch.setattr(poet.PoetLinear, "merge", watched)
    _train(model, layers, config, 60, 1e-1, inputs=37)  # a large rate: one Adam step alone passes the bound
    assert len(early) >= 5
    assert max(early) <= config.max_q_norm, f"merged at ‖Q‖ {max(early):.3f}"
    # a merge moves no weight by more than the series' error at the bound, 2·0.3⁶ of the layer's scale
    assert max(jumps) < 2 * config.max_q_norm ** (config.neumann_terms + 1)
    for layer in layers:
        assert layer.spectrum_error() < 1e-4
