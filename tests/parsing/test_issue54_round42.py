"""Issue 54, round 42 (fresh84 opened, G27): a BMC's event-log record of an uncorrectable error, an inference
serving engine's own word that one of its processes died, a serving engine short of memory for its own memory
settings, systemd-coredump's record with or without its user, and systemd's newer wording of a unit's OOM kill.

Every line is written for the test (other hosts, stamps, processes, sensors and numbers than the corpus rows),
beside the healthy look-alikes each reading must leave alone.
"""

from __future__ import annotations

import pytest

from faultlens.parsing.registry import parser_for
from tests.parsing.line_events import acting_verdicts, events, verdicts

# ---- a BMC SEL record of an uncorrectable error (rule host.bmc_sel_uncorrectable) ----


@pytest.mark.parametrize(
    "line",
    [
        "  1a4 | 03/02/2021 | 17:44:09 | Memory #0x53 | Uncorrectable ECC | Asserted",
        "   7 | 11/28/2023 | 02:10:55 | Memory DIMM_B2 | Uncorrectable ECC (@DIMMB2(CPU2)) | Asserted",
        "  3f | 06/14/2022 | 08:01:12 | Processor #0x0e | IERR | Asserted",
        "   12 | 01/09/2024 | 23:59:01 | Processor CPU1 Status | Uncorrectable machine check exception | Asserted",
        "  5c | 04/30/2020 | 12:12:12 | Critical Interrupt #0x1b | Bus Uncorrectable error | Asserted",
        "  5d | 04/30/2020 | 12:12:13 | Critical Interrupt PCIE_ERR | Bus Fatal Error | Asserted",
        "gpu-node-17 ipmi-check:  9e | 10/03/2025 | 04:40:21 | Memory Mmry ECC Sensor | Uncorrectable ECC | Asserted",
    ],
)
def test_a_sel_record_of_an_uncorrectable_error_is_kernel_and_an_alert(line: str) -> None:
    for source in ("kernel", "nccl"):
        assert verdicts(line, source) == [("kernel", "alert")], source


@pytest.mark.parametrize(
    "line",
    [
        "  1a5 | 03/02/2021 | 17:44:10 | Memory #0x53 | Uncorrectable ECC | Deasserted",
        "  1a6 | 03/02/2021 | 17:44:11 | Memory #0x53 | Correctable ECC | Asserted",
        "   13 | 01/09/2024 | 23:59:02 | Processor CPU1 Status | Correctable machine check error | Asserted",
        "  1a7 | 03/02/2021 | 17:44:12 | Memory #0x53 | Correctable ECC logging limit reached | Asserted",
        "   1 | 02/11/2023 | 09:15:44 | Event Logging Disabled #0x07 | Log area reset/cleared | Asserted",
        "  2d0 | 02/11/2023 | 09:16:02 | System Event #0x83 | Timestamp Clock Sync | Asserted",
        "   2 | 02/11/2023 | 09:16:40 | Power Supply PS2 Status | Presence detected | Asserted",
    ],
)
def test_corrected_deasserted_and_the_logs_own_records_are_quiet(line: str) -> None:
    assert acting_verdicts(line, "kernel") == []


# ---- a serving engine's process that died (rule serving.engine_died; the EngineDeadError types; the subject) ----


@pytest.mark.parametrize(
    "line",
    [
        "(EngineCore_DP1 pid=55120) ERROR 02-14 08:21:40 [core.py:842] EngineCore failed to start.",
        "(EngineCore_DP0 pid=7781) ERROR 07-02 19:03:11 [core.py:710] EngineCore encountered a fatal error.",
        "(Worker_TP3 pid=9120) ERROR 03-03 11:00:02 [multiproc_executor.py:671] WorkerProc failed to start.",
        "(VllmWorker rank=2 pid=4410) ERROR 05-21 06:44:09 [multiproc_executor.py:527] WorkerProc hit an exception.",
        "(Worker_PP1 pid=3130) ERROR 08-08 14:20:59 [multiproc_executor.py:880] WorkerProc failed.",
        "[2025-06-02 10:11:12 TP3] Scheduler hit an exception: Traceback (most recent call last):",
        "[2025-06-02 10:11:13] DetokenizerManager hit an exception: Traceback (most recent call last):",
        "[2025-06-02 10:11:14] Rank 2 scheduler is dead. Please check if there are relevant logs.",
        "(APIServer pid=31) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}",
        "RuntimeError: Failed to initialize scheduler rank 1",
        "(APIServer pid=88) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
        "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already.",
    ],
)
def test_a_serving_engines_process_death_is_user_code_and_an_alert(line: str) -> None:
    assert verdicts(line, "nccl") == [("user_code", "alert")]


def test_the_engines_death_ending_a_traceback_is_user_code_and_an_alert() -> None:
    p = parser_for("nccl")
    lines = [
        "Traceback (most recent call last):",
        '  File "/opt/venv/lib/python3.12/site-packages/vllm/v1/engine/utils.py", line 921, in wait_for_engine_startup',
        "    raise RuntimeError(",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]
    found = [e for line in lines for e in p.feed(line)] + p.flush()
    assert [(e.kind, e.data["fault"], e.data["action"]) for e in found] == [("exception", "user_code", "alert")]


@pytest.mark.parametrize(
    "line",
    [
        # vLLM's client at the teardown of a finished run prints it too: not read
        "(APIServer pid=1) ERROR 02-14 08:30:00 [core_client.py:610] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
        "ERROR 01-04 21:58:22 [core_client.py:564] Engine core proc EngineCore_0 died unexpectedly, shutting down client.",
        "(Worker_TP0 pid=9119) INFO 03-03 11:20:02 [multiproc_executor.py:702] WorkerProc shutting down.",
        "(EngineCore_DP0 pid=55120) INFO 02-14 08:20:11 [core.py:93] Initializing a V1 LLM engine (v0.11.0) with config: model='Qwen/Qwen3-8B'",
        "[2025-06-02 10:11:20] The server is fired up and ready to roll!",
    ],
)
def test_an_engines_teardown_and_start_up_lines_are_quiet(line: str) -> None:
    assert acting_verdicts(line, "nccl") == []


# ---- memory short for a serving engine's own memory settings (parsing/exception_subject.py) ----


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        "[2025-06-02 10:09:01 TP0] RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.7",
        "RuntimeError: Insufficient memory for the KV cache: increase gpu_memory_utilization or decrease max_model_len.",
        "RuntimeError: out of memory while profiling: lower max_num_batched_tokens or max-num-seqs",
    ],
)
def test_memory_short_naming_the_engines_memory_settings_is_user_code(line: str) -> None:
    assert verdicts(line, "nccl") == [("user_code", "rollback")]


@pytest.mark.parametrize(
    "line",
    [
        # a shortage that names no setting of the engine, and a setting with no shortage, keep the old reading
        "RuntimeError: Not enough memory to map the shared buffer",
        "RuntimeError: gpu_memory_utilization must be between 0 and 1, got 1.2",
    ],
)
def test_a_shortage_without_the_setting_or_the_setting_without_a_shortage_stays_unknown(line: str) -> None:
    assert verdicts(line, "nccl") == [("unknown", "stop_time_diagnosis")]


def test_an_engines_memory_settings_at_info_are_quiet() -> None:
    line = "[2025-06-02 10:08:40 TP0] Memory pool end. avail mem=11.93 GB, mem_fraction_static=0.88, max_total_num_tokens=431211"
    assert events(line, "nccl") == []


# ---- systemd-coredump's record, with or without its user (rule app.core_dumped) ----


@pytest.mark.parametrize(
    "line",
    [
        "Jan 07 22:14:03 gpu-a12 systemd-coredump[88410]: Process 88391 (python3) of user 1001 dumped core.",
        "systemd-coredump[4133]: Process 4120 (Xwayland) dumped core.",
        "Feb 19 03:00:44 build-7 systemd-coredump[1204]: Process 1187 (node) dumped core.",
    ],
)
def test_systemd_coredumps_record_is_app_fault_and_recorded(line: str) -> None:
    assert verdicts(line, "kernel") == [("app_fault", "none")]


@pytest.mark.parametrize(
    "line",
    [
        "Jan 07 22:14:03 gpu-a12 systemd[1]: Started Process Core Dump (PID 88409/UID 0).",
        "Jan 07 22:14:05 gpu-a12 systemd[1]: systemd-coredump@3-88409-0.service: Deactivated successfully.",
    ],
)
def test_the_core_dump_services_own_lines_are_quiet(line: str) -> None:
    assert acting_verdicts(line, "kernel") == []


# ---- systemd's newer wording of a unit's OOM kill (rule oom.systemd_unit) ----


@pytest.mark.parametrize(
    "line",
    [
        "Mar 02 06:41:17 trainer-3 systemd[1]: train-job.service: The kernel OOM killer killed some processes in this unit.",
        "Mar 02 06:41:17 laptop systemd[2210]: app-gnome-firefox-4411.scope: The kernel OOM killer killed some processes in this unit.",
        "user.slice: The kernel OOM killer killed some processes in this unit.",
    ],
)
def test_systemds_newer_oom_wording_is_host_oom_recorded(line: str) -> None:
    assert verdicts(line, "kernel") == [("host_oom", "none")]


@pytest.mark.parametrize(
    "line",
    [
        "Mar 02 06:41:18 trainer-3 systemd[1]: train-job.service: Deactivated successfully.",
        "Mar 02 06:41:18 trainer-3 systemd[1]: train-job.service: Consumed 3h 2min 11.402s CPU time, 61.2G memory peak.",
        "Mar 02 06:41:23 trainer-3 systemd[1]: train-job.service: Scheduled restart job, restart counter is at 2.",
    ],
)
def test_a_units_end_and_restart_are_quiet(line: str) -> None:
    assert acting_verdicts(line, "kernel") == []
