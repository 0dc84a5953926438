"""Issue 54 round 14: an application's end read by its general form, not by any batch's rows.

Who reports the end decides the class: the OS's record of a process that crashed (the kernel's
segfault and trap records, print-fatal-signals, audit's ANOM_ABEND, systemd and systemd-coredump) is
``app_fault``, recorded (action none: a process is named, not the job, and the machine is not to
blame); the program's own fatal report (the C library's heap and stack checks, assert(), Go's and
Rust's panics) is ``user_code``. Each beside the healthy look-alikes of its form (docs/rules.md,
round 14). The lines cite where they were printed (parsing/rules.toml carries the same as examples).
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting as _acting
from tests.parsing.line_events import events as _events


def _classes(line: str, source: str = "kernel") -> set[tuple[str, str]]:
    return {(e.data.get("fault"), e.data.get("action")) for e in _events(line, source)}


# --- the OS's record of a crash: app_fault, recorded ------------------------------------------------------
_OS_RECORDS = [
    # arch/x86/kernel/traps.c / fault.c show_signal_msg, in a library no GPU stack owns
    "Dec 20 17:21:35 host kernel: [22022.892840] upowerd[3838]: segfault at 65626154 ip b750c3f2 sp bfab6c90 error 4 in "
    "libimobiledevice.so.2.0.1[b7507000+1c000]",  # fresh11 kernel_oops (mined batch), a daemon's crash
    "postgres[16376]: segfault at 7fff4aca6000 ip 00000031ac288bfb sp 00007fff4aca3e38 error 4 in libc-2.12.so[31ac200000+189000]",
    "kernel: [920575.093899] traps: openarc[9640] general protection ip:55ff9fed033f sp:7f533f9ad240 error:0 in openarc[55ff9fec5000+13000]",
    # kernel/signal.c print_fatal_signal (public GitHub file, index ids 61221979938, 12466329263)
    "[ 8192.294499] chrome/21079: potentially unexpected fatal signal 11.",
    "kern  :info  : [372850.970643] potentially unexpected fatal signal 11.",
    # auditd ANOM_ABEND (index ids 17289971622, 19099082900)
    'type=ANOM_ABEND msg=audit(1222174623.498:608): auid=4294967295 uid=0 gid=7 ses=4294967295 '
    'subj=system_u:system_r:cupsd_t:s0-s0:c0.c1023 pid=7192 comm="ipp" sig=11',
    'type=ANOM_ABEND msg=audit(1522102229.772:2026): auid=4294967295 uid=0 gid=0 ses=4294967295 subj=system_u:system_r:spc_t:s0 '
    'pid=1784 comm="VirtualBox" reason="memory violation" sig=6',
    # systemd-coredump and systemd (index ids 49055163231, 4226506039, 57035027718)
    "Message: Process 5134 (gnome-shell) of user 1000 dumped core.",
    "Mar 24 14:08:03 anel systemd[1]: mariadb.service: Main process exited, code=dumped, status=11/SEGV",
    "Mar 24 14:08:03 anel systemd[1]: mariadb.service: Failed with result 'core-dump'.",
]


@pytest.mark.parametrize("line", _OS_RECORDS)
def test_the_os_record_of_a_crash_is_app_fault_recorded(line: str) -> None:
    # the journal / syslog stream, which the kernel parser reads
    assert ("app_fault", "none") in _classes(line)
    assert _acting(line) == []  # a process named, not the job: never an alert on its own


def test_a_crash_inside_nccl_or_cuda_stays_theirs_and_acts() -> None:
    # leptonai/gpud components/accelerator/nvidia/nccl/kmsg_matcher_test.go
    nccl = ("[Thu Oct 10 03:06:53 2024] pt_main_thread[2536443]: segfault at 7f797fe00000 ip 00007f7c7ac69996 sp 00007f7c12fd7c30 "
            "error 4 in libnccl.so.2[7f7c7ac00000+d3d3000]")
    assert _classes(nccl) == {("nccl_error", "stop_time_diagnosis")}


@pytest.mark.parametrize("line", [
    # a unit stopped, not crashed: TERM / KILL are the stopper's (public GitHub file, index id 47650874278)
    "Jan 31 01:37:15 debian systemd[1]: elasticsearch.service: Main process exited, code=killed, status=15/TERM",
    "Jan 31 01:37:15 debian systemd[1]: elasticsearch.service: Failed with result 'timeout'.",
    # a clean exit and systemd-coredump's own unit finishing (synthetic, systemd's formats)
    "Nov 29 10:00:01 host systemd[1]: trainer.service: Main process exited, code=exited, status=0/SUCCESS",
    "Nov 29 10:00:01 host systemd[1]: systemd-coredump@0-4400-0.service: Succeeded.",
    # the kernel command line that turns the report on, and an audit record of another type (synthetic)
    "[    0.000000] Kernel command line: BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro print-fatal-signals=1",
    "type=ANOM_PROMISCUOUS msg=audit(1700000000.123:456): dev=eth0 prom=256 old_prom=0 auid=1000 uid=0 gid=0 ses=2",
])
def test_what_is_not_a_crash_gives_nothing(line: str) -> None:
    assert not any(f == "app_fault" for f, _ in _classes(line))
    assert _acting(line) == []


# --- the program's own fatal report: user_code ---------------------------------------------------------------
_PROGRAM_REPORTS = [
    # glibc malloc_printerr and __stack_chk_fail (index ids 14394592949, 37879712649, 48316317354, 71260255307)
    ("*** stack smashing detected ***: terminated", "stop_time_diagnosis"),
    ("double free or corruption (!prev)", "stop_time_diagnosis"),
    ("*** Error in `python': double free or corruption (!prev): 0x000055b6d43b5f00 ***", "stop_time_diagnosis"),
    ("free(): double free detected in tcache 2", "stop_time_diagnosis"),
    # glibc __assert_fail (index ids 71260255307, 20480043109)
    ("a.out: lista.c:31: conta: Assertion `n >= 0' failed.", "rollback"),
    ("a.out: main.c:8: main: Assertion `0' failed.", "rollback"),
    # Go runtime's unrecovered panic and its signal line (index id 40923637608); Rust's (21994357849, 50993738179)
    ("panic: runtime error: invalid memory address or nil pointer dereference", "rollback"),
    ("[signal SIGSEGV: segmentation violation code=0x1 addr=0x8 pc=0x535677]", "rollback"),
    ("thread 'main' panicked at 'index out of bounds: the len is 5 but the index is 10', src/main.rs:19:19", "rollback"),
    ("[00:21:03] thread 'main' panicked at 'Box<Any>', librustc_errors/lib.rs:586:9", "rollback"),
]


@pytest.mark.parametrize("line, action", _PROGRAM_REPORTS)
def test_the_programs_own_fatal_report_is_user_code(line: str, action: str) -> None:
    # the program's own output: the job's log (source nccl)
    assert ("user_code", action) in _classes(line, "nccl")
    assert {e.data.get("fault") for e in _acting(line, "nccl")} == {"user_code"}  # never a machine's class


@pytest.mark.parametrize("line", [
    # the device-side form carries block / thread (tests/parsing/test_issue54_round11.py, THCUNN's bounds check)
    "/opt/conda/work/torch/lib/THCUNN/SpatialClassNLLCriterion.cu:40: void cunn_kernel(T *) [with T = float]: block: [0,0,0], "
    "thread: [49,0,0] Assertion `t >= 0 && t < n_classes` failed.",
    # a host assert in a CUDA file's checking code (darknet's check_error, the same file)
    "darknet: ./src/cuda.c:36: check_error: Assertion `0' failed.",
])
def test_cudas_asserts_stay_cudas(line: str) -> None:
    assert not any(e.data.get("rule") == "app.assert_failed" for e in _events(line, "nccl"))


@pytest.mark.parametrize("line", [
    # net/http recovered a handler's panic: the server goes on (Kueue webhook, index id 53229546089)
    "2024/01/29 16:04:41 http: panic serving 10.244.0.1:59326: runtime error: invalid memory address or nil pointer dereference",
    # words of the forms in ordinary lines (synthetic)
    "INFO: running with MALLOC_CHECK_=3 to catch double free bugs early",
    "test_assertions.py::test_assert_failed_message PASSED",
    "the kernel prints 'potentially unexpected fatal' only with print-fatal-signals set",
])
@pytest.mark.parametrize("source", ["nccl", "kernel"])
def test_look_alikes_of_the_program_forms_stay_quiet(line: str, source: str) -> None:
    assert _acting(line, source) == []


# --- a GPU context's fault in drivers outside the compute stack: app_fault, recorded ----------------------------
@pytest.mark.parametrize("line", [
    # nouveau: an MMU fault on a process's channel (kernel bugzilla 201847 on dri-devel, index id 3022651293),
    # the channel killed and GSP-RM's robust-channel report of an Xid 31 (zed-industries/zed#12696)
    "[25877.946511] nouveau 0000:01:00.0: fifo: fault 01 [WRITE] at 000000000a721000 engine 00 [GR] client 0f [GPC0/PROP_0] "
    "reason 82 [] on channel 4 [00ff85c000 X[3819]]",
    "[  388.861780] nouveau 0000:01:00.0: Zed[1867]: channel 40 killed!",
    "[  388.861741] nouveau 0000:01:00.0: gsp: rc engn:00000001 chid:40 type:31 scope:1 part:233",
    # (i915's 'GPU HANG: ecode', a hung engine the driver resets, is gpu_reset_required since round 24, still recorded:
    # tests/parsing/test_issue54_round24.py)
    # Arm Mali under panfrost (index id 29111537765)
    "[   80.129083] panfrost 13000000.gpu: Unhandled Page fault in AS0 at VA 0x0000000000000000",
])
def test_a_gpu_contexts_fault_is_the_applications_recorded(line: str) -> None:
    assert ("app_fault", "none") in _classes(line)
    assert _acting(line) == []


@pytest.mark.parametrize("line", [
    # faults of the driver's own clients, not a process's (index ids 40722284315, 41475330822)
    "[25877.946511] nouveau 0000:01:00.0: fifo: fault 00 [VIRT_READ] at 00000000000bd000 engine c0 [BAR2] client 07 "
    "[HUB/HOST_CPU] reason 0d [REGION_VIOLATION] on channel -1 [01ffedf000 unknown]",
    "[  961.579832] nouveau 0000:01:00.0: fifo: fault 01 [WRITE] at 000000000069f000 engine 15 [CE0] client 01 [HUB/CE0] "
    "reason 02 [PTE] on channel 1 [00ff73d000 DRM]",
    # a hang a selftest provoked, naming no process (index id 12663389534); a fence timing out (fresh14, healthy)
    "[  314.777958] i915 0000:00:02.0: [drm] GPU HANG: ecode 12:0:00000000",
    "[   67.112494] Asynchronous wait on fence NVIDIA:nvidia.prime:0 timed out (hint:submit_notify [i915])",
])
def test_the_drivers_own_faults_are_not_an_applications(line: str) -> None:
    assert not any(f == "app_fault" for f, _ in _classes(line))
    assert _acting(line) == []


# --- a failing exit status with no signal names no cause: recorded ------------------------------------------------
@pytest.mark.parametrize("line", [
    "srun: error: node17: task 3: Exited with exit code 1",  # Slurm's srun (src/srun/step_launch.c), a line the model read as host_oom
    "mpirun detected that one or more processes exited with non-zero status, thus causing the job to be terminated.",  # Open MPI
    "  exitcode  : 1 (pid: 6421)",  # torchrun's failure summary (torch/distributed/elastic/multiprocessing/errors)
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 1234) of binary: /usr/bin/python3",
])
def test_a_failing_exit_status_is_recorded_not_guessed(line: str) -> None:
    events = _events(line, "nccl")
    assert events and {(e.data.get("fault"), e.data.get("action")) for e in events} == {("unknown", "none")}


@pytest.mark.parametrize("line, fault", [
    # a status that is a signal keeps the signal's reading (fresh1 trainer_signals, fresh2)
    ("  exitcode  : -11 (pid: 6421)", "user_code"),
    ("Process finished with exit code 139 (interrupted by signal 11: SIGSEGV)", "user_code"),
    ("srun: error: node17: task 3: Exited with exit code 137", "host_oom"),
])
def test_a_status_that_is_a_signal_keeps_its_reading(line: str, fault: str) -> None:
    assert fault in {e.data.get("fault") for e in _events(line, "nccl")}


# --- the device's memory exhausted, in the runtime API's own name: user_code as CUDA's OOM -------------------------
@pytest.mark.parametrize("line", [
    # torch's MPS allocator (MPSAllocator.mm; a fine-tune on Apple silicon, public GitHub file index id 27576751995)
    "RuntimeError: MPS backend out of memory (MPS allocated: 17.36 GB, other allocations: 613.56 MB, max allowed: 18.13 GB). "
    "Tried to allocate 192.00 MB on private pool.",
    # Vulkan's VK_ERROR_OUT_OF_DEVICE_MEMORY in Vulkan-Hpp's spelling (llama.cpp's Vulkan backend, index id 10529187915)
    "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
])
def test_a_device_oom_in_the_apis_own_name_is_the_programs(line: str) -> None:
    assert {e.data.get("fault") for e in _acting(line, "nccl")} == {"user_code"}


@pytest.mark.parametrize("line", [
    "Memory available: VK_ERROR_OUT_OF_HOST_MEMORY is handled by the allocator's retry",  # the host's, not the device's (synthetic)
    "ggml_vulkan: Found 1 Vulkan devices:",  # index id 68683932887's healthy start-up line
])
def test_its_look_alikes_are_not_a_device_oom(line: str) -> None:
    assert "user_code" not in {e.data.get("fault") for e in _acting(line, "nccl")}


# --- a store that measured this host's clock: clock_skew --------------------------------------------------------
def test_an_object_store_refusing_a_skewed_request_names_the_clock() -> None:
    # botocore's ClientError from S3 (public GitHub file, index id 15068670398)
    line = ("botocore.exceptions.ClientError: An error occurred (RequestTimeTooSkewed) when calling the PutObject operation: "
            "The difference between the request time and the current time is too large.")
    assert {e.data.get("fault") for e in _acting(line, "nccl")} == {"clock_skew"}
    # the error code named in prose is not the error (synthetic)
    assert _acting("Hint: RequestTimeTooSkewed errors mean the clock is off; we retry with a fresh signature", "nccl") == []


# --- the storage errnos' own text, whichever program prints it, in either stream ------------------------------------
@pytest.mark.parametrize("line", [
    "rbd: map failed: (5) Input/output error",  # ceph/ceph#31290 (the journal's form, strerror after its number)
    "cp: error writing '/var/tmp/lorax/lorax.imgutils.Pf2qIt/./usr/share/locale/zh_HK/LC_MESSAGES/iso_15924.mo': No space left on device",
    "dd: error writing '/data/test.log': No space left on device",  # index ids 27236884316, 12949703994
    "ls: reading directory '/media/usb': Input/output error",  # rclone/rclone#7588
    "[ 7602.036917] systemd-journald[590]: Failed to write entry (17 items, 467 bytes), ignoring: Read-only file system",
])
@pytest.mark.parametrize("source", ["kernel", "nccl"])
def test_a_storage_errnos_text_is_storage_in_either_stream(line: str, source: str) -> None:
    assert {e.data.get("fault") for e in _acting(line, source)} == {"storage"}


@pytest.mark.parametrize("line", [
    "dd: error writing '/dev/sda1': No space left on device",  # a whole-device wipe's last line (index id 2576373791)
    "bash: /dev/tty: Input/output error",  # a hung-up terminal
    "Jan 28 10:00:01 host sshd[1234]: error: ssh_packet_read: Input/output error",  # a closed ssh session (synthetic frame)
])
@pytest.mark.parametrize("source", ["kernel", "nccl"])
def test_its_look_alikes_stay_quiet(line: str, source: str) -> None:
    assert _acting(line, source) == []


@pytest.mark.parametrize("source", ["kernel", "nccl"])
def test_the_text_in_prose_is_not_the_errno_rule(source: str) -> None:
    # not after a program's "': '" (synthetic); what the line model makes of such prose is its own matter
    events = _events("The test checks that writes fail with Input/output error when the disk is pulled", source)
    assert not any(str(e.data.get("rule", "")).startswith("storage.errno_text") for e in events)
