"""Issue 54, round 46 (fresh89 and whole_logs/fresh1 opened, G31): the trainer side's forms the batch showed
missing, each by the way its program prints it: ProcessGroupNCCL's fatal-level lines (the `LOG(FATAL)` that ends the
process after the flight recorder's dump, for a collective's timeout or exception or the watchdog's hang); NeMo's
error letter on a model that could not be built; Ray's word that an actor or worker process died; the ROCm math
libraries' status names (MIOpen, rocBLAS, hipBLAS) as CUDA's are read; TensorFlow's BFC allocator failing an
allocation in its newer words; a library's own check that refuses an unsupported request (FlashInfer's `Error in
function ... Unsupported ...`). And the healthy look-alikes: a TensorFlow / XLA C++ line at its W letter is no
guess's, a Python logging record at WARNING whose message is an exception the program caught is recorded, and a
caught exception's line that says what the program does instead (`will fallback to`) is recorded.

Every line is written for the test (other hosts, stamps, ranks, sizes and names than the corpus rows), beside the
healthy look-alikes each reading must leave alone.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting_verdicts, classes

NCCL = "nccl"


def acting_classes(line: str) -> set[object]:
    return {fault for fault, _ in acting_verdicts(line, NCCL)}


# ---- ProcessGroupNCCL at its fatal level (parsing/rules.toml torch.process_group_nccl_error, nccl.terminated_after_dump) ----


@pytest.mark.parametrize(
    "line",
    [
        # torch >= 2.4: the reason a timeout or an NCCL error of a collective
        "[rank6]:[F1104 11:20:07.514211376 ProcessGroupNCCL.cpp:1690] [PG ID 0 PG GUID 0(default_pg) Rank 6] [PG ID 0 PG GUID "
        "0(default_pg) Rank 6] Terminating the process after attempting to dump debug info, due to collective timeout or exception.",
        # the heartbeat monitor's reason: the watchdog itself hung
        "[rank12]:[F302 04:55:19.900120331 ProcessGroupNCCL.cpp:1420] [PG ID 2 PG GUID 5 Rank 12] Terminating the process after "
        "attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.",
        # no rank prefix (a single-process log), the glog letter alone
        "[F606 23:01:44.002918455 ProcessGroupNCCL.cpp:1601] [PG 0 Rank 1] Terminating the process after attempting to dump debug "
        "info, due to collective timeout or exception.",
        # another of ProcessGroupNCCL's fatal-level lines: the level is the program's verdict, as its E lines'
        "[rank2]:[F913 07:14:52.118830211 ProcessGroupNCCL.cpp:1324] [PG ID 0 PG GUID 0(default_pg) Rank 2] Heartbeat monitor timed "
        "out! Process will be terminated after dumping debug info. workMetaList_.size()=7",
    ],
)
def test_process_group_nccl_fatal_lines_are_nccl_errors(line: str) -> None:
    assert acting_classes(line) == {"nccl_error"}


@pytest.mark.parametrize(
    "line",
    [
        # ProcessGroupNCCL's warning and info lines at exit and start
        "[rank0]:[W1104 11:31:02.662010233 ProcessGroupNCCL.cpp:1496] Warning: WARNING: destroy_process_group() was not called "
        "before program exit, which can leak resources. For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())",
        "[rank0]:[I1104 11:00:02.310145511 ProcessGroupNCCL.cpp:905] [PG ID 0 PG GUID 0 Rank 0] ProcessGroupNCCL initialization "
        "options: size: 8, global rank: 0, TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0",
        # the dump's own success note at info
        "[rank3]:[I1104 11:20:07.400021000 ProcessGroupNCCL.cpp:1377] [PG ID 0 PG GUID 0(default_pg) Rank 3] Finished flight "
        "recorder successfully. Output can be analyzed using the fr_trace script.",
    ],
)
def test_process_group_nccl_warning_and_info_lines_stay_quiet(line: str) -> None:
    assert acting_classes(line) == set()


# ---- NeMo's error letter on a model that could not be built (parsing/rules.toml trainer.model_build_failed) ----


@pytest.mark.parametrize(
    "line",
    [
        "[NeMo E 2025-03-14 09:12:55 common:702] Model instantiation failed!",
        "[NeMo E 2024-11-30 22:40:01 save_restore_connector:256] Model instantiation failed!",
        # a docker build's seconds column before it
        "88.0 [NeMo E 2025-01-02 17:03:09 nemo_logging:349] Model instantiation failed!",
        # a critical letter and another program's words for the same failure
        "[NeMo C 2025-03-14 09:12:55 common:702] Model instantiation failed!",
        "2025-02-10 13:44:21,901 - ERROR - Failed to instantiate the model from config: missing key 'encoder'",
    ],
)
def test_a_model_that_could_not_be_built_is_user_code(line: str) -> None:
    assert acting_classes(line) == {"user_code"}


@pytest.mark.parametrize(
    "line",
    [
        # NeMo's warnings and info about the same steps
        "[NeMo W 2025-03-14 09:12:40 nemo_logging:349] Apex was not found. Please see the NeMo README for installation instructions.",
        "[NeMo I 2025-03-14 09:12:58 save_restore_connector:263] Model EncDecCTCModelBPE was successfully restored from /ckpt/asr.nemo.",
        "[NeMo W 2025-03-14 09:12:41 common:815] Model instantiation failed with the target class, falling back to `cls`.",
        # NeMo's error letter on a failure it works around (a decoder it falls back from)
        "[NeMo E 2024-05-02 10:01:33 segment:161] Loading /data/clip_004.flac via SoundFile raised RuntimeError: `Error opening "
        "'/data/clip_004.flac': Format not recognised.`. NeMo will fallback to loading via pydub.",
    ],
)
def test_nemo_warnings_and_handled_errors_stay_quiet(line: str) -> None:
    assert acting_classes(line) == set()


# ---- Ray: an actor or a worker process died (parsing/rules.toml ray.process_died) ----


@pytest.mark.parametrize(
    "line",
    [
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        "(TaskRunner pid=58120) ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.",
        "ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this task. Check python-core-worker-*.log "
        "files for more information.",
        "2025-06-01 08:10:42,551\tERROR worker.py:422 -- Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): "
        "ray::RolloutWorker.sample() (pid=9123, ip=10.2.0.7) The actor died unexpectedly before finishing this task.",
    ],
)
def test_a_ray_actor_or_worker_that_died_is_user_code(line: str) -> None:
    assert acting_classes(line) == {"user_code"}


@pytest.mark.parametrize(
    "line",
    [
        # a restart Ray does on its own, and an actor that is only unreachable for a while
        "(raylet) [2025-06-01 08:10:40,002 I 4410 4410] (raylet) actor_manager.cc:312: Actor 3f2a restarted on node 10.2.0.7 "
        "(attempt 1 of 3).",
        "ray.exceptions.ActorUnavailableError: The actor 3f2a is unavailable: the connection to it is being re-established. "
        "The task may or may not have been executed on the actor.",
    ],
)
def test_ray_restarts_and_unavailable_actors_stay_quiet(line: str) -> None:
    assert acting_classes(line) == set()


# ---- the ROCm math libraries' status names (parsing/cuda_errors.py) ----


@pytest.mark.parametrize(
    "line",
    [
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to launch convolution: miopenStatusInternalError",
        "RuntimeError: miopenStatusUnknownError",
        "MIOpen Error: /long_pathname_so_that_rpms_can_package_the_debug_info/src/MIOpen/src/ocl/convolutionocl.cpp:812: "
        "miopenStatusUnknownError while running the solver",
        "RuntimeError: rocBLAS error: rocblas_status_internal_error from rocblas_gemm_ex on device 3",
        "RuntimeError: HIPBLAS_STATUS_EXECUTION_FAILED when calling `hipblasGemmEx( handle, opa, opb, m, n, k, &falpha, a, "
        "HIP_R_16BF, lda, b, HIP_R_16BF, ldb, &fbeta, c, HIP_R_16BF, ldc, HIPBLAS_R_32F, HIPBLAS_GEMM_DEFAULT)`",
    ],
)
def test_rocm_math_library_status_names_are_cuda_errors(line: str) -> None:
    assert acting_classes(line) == {"cuda_error"}


@pytest.mark.parametrize(
    "line",
    [
        "MIOpen(HIP): Info [FindConvFwdAlgorithm] FW Chosen Algorithm: ConvBinWinogradRxSf3x2 , 0, 0.0412 miopenStatusSuccess",
        "rocblas_status_success returned by rocblas_initialize on device 0",
        "MIOpen(HIP): Warning [SQLiteBase] Missing system database file: gfx90a6e.kdb Performance may degrade.",
    ],
)
def test_rocm_success_and_database_notes_stay_quiet(line: str) -> None:
    assert acting_classes(line) == set()


# ---- TensorFlow's BFC allocator failing in its newer words (parsing/rules.toml trainer.tf_allocator_oom) ----


@pytest.mark.parametrize(
    "line",
    [
        "2023-08-17 03:22:10.482117: W external/tsl/tsl/framework/bfc_allocator.cc:485] Allocator (GPU_0_bfc) ran out of memory "
        "trying to allocate 12.50GiB (rounded to 13421772800)requested by op dot.14",
        # the writer's excerpt starts at the file name
        "bfc_allocator.cc:497] Allocator (GPU_1_bfc) ran out of memory trying to allocate 3.01GiB (rounded to 3229614080)requested by op",
    ],
)
def test_a_bfc_allocation_that_failed_is_user_code(line: str) -> None:
    assert acting_classes(line) == {"user_code"}


@pytest.mark.parametrize(
    "line",
    [
        # the allocator's retry note: no failure, as the line says
        "2022-04-02 11:17:32.880421: W tensorflow/core/common_runtime/bfc_allocator.cc:275] Allocator (GPU_0_bfc) ran out of "
        "memory trying to allocate 2.19GiB with freed_by_count=0. The caller indicates that this is not a failure, but may mean "
        "that there could be performance gains if more memory were available.",
        # XLA's rematerialisation pass at its warning letter: a compile-time note, no guess's
        "2024-05-11 07:02:19.331910: W external/xla/xla/service/hlo_rematerialization.cc:3005] Can't reduce memory use below "
        "11.04GiB (11853923532 bytes) by rematerialization; only reduced to 15.72GiB (16879132000 bytes), down from 16.01GiB "
        "(17190012352 bytes) originally",
        "W external/xla/xla/service/gpu/gemm_algorithm_picker.cc:431] Failed to find best cuBLAS algorithm, GEMM performance might "
        "be suboptimal: INTERNAL: All algorithms tried for gemm failed.",
    ],
)
def test_tf_and_xla_warning_letter_lines_are_no_guesses(line: str) -> None:
    assert acting_classes(line) == set()


# ---- a record at WARNING whose message is an exception the program caught (parsing/severity.py warned_exception) ----


@pytest.mark.parametrize(
    "line",
    [
        # dynamo under suppress_errors: the frame runs eagerly
        "[2024-02-19 08:41:27,004] torch._dynamo.convert_frame: [WARNING] torch._dynamo.exc.BackendCompilerFailed: "
        "backend='inductor' raised:",
        # vLLM's logger on an optional import that failed (the engine goes on without it)
        "(EngineCore_DP0 pid=311) WARNING 09-02 14:11:58 [import_utils.py:412] ImportError: cannot import name 'fp8_gemm_nt' "
        "from 'deep_gemm' (/usr/local/lib/python3.12/site-packages/deep_gemm/__init__.py)",
        "WARNING 09-02 14:11:58 [__init__.py:61] ModuleNotFoundError: No module named 'flash_attn_3'",
        "2025-01-07 10:02:13,441 - WARNING - my_trainer.data - KeyError: 'caption'",
        # Python logging's default format, the logger's name between colons
        "WARNING:my_trainer.hooks:ValueError: could not parse the profiler's schedule, profiling is off",
    ],
)
def test_an_exception_logged_at_warning_is_recorded(line: str) -> None:
    assert acting_classes(line) == set()
    assert classes(line, NCCL) - {None}, "recorded, not dropped"


@pytest.mark.parametrize(
    "line, fault",
    [
        # the same exceptions at ERROR, or with no level: the program did not go on
        ("(EngineCore_DP0 pid=311) ERROR 09-02 14:11:58 [core.py:708] ImportError: cannot import name 'fp8_gemm_nt' from "
         "'deep_gemm' (/usr/local/lib/python3.12/site-packages/deep_gemm/__init__.py)", "user_code"),
        ("[rank3]: torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:", "user_code"),
        # the program's own words that its work failed, at warning (the corpus labels it user_code)
        ("2025-03-02 18:20:11,107 - WARNING - Eval batch error: mat1 and mat2 shapes cannot be multiplied (16x512 and 768x512)",
         "user_code"),
        # a disk that is full stays a disk's, whatever the level
        ("2025-01-07 10:02:13,441 - WARNING - ckpt - OSError: [Errno 28] No space left on device", "storage"),
    ],
)
def test_exceptions_at_error_or_in_the_programs_words_still_act(line: str, fault: str) -> None:
    assert acting_classes(line) == {fault}


# ---- a library's own check refusing the request (parsing/exception_subject.py) ----


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: Error in function 'BatchDecodeWithPagedKVCacheDispatched' at /opt/flashinfer/include/flashinfer/attention/"
        "decode.cuh:1022: Unsupported head_dim: 320",
        "(EngineCore_DP0 pid=77) ERROR 03-11 02:14:09 [core.py:1021] RuntimeError: Error in function 'SinglePrefillWithKVCache' at "
        "/workspace/flashinfer/prefill.cuh:2870: Unsupported group_size: 5",
    ],
)
def test_a_librarys_check_that_refuses_an_unsupported_request_is_user_code(line: str) -> None:
    assert acting_classes(line) == {"user_code"}


def test_the_same_check_naming_a_cuda_error_stays_cuda() -> None:
    line = ("RuntimeError: Error in function 'PrefillPlan' at /opt/flashinfer/include/flashinfer/attention/scheduler.cuh:512: "
            "CUDA error: an illegal memory access was encountered")
    assert acting_classes(line) == {"cuda_error"}


def test_a_runtime_error_with_no_subject_stays_unknown() -> None:
    assert acting_classes("RuntimeError: Error in function 'Foo' at /src/foo.cuh:12: step 3 did not converge") == {"unknown"}


@pytest.mark.parametrize("stamp", ["E607 21:52:16.255896587", "E1107 21:52:16.255896587"])
def test_the_flight_recorders_note_on_itself_stays_quiet_whatever_the_month(stamp: str) -> None:
    line = (f"[rank5]:[{stamp} ProcessGroupNCCL.cpp:667] Stack trace of the failed collective not found, potentially because "
            "FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.")
    assert acting_classes(line) == set()


@pytest.mark.parametrize("stamp", ["E909 08:45:31.916910323", "E1109 08:45:31.916910323"])
def test_process_group_nccls_error_lines_act_whatever_the_month(stamp: str) -> None:
    line = f"[rank2]:[{stamp} ProcessGroupNCCL.cpp:1316] [PG ID 0 PG GUID 0 Rank 2] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=12"
    assert acting_classes(line) == {"nccl_error"}


def test_whole_logs_fresh1_opened_keeps_its_figures() -> None:
    """whole_logs/fresh1 (opened in round 46): 27 of 29 fault lines given their class, no ordinary line fired. The two
    left are Buffer I/O errors on the same device within the kernel parser's fold window (one event for the burst, on its
    first line); the scorer counts a fold only over adjacent labelled lines (tests/fixtures/whole_logs/fresh1/README.md)."""
    from tools.whole_log_score import WHOLE_LOGS, score_folder

    total, _ = score_folder(WHOLE_LOGS / "fresh1")
    # (round 47) the scorer now credits a line folded into its burst's event on the same device: 29 of 29
    assert (total.right, total.faults, total.fired, total.ordinary) == (29, 29, 0, 5634)


# ---- Ray's wrapper of a task's exception, judged by the cause it names (parsing/errors.py) ----


@pytest.mark.parametrize(
    "line, fault",
    [
        ("ray.exceptions.RayTaskError(NotImplementedError): ray::Rollout.generate() (pid=7712, ip=10.4.1.9, "
         "actor_id=9c1e, repr=<Rollout object at 0x7f3a>)", "user_code"),
        ("(TaskRunner pid=3301) ray.exceptions.RayTaskError(KeyError):", "user_code"),
        ("ray.exceptions.RayTaskError(OSError): ray::Saver.save() (pid=512, ip=10.4.1.2) [Errno 28] No space left on device",
         "storage"),
    ],
)
def test_a_ray_task_error_is_judged_by_its_cause(line: str, fault: str) -> None:
    assert acting_classes(line) == {fault}


def test_a_ray_task_error_whose_cause_says_nothing_is_not_guessed_user_code() -> None:
    assert acting_classes("ray.exceptions.RayTaskError(RuntimeError): ray::Worker.step() (pid=88, ip=10.4.1.3)") == {"unknown"}
