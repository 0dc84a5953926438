"""The framework callbacks' shared rules (trainer_hooks/callback_support.py): no broker, no framework."""

from __future__ import annotations

import pytest

from faultlens.trainer_hooks.callback_support import (
    count_tokens,
    grad_norm,
    make_hook,
    resume_choice,
    resume_from_environment,
    step_loss,
)

OLDEST_FIRST = ["ck-3", "ck-6", "ck-9"]


@pytest.fixture(scope="module")
def torch():
    """torch, imported by the tests that use it: at module level every xdist worker paid ~1 CPU-s to collect this file (issue 47)."""
    return pytest.importorskip("torch")


@pytest.mark.parametrize(("resume", "named", "chosen"), [
    ("latest", None, "ck-9"),
    ("rollback", None, "ck-6"),
    ("rollback", "/elsewhere/ck-1", "/elsewhere/ck-1"),  # the command's own choice wins
    ("latest", "/elsewhere/ck-1", "/elsewhere/ck-1"),
])
def test_resume_choice(resume, named, chosen):
    assert resume_choice(OLDEST_FIRST, resume, named) == chosen


def test_resume_choice_without_enough_checkpoints_starts_afresh():
    assert resume_choice([], "latest", None) is None
    assert resume_choice(["ck-3"], "rollback", None) is None  # nothing before the newest
    assert resume_choice(["ck-3"], "latest", None) == "ck-3"


def test_resume_from_environment_reads_what_faultlens_run_sets():
    assert resume_from_environment(OLDEST_FIRST, {}) == "ck-9"  # a first start: the newest, if any
    assert resume_from_environment(OLDEST_FIRST, {"FAULTLENS_RESUME": "rollback", "FAULTLENS_CHECKPOINT": ""}) == "ck-6"
    assert resume_from_environment(OLDEST_FIRST, {"FAULTLENS_RESUME": "rollback", "FAULTLENS_CHECKPOINT": "x"}) == "x"


def test_count_tokens(torch):
    ids = torch.ones(4, 16, dtype=torch.long)
    mask = torch.ones(4, 16, dtype=torch.long)
    mask[:, 10:] = 0  # padding is not a token trained on
    assert count_tokens({"input_ids": ids, "attention_mask": mask}) == 40
    assert count_tokens({"input_ids": ids}) == 64
    assert count_tokens((torch.zeros(8, 3), torch.zeros(8, 1))) == 8  # samples, for a batch without tokens
    assert count_tokens(torch.zeros(5, 2)) == 5
    assert count_tokens({"x": torch.zeros(7, 2)}) == 7
    assert count_tokens(None) is None and count_tokens([]) is None and count_tokens({}) is None


def test_step_loss_sums_shares_and_averages_whole_losses():
    assert step_loss([0.5, 0.25], shares=True) == 0.75
    assert step_loss([0.5, 0.25], shares=False) == 0.375
    assert step_loss([], shares=False) is None


def test_grad_norm_is_the_norm_of_all_gradients_together(torch):
    a, b, c = (torch.nn.Parameter(torch.zeros(2)) for _ in range(3))
    assert grad_norm([a, b]) is None  # before any backward
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([0.0, 4.0])
    assert grad_norm([a, b, c]) == pytest.approx(5.0)


def test_a_hook_without_a_job_name_says_how_to_give_one(monkeypatch, tmp_path):
    monkeypatch.delenv("FAULTLENS_JOB", raising=False)
    with pytest.raises(ValueError, match="FAULTLENS_JOB"):
        make_hook(rank=0, job=None, node=None, settings=None, keys=None, state_dir=None, checkpoint_dir=tmp_path)


def test_hf_checkpoint_folders_are_ordered_by_step_not_by_name(tmp_path):
    hf = pytest.importorskip("faultlens.trainer_hooks.hf", reason="transformers is not installed")
    for name in ("checkpoint-10", "checkpoint-9", "checkpoint-100", "checkpoint-x", "runs"):
        (tmp_path / name).mkdir()
    (tmp_path / "checkpoint-11").write_text("a file, not a checkpoint")
    assert hf.checkpoint_folders(tmp_path) == [str(tmp_path / f"checkpoint-{n}") for n in (9, 10, 100)]
    assert hf.checkpoint_folders(tmp_path / "absent") == []
