"""Issue 54 round 24: fresh batches 41-42 mined, each fix by the general property or form that carries,
not by the rows' text (docs/rules.md, round 24).

The healthy line that fired first, quiet by a property of its own, beside the real fault lines of the
same shape that must still act; then the programs' own formats the misses took, each read in a shape
other than the row's (another device, engine, module, signal or wording the same program prints). Every
line is a corpus row's (tests/fixtures/log_corpus, with its provenance there) or a rule's example, unless
its comment says it is the same shape with a word changed.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting as _acting
from tests.parsing.line_events import classes as _classes
from tests.parsing.line_events import events as _events

_HEALTHY = [
    # an AER record's detail line behind aer.c's own 'AER: ' prefix: the header decides (fresh42)
    ("[  194.469050] nvme 0000:04:00.0: AER:   device [8086:f1a6] error status/mask=00001000/0000e000", "kernel"),
    # the same record's bit line, behind another driver's tag (the driver and bit changed)
    ("igc 0000:2b:00.0: AER:    [12] Timeout", "kernel"),
    # another driver's probe failing and another module missing: not the job's devices (the drivers changed)
    ("[ 9000.100000] snd_hda_intel: probe of 0000:00:1f.3 failed with error -22", "kernel"),
    (
        "Oct 02 08:56:17 lilith dracut-pre-udev[467]: modprobe: FATAL: Module vboxdrv not found in directory /lib/modules/6.5.4",
        "kernel",
    ),
    # the old XFS format's notices (the device changed): no error
    ('Filesystem "dm-0": Disabling barriers, trial barrier write failed', "kernel"),
    ('Filesystem "sda1": Starting XFS recovery on filesystem: sda1 (logdev: internal)', "kernel"),
    # radeon's video encoder failing to resume: an engine the job does not use (fresh41's healthy row's form)
    ("[ 9000.100000] radeon 0000:0a:00.0: failed VCE resume (-110).", "kernel"),
    # Ray's task failing for another reason, and DeepSpeed's rank ending with a status, not a signal (the values changed)
    (
        "[2022-10-12 16:14:18,843 I 60002 60031] task_manager.cc:458: task c8ef45ccd0112571ffffffffffffffffffffffff01000000 "
        "retries left: 3, oom retries left: 3, task failed due to oom: 0",
        "nccl",
    ),
    (
        "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', "
        "'--local_rank=0'] exits with return code = 1",
        "nccl",
    ),
]


@pytest.mark.parametrize(("line", "source"), _HEALTHY)
def test_a_healthy_line_is_quiet_by_its_own_property(line: str, source: str) -> None:
    assert _acting(line, source) == []


_STILL_FAULTS = [
    # the AER record's own header, uncorrected, behind the same prefix (the device changed)
    (
        "nvme 0000:04:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)",
        "kernel",
        "kernel",
    ),
]


@pytest.mark.parametrize(("line", "source", "fault"), _STILL_FAULTS)
def test_the_same_shapes_that_are_faults_still_act(line: str, source: str, fault: str) -> None:
    acting = _acting(line, source)
    assert acting, line
    assert fault in {e.data.get("fault") for e in acting}


_FORMS = [
    # a GPU driver's probe failing and its module missing or refused (the driver, device and error changed)
    ("[ 9000.100000] amdgpu: probe of 0000:0b:00.0 failed with error -12", "kernel", "gpu_lost"),
    (
        "Oct 02 08:56:17 host systemd-modules-load[400]: modprobe: ERROR: could not insert 'nvidia': No such device",
        "kernel",
        "gpu_lost",
    ),
    # NVML unable to start with an unknown error (fresh41), as the version mismatch
    ("Failed to initialize NVML: Unknown Error", "nccl", "gpu_lost"),
    # the old XFS format's errors and shutdown trace (the device, function and line changed)
    ('Filesystem "sdb1": xfs_trans_read_buf: error 5 returned.', "kernel", "storage"),
    (
        "xfs_force_shutdown(sdb1,0x2) called from line 1033 of file fs/xfs/xfs_log.c.  Return address = 0xffffffff88091c2b",
        "kernel",
        "storage",
    ),
    # nfs-utils' server daemons unable to serve (another failure of rpc.nfsd, in a journal)
    (
        "Jun 10 10:00:00 nas rpc.nfsd[900]: rpc.nfsd: error starting threads: errno 38 (Function not implemented)",
        "kernel",
        "storage",
    ),
    # OpenVZ's OOM head for another container (the process, container and gfp changed)
    ("[ 9000.100000] 1234 (java) invoked oom-killer in ub 101 generation 0 gfp 0x201da", "kernel", "host_oom"),
    # the scheduler's corrupt run queue (another host and time)
    ("Jan 01 10:00:00 host kernel: bad: scheduling from the idle thread!", "kernel", "kernel"),
    # Ray's task killed by the memory monitor, without the log file's path (fresh41's row's form)
    (
        "[2022-10-12 16:14:18,843 I 60002 60031] task_manager.cc:458: task c8ef45ccd0112571ffffffffffffffffffffffff01000000 "
        "retries left: 0, oom retries left: 2, task failed due to oom: 1",
        "nccl",
        "host_oom",
    ),
    # Ray's agent reporting its raylet gone unexpectedly (the address and id changed)
    (
        "2023-01-01 00:00:00,000 ERROR agent.py:220 -- Raylet is terminated: ip=10.0.0.5, id=ab12. Termination is unexpected. "
        "Possible reasons include: (1) SIGKILL by the user or system OOM killer",
        "nccl",
        "node_silent",
    ),
    # DeepSpeed's launcher: a rank killed by SIGSEGV (the command changed; its SIGKILL is below)
    (
        "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['python', 'train.py'] exits with return code = -11",
        "nccl",
        "user_code",
    ),
    # c10's caching allocator's OOM at its warning level (another rank and device)
    (
        "[rank3]:[W810 02:37:06.584963545 CUDACachingAllocator.cpp:3933] memory allocation failed with OOM on device 3 while "
        "trying to allocate 1073741824 bytes (free: 917372928, total: 85017493504).",
        "nccl",
        "user_code",
    ),
    # a kernel not built for the device, in the CUDA samples' and NCCL's CUDACHECK words as torch's (docs/design.md §9)
    ("Failed to launch vectorAdd kernel (error code invalid device function)!", "nccl", "user_code"),
    ("Cuda failure 'invalid device function'", "nccl", "user_code"),
]


@pytest.mark.parametrize(("line", "source", "fault"), _FORMS)
def test_each_programs_own_format_is_read(line: str, source: str, fault: str) -> None:
    assert fault in _classes(line, source), line
    assert _acting(line, source), line


_RECORDED = [
    # display and desktop GPUs' engine hangs and resets (radeon, nouveau, i915): gpu_reset_required, recorded
    ("[ 9000.100000] radeon 0000:01:00.0: ring 3 stalled for more than 10240msec", "gpu_reset_required"),
    ("[13451.531788] radeon 0000:01:00.0: GPU softreset: 0x00000019", "gpu_reset_required"),
    ("[ 9000.100000] nouveau 0000:01:00.0: fifo: runlist 0: scheduled for recovery", "gpu_reset_required"),
    ("[  785.577010] i915 0000:00:02.0: [drm] GPU HANG: ecode 9:1:e757fefe, in test_g_monitor_ [25627]", "gpu_reset_required"),
    (
        "[ 9000.100000] i915 0000:00:02.0: [drm] *ERROR* bcs0 reset request timed out: {request: 00000001, RESET_CTL: 00000001}",
        "gpu_reset_required",
    ),
    # nouveau's graphics trap in a channel and lima's job error: one context's fault, app_fault recorded (the units changed)
    ("[ 9000.100000] nouveau 0000:01:00.0: gr: GPC0/TPC1/TEX trap: global 00000002 [TEX] tex 00000010", "app_fault"),
    ("[ 9000.100000] lima 1c40000.gpu: gp task error int_state=0 status=5", "app_fault"),
]


@pytest.mark.parametrize(("line", "fault"), _RECORDED)
def test_a_display_gpus_hang_or_fault_is_recorded_in_its_class(line: str, fault: str) -> None:
    assert (fault, "none") in {(e.data.get("fault"), e.data.get("action")) for e in _events(line, "kernel")}
    assert _acting(line) == []


def test_deepspeeds_sigkill_is_host_oom_as_torchruns() -> None:
    # SIGKILL's class whoever reports it (docs/design.md §9), recorded as signals.py records it (the command changed)
    line = "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['python', 'train.py'] exits with return code = -9"
    assert _classes(line, "nccl") == _classes("  exitcode  : -9 (pid: 6421)", "nccl") == {"host_oom"}
