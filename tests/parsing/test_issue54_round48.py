"""Issue 54, round 48 (fresh91 opened, G33).

fresh91 (committed W&B run directories: a trainer's console as W&B captured it, W&B's own internal log) missed 11 of
its 51 fault rows and fired 1 of its 43 healthy rows. Each miss is fixed by the form its software prints, beside the
healthy look-alikes each reading must leave alone:

- torch's check that the driver can run the CUDA it was built for ("The NVIDIA driver on your system is too old") and
  cuDNN finding no algorithm or engine to run an op: cuda_error (the lead's settlements);
- a Python type whose name opens with underscores (torch's C class ``torch._C._LinAlgError``) is read as a type, and a
  linear-algebra library's error is the program's numbers (user_code), as numpy's LinAlgError (a ValueError) is;
- Python's base ``Exception`` opening the line (a traceback's last line) is the program's own raise (user_code); not
  ``Exception:`` inside another program's record;
- autograd's checks of the program's use of the graph and aten's check that an op's operands agree: user_code;
- torch's ExceptionWrapper re-raising what the program's model or dataset code raised in a replica or a worker:
  user_code; a library's refusal that names the program's own setting to change: user_code;
- a DataLoader worker that exited with a non-zero exit code (its own Python, not a signal): user_code; the bare
  "exited unexpectedly" and a killed worker stay host memory's;
- transformers' loader that could not get a model's files from the Hub: user_code, as an outside service is;
- a retry loop's note that one attempt failed (W&B's internal log): retrying, so the line model's guess stays quiet.

And the previous round's leftover (whole_logs/fresh2): a configuration error a ValueError states (a configured name or
class not found in the model) is user_code, whoever's frames raised it.

Every line is written for the test (other paths, pids, versions, names and sizes than the batch's).
"""

from __future__ import annotations

import pytest

from faultlens.parsing.errors import classify_headless
from faultlens.parsing.registry import parser_for
from faultlens.parsing.severity import says_retrying
from tests.parsing.line_events import acting_verdicts

NCCL = "nccl"


def acting_classes(line: str, source: str = NCCL) -> set[object]:
    return {fault for fault, _ in acting_verdicts(line, source)}


# ---- the CUDA runtime that cannot start on the driver; cuDNN with nothing it can run (parsing/cuda_errors.py) ----

@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: The NVIDIA driver on your system is too old (found version 10020). Please update your GPU driver by "
        "downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx Alternatively, go "
        "to: https://pytorch.org to install a PyTorch version that has been compiled with your version of the CUDA driver.",
        "[rank3]: RuntimeError: The NVIDIA driver on your system is too old (found version 11020).",
        "The NVIDIA driver on your system is too old (found version 9010).",
        "RuntimeError: Unable to find a valid cuDNN algorithm to run convolution",
        "[rank1]: RuntimeError: Unable to find a valid cuDNN algorithm to run convolution",
        "RuntimeError: GET was unable to find an engine to execute this computation",
        "RuntimeError: FIND was unable to find an engine to execute this computation",
    ],
)
def test_the_driver_too_old_and_cudnn_without_an_algorithm_are_cuda_errors(line: str) -> None:
    assert acting_classes(line) == {"cuda_error"}


@pytest.mark.parametrize(
    "line",
    [
        # the driver's banner and the install notes that name it without a failure
        "NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2",
        "INFO: the NVIDIA driver on this system is 550.54.15; cuDNN 8.9.7 found",
        "Using cuDNN benchmark mode to find the fastest algorithm for each convolution",
        "torch.backends.cudnn.benchmark = True  # let cuDNN find the best algorithm",
    ],
)
def test_driver_and_cudnn_notes_stay_quiet(line: str) -> None:
    assert acting_classes(line) == set()


# ---- types whose name opens with underscores; the linear-algebra library's errors (parsing/errors.py) ----

@pytest.mark.parametrize(
    "line",
    [
        "torch._C._LinAlgError: linalg.cholesky: The factorization could not be completed because the input is not positive-definite (the leading minor of order 3 is not positive-definite).",
        "[rank2]: torch._C._LinAlgError: linalg.eigh: The algorithm failed to converge because the input matrix is ill-conditioned or has too many repeated eigenvalues (error code: 17).",
        "torch.linalg.LinAlgError: torch.linalg.inv: (Batch element 3): The diagonal element 2 is zero, the inversion could not be completed because the input matrix is singular.",
        "numpy.linalg.LinAlgError: Singular matrix",
        "numpy.linalg.LinAlgError: SVD did not converge",
    ],
)
def test_a_linear_algebra_error_is_the_programs_numbers(line: str) -> None:
    assert acting_classes(line) == {"user_code"}


def test_a_private_type_name_is_read_as_a_type() -> None:
    found = classify_headless("[rank4]: mylib._impl._ConfigError: unknown scheduler 'cosine_restarts'")
    assert found is not None and (found.type, found.fault) == ("mylib._impl._ConfigError", "user_code")
    assert classify_headless("mylib._impl._PoolError: pool drained") is None  # a type that says nothing stays unread


@pytest.mark.parametrize(
    "line",
    [
        # scipy's warning about the same numbers: the run goes on
        "/home/u/proj/solve.py:88: LinAlgWarning: Ill-conditioned matrix (rcond=3.2e-18): result may not be accurate.",
        "  warnings.warn('torch.linalg.svd: falling back to the gesvd driver', UserWarning)",
        "_private_helper: loaded 12 shards",
    ],
)
def test_linear_algebra_warnings_and_private_names_stay_quiet(line: str) -> None:
    assert acting_classes(line) == set()


# ---- Python's base Exception opening the line (parsing/errors.py classify_headless) ----

@pytest.mark.parametrize(
    "line",
    [
        "Exception: Checkpoint folder is empty.",
        "[rank5]: Exception: no training files matched the pattern",
        "Exception: Unknown optimizer 'adamw8'",
    ],
)
def test_a_bare_exception_opening_the_line_is_the_programs_own(line: str) -> None:
    assert acting_classes(line) == {"user_code"}


@pytest.mark.parametrize(
    "line",
    [
        # another program's record that says Exception inside it; firmware's ACPI status
        "[    0.201733] ACPI Exception: AE_NOT_FOUND, While evaluating Sleep State [\\_S2_] (20200925/hwxface-589)",
        "12:04:19:ERROR:WU01:FS00:Exception: Could not get an assignment",
        "The program handles every Exception: it logs and goes on",
    ],
)
def test_exception_inside_a_record_stays_as_it_was(line: str) -> None:
    assert acting_classes(line) == set()


def test_a_bare_exception_still_reads_what_it_names_first() -> None:
    # DeepSpeed's loss scale is the rule's nan_loss; a CUDA error named in it is CUDA's
    assert acting_classes("Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.") == {"nan_loss"}
    assert acting_classes("Exception: Error launching kernel: CUDA error (700) an illegal memory access was encountered") == {"cuda_error"}


# ---- autograd's checks of the graph's use; aten's check that an op's operands agree (parsing/errors.py _SHAPE_ERROR) ----

@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: Trying to backward through the graph a second time (or directly access saved tensors after they have "
        "already been freed). Saved intermediate values of the graph are freed when you call .backward() or autograd.grad().",
        "[rank0]: RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn",
        "RuntimeError: grad can be implicitly created only for scalar outputs",
        "RuntimeError: expected m1 and m2 to have the same dtype, but got: float != c10::BFloat16",
        "[rank7]: RuntimeError: expected mat1 and mat2 to have the same dtype, but got: c10::BFloat16 != float",
        "RuntimeError: Expected query and key to be on the same device, but got cuda:0 and cpu",
    ],
)
def test_autograd_and_operand_checks_are_the_programs(line: str) -> None:
    assert acting_classes(line) == {"user_code"}


@pytest.mark.parametrize(
    "line",
    [
        "Epoch 3: backward pass took 0.41 s; retain_graph=False",
        "INFO expected batches and steps to have the same length: 512 / 512",
        "UserWarning: Using a target size (torch.Size([8])) that is different to the input size (torch.Size([8, 1]))",
    ],
)
def test_autograd_and_operand_notes_stay_quiet(line: str) -> None:
    assert acting_classes(line) == set()


# ---- torch's ExceptionWrapper; a library that names the setting to change (parsing/exception_subject.py) ----

@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: Caught RuntimeError in replica 3 on device 3.",
        "[rank0]: RuntimeError: Caught RuntimeError in DataLoader worker process 2.",
        "ValueError: Caught ValueError in DataLoader worker process 0.",
        "RuntimeError: Could not collect rollouts before the buffer filled. We recommend choosing a value for buffer_size that is larger than n_steps.",
        "RuntimeError: The scheduler needs at least one warm-up step. Please set warmup_steps to a positive number.",
    ],
)
def test_the_wrapped_error_and_the_advised_setting_are_the_programs(line: str) -> None:
    assert acting_classes(line) == {"user_code"}


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        # the wrapper's OOM stays CUDA's OOM (user_code by its own reading); a RuntimeError that says nothing stays unknown
        ("torch.cuda.OutOfMemoryError: Caught OutOfMemoryError in replica 1 on device 1.", "user_code"),
        ("RuntimeError: Caught RuntimeError while joining the workers", "unknown"),
        ("RuntimeError: Please report this issue to the maintainers with the log above", "unknown"),
    ],
)
def test_the_wrapper_and_advice_readings_stay_narrow(line: str, fault: str) -> None:
    assert acting_classes(line) == {fault}


@pytest.mark.parametrize(
    "line",
    [
        "wandb: WARNING Please set WANDB_DIR to a writable folder to keep run files",
        "We recommend choosing a value for learning_rate between 1e-5 and 1e-3.",
        "INFO Caught RuntimeError in replica 0 on device 0 earlier; retried on the next batch",
    ],
)
def test_advice_and_wrapper_words_outside_an_exception_stay_quiet(line: str) -> None:
    assert acting_classes(line) == set()


# ---- a DataLoader worker's own exit; the Hub loader's failures (parsing/exceptions.toml) ----

def test_a_worker_that_exited_with_a_code_is_the_programs_and_a_killed_one_the_hosts() -> None:
    assert acting_classes("RuntimeError: DataLoader worker (pid 41877) exited unexpectedly with exit code 2. Details are lost "
                          "due to multiprocessing. Rerunning with num_workers=0 may give better error trace.") == {"user_code"}
    assert acting_classes("RuntimeError: DataLoader worker (pid(s) 41877, 41878) exited unexpectedly") == {"host_oom"}
    assert acting_classes("RuntimeError: DataLoader worker (pid 41877) is killed by signal: Killed.") == {"host_oom"}


@pytest.mark.parametrize(
    "line",
    [
        "OSError: There was a specific connection error when trying to load mistralai/Mistral-7B-v0.1:",
        "[rank1]: OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the cached files.",
        "OSError: bert-large-cased-wrong is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'",
        "OSError: You are trying to access a gated repo.",
    ],
)
def test_the_hub_loader_that_could_not_get_the_model_is_the_jobs(line: str) -> None:
    assert acting_classes(line) == {"user_code"}


@pytest.mark.parametrize(
    "line",
    [
        "Loading checkpoint shards: 100%|##########| 2/2 [00:04<00:00,  2.10s/it]",
        "INFO loading model mistralai/Mistral-7B-v0.1 from the local cache (no connection to the Hub needed)",
    ],
)
def test_hub_loading_notes_stay_quiet(line: str) -> None:
    assert acting_classes(line) == set()


# ---- a retry loop's note that one attempt failed (parsing/severity.py says_retrying) ----

@pytest.mark.parametrize(
    "line",
    [
        "2023-05-17 11:42:08,913 ERROR   SenderThread:18211 [retry.py:__call__():131] Retry attempt failed:",
        "2023-05-17 11:42:08,913 ERROR   HandlerThread:18211 [retry.py:__call__():131] Retry attempt failed:",
        "upload: retry attempt 2/5 failed: 503 Service Unavailable",
    ],
)
def test_a_retry_attempt_that_failed_says_it_retries(line: str) -> None:
    assert says_retrying(line)
    assert acting_classes(line) == set()


@pytest.mark.parametrize(
    "line",
    [
        "upload: final retry attempt failed: 503 Service Unavailable",
        "checkpoint sync: retry attempt 5 of 5 failed, giving up",
        "last retry attempt failed",
    ],
)
def test_the_last_attempt_is_not_a_retry(line: str) -> None:
    assert not says_retrying(line)


# ---- the numbers: fresh91 whole, nothing healthy fired ----

def test_fresh91_scores_whole() -> None:
    from pathlib import Path

    from tools.log_corpus_score import _merge, score_rows

    r = score_rows(_merge([Path(__file__).resolve().parents[1] / "fixtures" / "log_corpus" / "fresh91"]))
    assert (r.total.class_right, r.total.faults) == (51, 51)
    assert (r.total.fired, r.total.healthy) == (0, 43)


def test_stream_reads_a_wrapped_error_once() -> None:
    """The wrapper's line and the original traceback under it: the original's own error is its own event."""
    p = parser_for(NCCL)
    lines = [
        "RuntimeError: Caught RuntimeError in replica 1 on device 1.",
        "Original Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.10/site-packages/torch/nn/parallel/parallel_apply.py", line 84, in _worker',
        "    output = module(*input, **kwargs)",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    got = [{e.data.get("fault") for e in p.feed(line) if e.data.get("action") not in (None, "none")} for line in lines]
    got[-1] |= {e.data.get("fault") for e in p.flush() if e.data.get("action") not in (None, "none")}
    assert got[0] == {"user_code"}
    assert "cuda_error" in set().union(*got[1:])


# ---- a program's own check printing a cudaError_t's number (parsing/cuda_errors.py), read before the bare Exception ----

@pytest.mark.parametrize(
    ("line", "fault"),
    [
        ("Exception: Error downloading array posq: CUDA error (700) at /opt/openmm/platforms/cuda/src/CudaArray.cpp:112", "cuda_error"),
        ("Exception: Error creating array energyBuffer: CUDA error (2) at /opt/openmm/platforms/cuda/src/CudaArray.cpp:40", "user_code"),
        ("Exception: Error initializing context: CUDA error (100)", "gpu_lost"),
    ],
)
def test_a_cuda_error_number_in_parentheses_is_read_by_its_code(line: str, fault: str) -> None:
    assert acting_classes(line) == {fault}


# ---- the previous round's leftover: a configured name the model does not hold (parsing/exception_subject.py) ----

def _traceback(last: str) -> list[str]:
    return [
        "[rank2]: Traceback (most recent call last):",
        '[rank2]:   File "/opt/venv/lib/python3.11/site-packages/trainlib/cli/main.py", line 22, in <module>',
        "[rank2]:     main()",
        '[rank2]:   File "/opt/venv/lib/python3.11/site-packages/accelerate/utils/dataclasses.py", line 1810, in set_auto_wrap_policy',
        "[rank2]:     raise ValueError(msg)",
        last,
    ]


def _stream(lines: list[str]) -> set[object]:
    p = parser_for(NCCL)
    out: set[object] = set()
    for line in lines:
        out |= {e.data.get("fault") for e in p.feed(line) if e.data.get("action") not in (None, "none")}
    return out | {e.data.get("fault") for e in p.flush() if e.data.get("action") not in (None, "none")}


@pytest.mark.parametrize(
    "last",
    [
        "[rank2]: ValueError: Could not find the transformer layer class LlamaDecoderLayerX in the model.",
        "[rank2]: ValueError: Target modules {'q_projj'} not found in the base model. Please check the target modules and try again.",
        "[rank2]: KeyError: 'module vision_tower.blocks not found in the model'",
    ],
)
def test_a_configured_name_the_model_lacks_is_the_jobs_whoever_raised_it(last: str) -> None:
    assert _stream(_traceback(last)) == {"user_code"}


def test_a_library_valueerror_that_names_no_configuration_stays_unknown() -> None:
    assert _stream(_traceback("[rank2]: ValueError: math domain error")) == {"unknown"}
