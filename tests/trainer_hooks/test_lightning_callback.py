"""faultlens.trainer_hooks.lightning.FaultlensCallback in real Lightning runs on CPU, on the embedded
broker: step telemetry, a commanded checkpoint through Trainer.save_checkpoint, a stop and a
rollback at a step boundary, and a stack capture answered mid-run."""

from __future__ import annotations

import importlib.util
import math
import uuid

import pytest

from faultlens.trainer_hooks.exit_codes import ROLLBACK, STOPPED
from tests.trainer_hooks.callback_script import Script, command, records, steps

# find_spec of a top-level name does not import it; Lightning itself is imported by the `lit` fixture.
pytestmark = [pytest.mark.broker,
              pytest.mark.skipif(importlib.util.find_spec("lightning") is None,
                                 reason="Lightning is not installed (pip install 'faultlens[lightning]')")]


@pytest.fixture(scope="module")
def lit():
    """The model, data and Trainer of these tests (tests/trainer_hooks/lightning_parts.py), imported
    when one of them runs: at module level every xdist worker paid ~1.6 CPU-s to collect this file (issue 47)."""
    from tests.trainer_hooks import lightning_parts
    return lightning_parts


@pytest.fixture
def job():
    return f"lightning-{uuid.uuid4().hex[:8]}"


def test_steps_are_published_and_a_checkpoint_command_saves_through_lightning(lit, kafka_settings, job, tmp_path):
    save = command(job, "checkpoint")
    model, faultlens = lit.TinyRegression(), lit.callback(kafka_settings, job, tmp_path)
    trainer = lit.trainer_for(tmp_path, faultlens, Script(kafka_settings, {4: save}), max_steps=12, accumulate=2)
    trainer.fit(model, lit.data())

    published = steps(kafka_settings, job, lambda found: len(found) >= 12)
    assert [s["step"] for s in published] == list(range(1, 13))
    # One event per optimizer step, its loss the mean of the module's two micro-batch losses.
    pairs = [(a + b) / 2 for a, b in zip(model.losses[::2], model.losses[1::2], strict=True)]
    assert [s["loss"] for s in published] == pytest.approx(pairs)
    assert published[-1]["loss"] < published[0]["loss"]  # it learns
    assert all(s["grad_norm"] > 0 and math.isfinite(s["grad_norm"]) for s in published)
    assert all(s["tokens"] == 2 * lit.BATCH and s["rank"] == 0 and s["step_time_s"] > 0 for s in published)

    path = tmp_path / "checkpoints" / "faultlens-step=4.ckpt"
    saved = records(kafka_settings, "telemetry.train", job, "checkpoint", bool)
    assert [(e.data["step"], e.data["path"]) for e in saved] == [(4, str(path))]
    assert lit.torch.load(path, weights_only=False)["global_step"] == 4  # Lightning's own checkpoint format
    acks = records(kafka_settings, "telemetry.train", job, "command_ack", bool)
    assert [(a.data["command_id"], a.data["obeyed"]) for a in acks] == [(save.id, True)]


def test_stop_ends_fit_at_the_step_boundary_with_the_stop_code(lit, kafka_settings, job, tmp_path):
    # The user's class prior (the loss of answering with the labels' distribution) rides on every step.
    model, faultlens = lit.TinyRegression(), lit.callback(kafka_settings, job, tmp_path, chance_loss=0.5)
    trainer = lit.trainer_for(tmp_path, faultlens, Script(kafka_settings, {5: command(job, "stop")}), max_steps=30)
    with pytest.raises(SystemExit) as ended:
        trainer.fit(model, lit.data())
    assert ended.value.code == STOPPED
    assert len(model.losses) == 5  # step 5 finished, step 6 never began
    found = steps(kafka_settings, job, lambda found: len(found) >= 5)
    assert [s["step"] for s in found] == [1, 2, 3, 4, 5]
    assert [s["chance_loss"] for s in found] == [0.5] * 5


def test_rollback_resumes_from_the_checkpoint_the_command_names(lit, kafka_settings, job, tmp_path, monkeypatch):
    first_model, first = lit.TinyRegression(), lit.callback(kafka_settings, job, tmp_path, from_scratch=True)
    named = tmp_path / "checkpoints" / "faultlens-step=3.ckpt"
    script = Script(kafka_settings, {3: command(job, "checkpoint"), 6: command(job, "checkpoint"),
                                     8: command(job, "rollback", checkpoint=str(named))})
    with pytest.raises(SystemExit) as ended:
        lit.trainer_for(tmp_path, first, script, max_steps=30).fit(first_model, lit.data())
    assert ended.value.code == ROLLBACK
    assert sorted(p.name for p in named.parent.glob("*.ckpt")) == ["faultlens-step=3.ckpt", "faultlens-step=6.ckpt"]

    # `faultlens run` restarts the workers with the command's checkpoint (trainer_hooks/elastic_run.py).
    monkeypatch.setenv("FAULTLENS_RESUME", "rollback")
    monkeypatch.setenv("FAULTLENS_CHECKPOINT", str(named))
    second_model, second = lit.TinyRegression(), lit.callback(kafka_settings, job, tmp_path, from_scratch=True)
    trainer = lit.trainer_for(tmp_path, second, Script(kafka_settings, {}), max_steps=10)
    assert second.resume_checkpoint(trainer) == str(named)
    trainer.fit(second_model, lit.data(), ckpt_path=second.resume_checkpoint(trainer))

    found = steps(kafka_settings, job, lambda found: len(found) >= 8 + 7)
    published = [s["step"] for s in found]
    assert published == [1, 2, 3, 4, 5, 6, 7, 8, 4, 5, 6, 7, 8, 9, 10]  # steps 4.. again, from step 3's state
    # Random weights at first; the resumed fit's are a checkpoint's, whatever the user said.
    assert [s["from_scratch"] for s in found] == [True] * 8 + [False] * 7
    # Each step carries the optimizer's learning rate (the model's SGD at 0.05, no schedule).
    assert [s["lr"] for s in found] == [pytest.approx(0.05)] * 15
    # The resumed run's first step trained from step 3's weights (on the loader's first batch: a
    # plain DataLoader starts its epoch over), not step 6's.
    assert second_model.losses[0] == pytest.approx(lit.loss_of(named))
    assert second_model.losses[0] != pytest.approx(lit.loss_of(named.parent / "faultlens-step=6.ckpt"))

    # Without a named checkpoint, a rollback resumes from the one before the newest.
    monkeypatch.delenv("FAULTLENS_CHECKPOINT")
    assert second.resume_checkpoint(trainer) == str(named)


def test_capture_stacks_is_answered_mid_run(lit, kafka_settings, job, tmp_path):
    ask = command(job, "capture_stacks")
    trainer = lit.trainer_for(tmp_path, lit.callback(kafka_settings, job, tmp_path), Script(kafka_settings, {2: ask}),
                          max_steps=4)
    trainer.fit(lit.TinyRegression(), lit.data())
    dumps = records(kafka_settings, "telemetry.stacks", job, "stack_dump", bool)
    assert [d.data["request_id"] for d in dumps] == [ask.id]
    # The training thread, caught inside Lightning's loop while the step waited.
    assert "on_train_batch_start" in dumps[0].data["dump"] and "lightning" in dumps[0].data["dump"]
