"""A Hugging Face Trainer job under `faultlens run` end to end (tests/trainer_hooks/framework_run.py): a commanded
checkpoint saved once by both DDP ranks, a rollback to the checkpoint the command names, a stop."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="transformers is not installed (pip install 'faultlens[hf]')")

from tests.trainer_hooks.framework_run import checkpoint_rollback_stop

# Waits end when the job stops moving (framework_run.STALL_S), not at a fixed time: no 300 s cap either.
pytestmark = [pytest.mark.broker, pytest.mark.e2e, pytest.mark.long(60), pytest.mark.timeout(900)]


def test_hf_job_checkpoints_rolls_back_and_stops_under_faultlens_run(kafka_settings, tmp_path):
    checkpoint_rollback_stop(kafka_settings, tmp_path, "tests.trainer_hooks.hf_worker")
