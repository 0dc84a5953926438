"""Issue 54 round 9 (fresh9 and fresh10 mined): a line's own level first, for every parser.

A trainer-side line that its logger printed at info, notice or debug (NCCL's ``NCCL INFO``, Python
logging's ``INFO``, glog / c10's ``I0722 ...``) is recorded and never acted on, whatever words follow;
the same words at warning or error still act. RCCL's set-up advice WARNs and amdgpu's display engine
are recorded, not acted on; their failing neighbours still act.
"""

from __future__ import annotations

import pytest

from faultlens.parsing.registry import parser_for
from faultlens.parsing.severity import trainer_level


def _events(source: str, line: str) -> list:
    p = parser_for(source)
    return p.feed(line) + p.flush()


def _acting(source: str, line: str) -> list:
    return [e for e in _events(source, line) if e.data.get("action") not in (None, "none")]


# Alarming words behind an INFO level, in each logging format that states one. Before round 9 a line
# that began with "NCCL INFO" (no host prefix) went on to the catalogue and the error words and acted.
INFO_LINES = [
    "NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0 Connection reset by peer",
    "host:1:1 [0] NCCL INFO NET/IB : Got completion from peer with error 12, opcode 0, len 0, vendor err 129",
    "[rank0]: host:1:1 [0] NCCL INFO cudaDriverVersion 12020 unhandled cuda error out of memory",
    "2024-01-01 10:00:00,123 - train - INFO - CUDA error: out of memory, retrying with a smaller batch",
    "[INFO] RuntimeError: CUDA out of memory handled, skipping batch",
    "INFO:root:RuntimeError: NCCL error: unhandled system error, retrying the rendezvous",
    "2024-01-01 10:00:00.123 | INFO     | train:step:12 - Connection reset by peer, NCCL error retried: ok",
    "I0722 21:51:23.405504 1 ProcessGroupNCCL.cpp:621] NCCL watchdog timeout configured: Connection reset by peer",
    "[rank3]:[I722 21:51:23.405504479 ProcessGroupNCCL.cpp:621] CUDA error: an illegal memory access was encountered",
]


@pytest.mark.parametrize("line", INFO_LINES)
def test_an_info_line_never_acts(line: str) -> None:
    assert _acting("nccl", line) == []


@pytest.mark.parametrize("line", [
    "2024-01-01 10:00:00,123 - train - ERROR - CUDA error: out of memory",
    "[ERROR] RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "[rank3]:[E722 21:51:23.405504479 ProcessGroupNCCL.cpp:621] CUDA error: an illegal memory access was encountered",
    "ValueError: INFO field missing; RuntimeError: CUDA error: an illegal memory access was encountered",
])
def test_the_same_words_at_a_higher_level_still_act(line: str) -> None:
    assert _acting("nccl", line)


@pytest.mark.parametrize("line", [
    "nd20-01:191191:219889 [0] NCCL INFO misc/socket.cc:564 -> 2",
    "node1:54573:54696 [1] INFO bootstrap.cu:169 -> 2",  # NCCL < 2.3: no word NCCL (rule nccl.other_collective_library_error)
])
def test_nccl_info_trace_of_a_failing_call_is_recorded_not_acted_on(line: str) -> None:
    # NCCLCHECK prints "file:line -> rc" at INFO as an error climbs the stack; the WARN at its origin acts.
    events = _events("nccl", line)
    assert [(e.data["fault"], e.data["action"]) for e in events] == [("nccl_error", "none")]
    assert "info" in events[0].data["quiet"]


def test_a_progress_line_at_info_still_reports_a_nan_loss() -> None:
    # Caffe logs every iteration through glog at INFO: the NaN is a value it read, not its words
    events = _acting("nccl", "I0712 12:18:40.334496  3123 solver.cpp:228] Iteration 100, loss = -nan")
    assert [e.data["fault"] for e in events] == ["nan_loss"]


@pytest.mark.parametrize("text,level", [
    ("NCCL INFO Channel 00", 6), ("mylog - DEBUG - x", 7), ("| INFO     | m:f:1 - x", 6), ("[INFO|trainer.py:12] x", 6),
    ("E0722 21:51:23.405504 1 a.cc:1] x", 3), ("W0722 21:51:23.405504 1 a.cc:1] x", 4), ("RuntimeError: CUDA error", None),
    ("level=info msg=x", 6),
])
def test_trainer_level(text: str, level: int | None) -> None:
    assert trainer_level(text) == level


# RCCL's init checks (ROCm/rccl src/init.cc: WARN("Missing \"iommu=pt\" from kernel command line which
# can lead to system instablity or hang!")), printed at every start of a job that then runs.
RCCL_ADVICE = [
    'g1072:1263988:1263988 [3] /long_pathname_so_that_rpms_can_package_the_debug_info/src/extlibs/rccl/build/src/init.cpp:126 '
    'NCCL WARN Missing "HSA_FORCE_FINE_GRAIN_PCIE=1" from environment which can lead to low RCCL performance, system instablity or hang!',
    'sharbox-ultra:204802:204802 [0] /home/elias/rccl/build/release/hipify/src/init.cc:125 NCCL WARN Missing "amd_iommu=on" '
    'from kernel command line which can lead to system instablity or hang!',
]


@pytest.mark.parametrize("line", RCCL_ADVICE)
def test_rccl_setup_advice_is_recorded(line: str) -> None:
    events = _events("nccl", line)
    assert events and all(e.data["action"] == "none" for e in events)


@pytest.mark.parametrize("line", [
    "host:1:1 [0] transport/net_ib.cc:1000 NCCL WARN NET/IB : Got completion from peer 10.0.0.2 with error 12, opcode 0, len 0, vendor err 129",
    "host:1:1 [0] init.cc:100 NCCL WARN Call to connect failed, which can lead to a hang: Connection refused",
    "host:1:1 [0] enqueue.cc:100 NCCL WARN Cuda failure 'out of memory'",
])
def test_a_warn_that_names_a_failure_still_acts(line: str) -> None:
    assert _acting("nccl", line)


def test_amdgpu_display_engine_is_recorded_but_a_compute_ring_timeout_acts() -> None:
    # drivers/gpu/drm/amd/display/dc/dc_helper.c generic_reg_wait: DC_LOG_WARNING("REG_WAIT timeout ...")
    display = "[ 4972.438521] amdgpu 0000:03:00.0: amdgpu: [drm] REG_WAIT timeout 1us * 100 tries - dcn32_program_compbuf_size line:147"
    assert _events("kernel", display) and _acting("kernel", display) == []
    ring = "[ 4972.438521] amdgpu 0000:03:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=2"
    assert [e.data["fault"] for e in _acting("kernel", ring)] == ["gpu_reset_required"]


@pytest.mark.parametrize("line", [
    "6,123,99999000000,-;NVRM: Xid (PCI:0000:01:00): 48, pid=1, DBE (0x1,0x2)",
    "<6>[99999.0] Out of memory: Killed process 123 (python) total-vm:1kB",
    "<6>[99999.0] BUG: soft lockup - CPU#3 stuck for 22s! [python:123]",
])
def test_a_kernel_code_record_at_info_is_recorded(line: str) -> None:
    # The Xid, OOM and stall readers are code, not catalogue rules: before round 9 they ignored the level.
    events = _events("kernel", line)
    assert events and _acting("kernel", line) == []


@pytest.mark.parametrize("line", [
    "3,123,99999000000,-;NVRM: Xid (PCI:0000:01:00): 48, pid=1, DBE (0x1,0x2)",
    "<3>[99999.0] Out of memory: Killed process 123 (python) total-vm:1kB",
    "[99999.0] BUG: soft lockup - CPU#3 stuck for 22s! [python:123]",
])
def test_the_same_kernel_records_at_their_own_level_act(line: str) -> None:
    assert _acting("kernel", line)


# The families mined from fresh9 and fresh10, each by its program's own format (the sources are in the
# rules' "why" and docs/rules.md, round 9); a healthy look-alike of each beside it.
FAMILIES = [
    ("nccl", "[rank3]:[E722 21:51:23.405504479 ProcessGroupNCCL.cpp:621] [Rank 3] Some NCCL operations have failed or timed out. "
             "Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.", "nccl_error"),
    ("nccl", "[rank2]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms "
             "for recv operation to complete", "nccl_error"),
    ("nccl", "ExternalError:  Nccl error, unhandled cuda error  (at /paddle/paddle/fluid/platform/collective_helper.cc:83)", "nccl_error"),
    ("nccl", 'GGML_ASSERT: C:\\Users\\jeff\\git\\ollama\\llm\\llama.cpp\\ggml-cuda.cu:244: !"CUDA error"', "cuda_error"),
    ("nccl", "rocdevice.cpp Callback: Queue 0x7fc220400000 aborting with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent "
             "attempted to access memory beyond the largest legal address. code: 0x29", "cuda_error"),
    ("nccl", "(RayWorkerWrapper pid=92234, ip=172.19.24.110) mlx5: host_unknown: got completion with error: [repeated 2x across cluster]",
     "nccl_error"),
    ("kernel", "Aug 27 01:11:45 arch kernel: amdgpu 0000:03:00.0: amdgpu: ERROR: System is going to shutdown due to GPU SW CTF!", "gpu_thermal"),
    ("kernel", " kernel:thermal thermal_zone0: gpu-thermal: critical temperature reached, shutting down", "gpu_thermal"),
    ("kernel", "GetTGT error, error: Kerberos SessionError: KRB_AP_ERR_SKEW(Clock skew too great)", "clock_skew"),
    ("kernel", "2015-09-14T06:44:37.084] error: Munge decode failed: Expired credential", "clock_skew"),
    ("kernel", "Clocksource 'wdtest-ktime' skewed 199999644 ns (199 ms) over watchdog 'kvm-clock' interval of 400744390 ns (400 ms)", "clock_skew"),
    ("kernel", "Jan  1 16:13:57 NTP Client: System time changed, offset: 189349226.626505s", "clock_skew"),
    ("kernel", "Bad mode in Synchronous Abort handler detected, code 0x8600000f -- IABT (current EL)", "kernel"),
    ("kernel", "Sun Jun 11 23:02:41 2023 daemon.notice netifd: Network device 'eth5' link is down", "nic"),
    ("nccl", "e001.53882PSM2 no hfi units are active (err=23)", "nic"),
    ("kernel", "Jun 28 04:18:32 lotus-58vm5 kernel: LustreError: 137-5: testfs-OST0001_UUID: not available for connect from 0@lo "
               "(no target). If you are running an HA pair check that the target is mounted on the other server.", "storage"),
]


@pytest.mark.parametrize("source,line,fault", FAMILIES)
def test_a_round9_family_member_gets_its_class(source: str, line: str, fault: str) -> None:
    assert fault in {e.data["fault"] for e in _acting(source, line)}, line


@pytest.mark.parametrize("source,line", [
    ("nccl", "PSM2 hfi unit 0 is active, 1 of 1 units active"),
    ("nccl", "[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1"),
    ("nccl", "GGML_ASSERT: ggml.c:1234: ne % ggml_blck_size(type) == 0"),
    ("nccl", "(VllmWorkerProcess pid=1927518) INFO 08-31 09:50:45 multiproc_worker_utils.py:215] Worker ready; awaiting tasks"),
    ("kernel", "[ 3.2] thermal thermal_zone1: cpu-thermal: critical temperature reached, shutting down"),
    ("kernel", "2015-09-14T06:44:37.084] error: Munge decode failed: Invalid credential"),
    ("kernel", "Jan  1 16:13:57 NTP Client: System time changed, offset: 0.626505s"),
    ("kernel", "Sun Jun 11 23:02:45 2023 daemon.notice netifd: Network device 'eth5' link is up"),
    ("kernel", "Jun 28 04:20:01 lotus-58vm5 kernel: Lustre: testfs-OST0001: Recovery over after 0:05, of 2 clients 2 recovered"),
])
def test_a_round9_look_alike_stays_quiet(source: str, line: str) -> None:
    got = _acting(source, line)
    if "cpu-thermal" in line:  # a CPU's zone is no GPU's: whatever the host's class, not gpu_thermal
        assert "gpu_thermal" not in {e.data["fault"] for e in got}
    elif "Munge" in line:  # a key or a credential refused is not the clock
        assert "clock_skew" not in {e.data["fault"] for e in got}
    else:
        assert got == [], line
