"""faultlens.trainer_hooks.hf.FaultlensCallback in real Hugging Face Trainer runs on CPU (a tiny GPT-2
built from a config, no download), on the embedded broker: step telemetry equal to what the Trainer
itself logs, a commanded checkpoint saved by the Trainer, a stop and a rollback at a step boundary,
and a stack capture answered mid-run."""

from __future__ import annotations

import importlib.util
import json
import math
import uuid

import pytest

from faultlens.trainer_hooks.exit_codes import ROLLBACK, STOPPED
from tests.trainer_hooks.callback_script import Script, command, records, steps

# find_spec of a top-level name does not import it; transformers itself is imported by the `hf` fixture.
pytestmark = [pytest.mark.broker,
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                 reason="transformers is not installed (pip install 'faultlens[hf]')")]


@pytest.fixture(scope="module")
def hf():
    """The data, model and Trainer of these tests (tests/trainer_hooks/hf_parts.py), imported when one of
    them runs: at module level every xdist worker paid ~0.7 CPU-s to collect this file (issue 47)."""
    from tests.trainer_hooks import hf_parts
    return hf_parts


@pytest.fixture
def job():
    return f"hf-{uuid.uuid4().hex[:8]}"


def logged(trainer, key):
    """What the Trainer itself logged per step (logging_steps=1)."""
    return {h["step"]: h[key] for h in trainer.state.log_history if key in h}


def test_steps_match_what_the_trainer_logs_and_a_checkpoint_command_saves_through_it(hf, kafka_settings, job, tmp_path):
    save = command(job, "checkpoint")
    trainer = hf.trainer_for(tmp_path, hf.callback(kafka_settings, job, tmp_path), Script(kafka_settings, {4: save}), 12)
    trainer.train()

    published = steps(kafka_settings, job, lambda found: len(found) >= 12)
    assert [s["step"] for s in published] == list(range(1, 13))
    # The loss over both micro-batches, and the gradient norm before the Trainer clipped it (max_grad_norm 1.0).
    loss, norm = logged(trainer, "loss"), logged(trainer, "grad_norm")
    assert [s["loss"] for s in published] == pytest.approx([loss[n] for n in range(1, 13)], rel=1e-3)
    assert [s["grad_norm"] for s in published] == pytest.approx([norm[n] for n in range(1, 13)], rel=1e-3)
    assert any(s["grad_norm"] > 1.0 for s in published)  # so clipping happened, and was not what we published
    assert published[-1]["loss"] < published[0]["loss"] and all(math.isfinite(s["loss"]) for s in published)
    assert all(s["tokens"] == hf.BATCH * hf.ACCUMULATE * hf.SEQ and s["classes"] == hf.VOCAB for s in published)
    # No word from the user: a GPT-2 built from a config began from random weights, and the callback says so.
    assert all(s["from_scratch"] is True for s in published)

    path = tmp_path / "out" / "checkpoint-4"
    saved = records(kafka_settings, "telemetry.train", job, "checkpoint", bool)
    assert [(e.data["step"], e.data["path"]) for e in saved] == [(4, str(path))]
    assert json.loads((path / "trainer_state.json").read_text())["global_step"] == 4  # the Trainer's own save
    assert hf.checkpoint_folders(tmp_path / "out") == [str(path)]


def test_stop_ends_train_at_the_step_boundary_with_the_stop_code(hf, kafka_settings, job, tmp_path):
    trainer = hf.trainer_for(tmp_path, hf.callback(kafka_settings, job, tmp_path),
                          Script(kafka_settings, {5: command(job, "stop")}), max_steps=30)
    with pytest.raises(SystemExit) as ended:
        trainer.train()
    assert ended.value.code == STOPPED
    assert trainer.state.global_step == 5
    assert [s["step"] for s in steps(kafka_settings, job, lambda found: len(found) >= 5)] == [1, 2, 3, 4, 5]


def test_rollback_resumes_from_the_checkpoint_the_command_names(hf, kafka_settings, job, tmp_path, monkeypatch):
    named = tmp_path / "out" / "checkpoint-3"
    script = Script(kafka_settings, {3: command(job, "checkpoint"), 6: command(job, "checkpoint"),
                                     8: command(job, "rollback", checkpoint=str(named))})
    first = hf.trainer_for(tmp_path, hf.callback(kafka_settings, job, tmp_path, from_scratch=True), script, max_steps=30)
    with pytest.raises(SystemExit) as ended:
        first.train()
    assert ended.value.code == ROLLBACK
    assert hf.checkpoint_folders(tmp_path / "out") == [str(named), str(tmp_path / "out" / "checkpoint-6")]
    first_losses = logged(first, "loss")

    # `faultlens run` restarts the workers with the command's checkpoint (trainer_hooks/elastic_run.py).
    monkeypatch.setenv("FAULTLENS_RESUME", "rollback")
    monkeypatch.setenv("FAULTLENS_CHECKPOINT", str(named))
    again = hf.callback(kafka_settings, job, tmp_path, from_scratch=True)
    second = hf.trainer_for(tmp_path, again, Script(kafka_settings, {}), max_steps=10)
    assert again.resume_checkpoint(second.args) == str(named)
    second.train(resume_from_checkpoint=again.resume_checkpoint(second.args))

    found = steps(kafka_settings, job, lambda found: len(found) >= 8 + 7)
    published = [s["step"] for s in found]
    assert published == [1, 2, 3, 4, 5, 6, 7, 8, 4, 5, 6, 7, 8, 9, 10]  # steps 4.. again, from step 3's state
    # Random weights at first; the resumed run's are a checkpoint's, whatever the user said.
    assert [s["from_scratch"] for s in found] == [True] * 8 + [False] * 7
    # Each step carries the optimizer's learning rate as the step leaves it (its scheduler stepped):
    # the Trainer's linear decay from 5e-3 to 0 at max_steps, 30 steps, then 10 for the resumed run.
    expected = [5e-3 * (1 - s / 30) for s in range(1, 9)] + [5e-3 * (1 - s / 10) for s in range(4, 11)]
    assert [s["lr"] for s in found] == pytest.approx(expected)
    # The Trainer skips the batches it had seen: step 4 trains again on the same data, from the same weights.
    assert logged(second, "loss")[4] == pytest.approx(first_losses[4], rel=1e-4)

    # Without a named checkpoint, a rollback resumes from the one before the newest.
    monkeypatch.delenv("FAULTLENS_CHECKPOINT")
    assert again.resume_checkpoint(second.args) == str(named)


def test_capture_stacks_is_answered_mid_run(hf, kafka_settings, job, tmp_path):
    ask = command(job, "capture_stacks")
    trainer = hf.trainer_for(tmp_path, hf.callback(kafka_settings, job, tmp_path), Script(kafka_settings, {2: ask}), 4)
    trainer.train()
    dumps = records(kafka_settings, "telemetry.stacks", job, "stack_dump", bool)
    assert [d.data["request_id"] for d in dumps] == [ask.id]
    # The training thread, caught inside the Trainer's loop while the step waited.
    assert "on_step_begin" in dumps[0].data["dump"] and "transformers" in dumps[0].data["dump"]
