"""A Hugging Face Trainer job under `faultlens run` end to end (tests/trainer_hooks/framework_run.py): a commanded
checkpoint saved once by both DDP ranks, a rollback to the checkpoint the command names, a stop."""

from __future__ import annotations

import importlib.util

import pytest

from tests.trainer_hooks.framework_run import checkpoint_rollback_stop

# Waits end when the job stops moving (framework_run.STALL_S), not at a fixed time: no 300 s cap either.
pytestmark = [pytest.mark.broker, pytest.mark.e2e, pytest.mark.long(60), pytest.mark.timeout(900),
              # The job imports transformers in its own processes; find_spec here does not import it, so a
              # worker that only collects this file does not pay for it (issue 47).
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                 reason="transformers is not installed (pip install 'faultlens[hf]')")]


def test_hf_job_checkpoints_rolls_back_and_stops_under_faultlens_run(kafka_settings, tmp_path):
    checkpoint_rollback_stop(kafka_settings, tmp_path, "tests.trainer_hooks.hf_worker")
