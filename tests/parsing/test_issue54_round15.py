"""Issue 54 round 15: fresh batches 17-22 mined, each fix by the general property or form that
carries, not by the rows' text (docs/rules.md, round 15).

First the healthy lines that fired: each is quiet by a property of its own (its level word, a word
that it retries, a probe of an absent interface or an empty port, a capability stated, a device the
job does not use), and beside it the real fault lines of the same shape that must still act. Every
line is a corpus row's (tests/fixtures/log_corpus, with its provenance there) or a rule's example.
"""

from __future__ import annotations

import pytest

from faultlens.parsing.line import clean_line
from faultlens.parsing.registry import parser_for
from tests.parsing.line_events import acting as _acting
from tests.parsing.line_events import classes as _classes
from tests.parsing.line_events import events as _events

# --- healthy by their own property -----------------------------------------------------------------------
_HEALTHY = [
    # a guess never outranks the line's own word: a logger's WARNING, a program that says it retries
    (
        "[2024-04-10 16:04:34,970] torch.distributed.elastic.multiprocessing.api: [WARNING] Unable to shutdown process 264 "
        "via Signals.SIGTERM, forcefully exiting via Signals.SIGKILL",
        "nccl",
    ),  # fresh19 (aws-samples/...#93)
    ("command failed, retrying after 5 seconds", "nccl"),  # fresh22 (NVIDIA/gpu-operator#378)
    # generic socket words in a client's own retry at warning (wandb's file stream; fresh17)
    (
        "2023-08-16 10:46:39,818 WARNING FileStreamThread:21020 [file_stream.py:request_with_retry():670] requests_with_retry "
        "encountered retryable exception: ('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer')).",
        "nccl",
    ),
    # a capability stated, not an event (bonding's load-time advice; fresh21)
    (
        "bonding: Warning: either miimon or arp_interval and arp_ip_target module parameters must be specified, otherwise "
        "bonding will not detect link failures! see bonding.txt for details.",
        "kernel",
    ),
    # a FreeBSD attach names the device by its description (tests/fixtures/outside oci.dmesg)
    ("apei0: <ACPI Platform Error Interface> on acpi0", "kernel"),
    # probes: an x86 MSR a (virtual) CPU lacks, overlayfs' mount-time feature checks, an empty SATA port,
    # an optional interface that answers ENODEV (fresh21, fresh18 x2, fresh17)
    (
        "[ 9468.320563] unchecked MSR access error: RDMSR from 0x492 at rIP: 0xffffffff8b47892a (native_read_msr+0xa/0x30)",
        "kernel",
    ),
    ("Jul 21 15:54:05 arch kernel: overlayfs: failed to set xattr on upper", "kernel"),
    ("May 08 00:49:10 stephen kernel: ata5: failed to resume link (SControl 0)", "kernel"),
    (
        "[ 7500.275190] mlx5_core 5f4a:00:02.0: mlx5_hv_config_common:32:(pid 335): Failed to read hv config, err = -19, len = 128, "
        "offset = 0",
        "kernel",
    ),
    # the platform firmware's ACPI events in the GPU driver's log; a printer (fresh20 x2)
    (
        "[ 2676.559991] NVRM: RmHandleDNotifierEvent: RmHandleDNotifierEvent: Failed to handle ACPI D-Notifier event, status=0x11",
        "kernel",
    ),
    ("Jul  7 06:38:25 LSPPC-Wheezy smbd[2030]:   failed to retrieve printer list: NT_STATUS_UNSUCCESSFUL", "kernel"),
    # a udev rule's helper that exited 1 (no signal): recorded, not the device it names (fresh17)
    (
        "Sep 28 12:27:10 vm-alarm systemd-udevd[373]: sda1: Process '/usr/bin/unshare -m /usr/bin/snap auto-import "
        "--mount=/dev/sda1' failed with exit code 1.",
        "kernel",
    ),
    # chrony stepping milliseconds: past no threshold of its own (fresh22)
    ("2020-09-08T01:47:38Z System clock wrong by -0.002320 seconds (step)", "kernel"),
]


@pytest.mark.parametrize(("line", "source"), _HEALTHY)
def test_a_healthy_line_is_quiet_by_its_own_property(line: str, source: str) -> None:
    assert _acting(line, source) == []


_STILL_FAULTS = [
    # the kernel's warning level is no quiet word: its drivers print I/O failures at warning (fresh19)
    (
        "[  628.589974][ T6003] REISERFS warning (device loop0): sh-2029: %s: bitmap block (#%u) reading failed "
        "reiserfs_read_bitmap_block: reiserfs_read_bitmap_block",
        "kernel",
        "storage",
    ),
    # NCCL's own WARN with the socket words is the collective's (fresh8)
    ("node1:54573:54696 [1] include/socket.h:194 WARN Call to recv failed : Connection reset by peer", "nccl", "nccl_error"),
    ("[rank1]: Connection reset by peer", "nccl", "nccl_error"),
    # a clock a second or more off (chrony's own logchange) still is (rules.toml's examples, fresh rows)
    ("Mar 12 10:00:01 host chronyd[812]: System clock wrong by 1.999308 seconds", "kernel", "clock_skew"),
    ("Mar 12 10:00:01 host chronyd[812]: System clock wrong by -1946.984184 seconds, adjustment started", "kernel", "clock_skew"),
    # a disk's own errors on its link still are storage; an I/O error with ENODEV too
    ("[  611.175527] sd 0:0:0:0: [sda] tag#0 Sense Key : Aborted Command [current] ", "kernel", "storage"),
    (
        "Nov 22 17:46:20 sentinel.donadio.be kernel: EXT4-fs warning (device dm-1): ext4_end_bio:316: I/O error -19 writing to "
        "inode 10223621 (offset 50331648 size 6148096 starting block 14409150)",
        "kernel",
        "storage",
    ),
]


@pytest.mark.parametrize(("line", "source", "fault"), _STILL_FAULTS)
def test_the_same_shapes_that_are_faults_still_act(line: str, source: str, fault: str) -> None:
    assert fault in _classes(line, source)
    assert _acting(line, source)


def test_terminal_colour_codes_go_whole() -> None:
    # a logger that believes it writes to a terminal: the CSI sequence goes, not only its ESC byte
    assert clean_line("\x1b[31mTraceback (most recent call last):\x1b[0m") == "Traceback (most recent call last):"
    assert clean_line("\x1b[1;32mINFO\x1b[0m step 9 | loss 2.1") == "INFO step 9 | loss 2.1"
    p = parser_for("nccl")
    lines = [
        "\x1b[31mTraceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        "\x1b[31mValueError: bad shape\x1b[0m",
    ]
    events = [e for line in lines for e in p.feed(line)] + p.flush()
    assert [(e.kind, e.data.get("fault")) for e in events] == [("exception", "user_code")]


# --- misses, by their general form ------------------------------------------------------------------------
_BY_FORM = [
    # the device's memory exhausted in any program's words is the program's OOM, as CUDA's (fresh19, fresh21)
    ("VM-0-16-ubuntu:392:494 [2] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'", "nccl", "user_code"),
    (
        "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/memory_utils.cu:32",
        "nccl",
        "user_code",
    ),
    (
        "Non-OK-status: GpuLaunchKernel(FillPhiloxRandomKernelLaunch<Distribution>, num_blocks, block_size, 0, d.stream(), gen, "
        "data, size, dist) status: Internal: out of memory",
        "nccl",
        "user_code",
    ),
    # NCCL's results for the caller's misuse (ncclInvalidUsage / ncclInvalidArgument), in every spelling (fresh21)
    ("Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 2000", "nccl", "user_code"),
    ("ncclInvalidUsage: This usually reflects invalid usage of NCCL library.", "nccl", "user_code"),
    (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, invalid "
        "usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3",
        "nccl",
        "user_code",
    ),
    # ... beside the collective's own results and CUDA's invalid argument under NCCL, which stay NCCL's (dev set, fresh1-16)
    ("node23:12098:12141 [2] transport/nvls.cc:244 NCCL WARN Cuda failure 1 'invalid argument'", "nccl", "nccl_error"),
    (
        "Fri Aug 11 12:31:45 2023[1,0]<stdout>:tomte401:1850301:1881341 [0] transport.cc:154 NCCL WARN Cuda failure 'invalid "
        "argument'",
        "nccl",
        "nccl_error",
    ),
    (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled "
        "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
        "nccl",
        "nccl_error",
    ),
    ("RuntimeError: CUDA driver error: invalid argument", "nccl", "cuda_error"),
    # the kernel's own bug reports by its catalogue: WARN's 6.x form and any path, lockdep's irq header, the unwinder,
    # debugobjects, die()'s counter after the task, skb_panic, dump_page's reason (fresh19, fresh22)
    (
        "[  560.592663] WARNING: kernel/rcu/tree.c:3098 at __call_rcu_common.constprop.0+0x200/0x760, CPU#4: stress-ng-mmaph/568",
        "kernel",
        "kernel",
    ),
    (
        "[ 279.276350][ T4440] WARNING: CPU: 1 PID: 4440 at include/trace/events/printk.h:33 printk_sprint (ld-temp.o:?)",
        "kernel",
        "kernel",
    ),
    ("[   13.557138] WARNING: HARDIRQ-safe -> HARDIRQ-unsafe lock order detected", "kernel", "kernel"),
    ("[    7.652636] WARNING: stack recursion on stack type 3", "kernel", "kernel"),
    (
        "[ 1530.666414][ T8008] ODEBUG: free active (active state 0) object type: timer_list hint: delayed_work_timer_fn+0x0/0x90",
        "kernel",
        "kernel",
    ),
    ("[  489.703156] sshd-session(3671): Oops [#1]", "kernel", "kernel"),
    (
        "[  150.611477][    C6] skbuff: skb_over_panic: text:ffffffff881ff7be len:4096 put:4096 head:ffff88807f93a800 "
        "data:ffff88807f93a800 tail:0x1000 end:0xc0 dev:<NULL>",
        "kernel",
        "kernel",
    ),
    ("Feb 21 09:02:00 c-237-177-40-045 kernel: page dumped because: kasan: bad access detected", "kernel", "kernel"),
    # the PCI core's words for a GPU it cannot wake (fresh20)
    ("[   87.412701] nvidia 0000:01:00.0: not ready 65535ms after resume; giving up", "kernel", "gpu_lost"),
    (
        "[   87.412759] nvidia 0000:01:00.0: Unable to change power state from D3cold to D0, device inaccessible",
        "kernel",
        "gpu_lost",
    ),
    # libibverbs' async events of the local HCA failing, relayed by GPFS under its [E] tag (fresh17)
    ("2024-11-23_01:16:26.221+0800: [E] VERBS RDMA: fatal async event IBV_EVENT_DEVICE_FATAL on mlx5_0", "kernel", "nic"),
    (
        "2024-11-23_01:16:26.221+0800: [E] VERBS RDMA port state forced to IBV_PORT_DOWN for device mlx5_0 port 1.",
        "kernel",
        "nic",
    ),
    # a program measuring time for its own work says the clock jumped (fresh17, fresh18)
    (
        "2024-11-23_01:01:01.193+0800: [W] Time-of-day may have jumped back. Late by 7 seconds to wake certain threads.",
        "kernel",
        "clock_skew",
    ),
]

_STILL_QUIET = [
    # an fs/ WARNING stays the file systems' rule's: the NFS server's legacy tracking in a container (fresh1, healthy)
    "[53795.894385] WARNING: CPU: 0 PID: 18573 at fs/nfsd/nfs4recover.c:545 nfsd4_legacy_tracking_init+0x1b7/0x230 [nfsd]()",
    # an IB port that came up is a state change (NCCL's async thread prints every event)
    "host:1:1 [0] NCCL WARN NET/IB : mlx5_0:1 Got async event : port active",
]


@pytest.mark.parametrize("line", _STILL_QUIET)
def test_their_look_alikes_stay_quiet(line: str) -> None:
    assert _acting(line, "nccl" if "NCCL" in line else "kernel") == []


@pytest.mark.parametrize(("line", "source", "fault"), _BY_FORM)
def test_each_general_form_gives_its_class(line: str, source: str, fault: str) -> None:
    assert fault in _classes(line, source)


# --- who reports an abort decides its class (docs/design.md §9) -------------------------------------------
_ABORTS = [
    # the process's own handler: the program's own report of its death (fresh17, fresh20)
    ("[hpb0205:09049] Signal: Aborted (6)", "user_code"),  # Open MPI's stack-trace handler
    ("Fatal Python error: Aborted", "user_code"),  # Python's fault handler
    (
        "05-26 20:26:54.649   898   923 F libc    : Fatal signal 6 (SIGABRT), code -1 (SI_QUEUE) in tid 923 (android.hardwar), "
        "pid 898 (android.hardwar)",
        "user_code",
    ),  # Android's libc
    # a launcher's or a shell's record of it (fresh17, fresh18, fresh28): no more evidence against the machine
    ("srun: error: nid002892: task 39: Aborted (core dumped)", "user_code"),
    (
        "/var/slurm_spool/job23038278/slurm_script: line 61: 890759 Aborted                 (core dumped) apptainer exec --nv "
        "~/container-setup/vulkan-sim-base.sif bash -lc '",
        "user_code",
    ),
    ("traceback : Signal 6 (SIGABRT) received by PID 10", "user_code"),  # torchrun's failure summary
]


@pytest.mark.parametrize(("line", "fault"), _ABORTS)
def test_an_abort_is_the_programs_whoever_reports_it_and_recorded(line: str, fault: str) -> None:
    assert _classes(line, "nccl") == {fault}
    assert _acting(line, "nccl") == []  # the error printed before it decides


def test_gos_runtime_fatal_error_is_the_programs_own_report() -> None:
    # runtime.throw's end of a Go program (fresh17); a C compiler's fatal error is no such line
    assert _classes("fatal error: unexpected signal during runtime execution", "nccl") == {"user_code"}
    compiler = _events("train.c:1:10: fatal error: cuda_runtime.h: No such file or directory", "nccl")
    assert all(e.data.get("rule") != "app.runtime_panic" for e in compiler)


_MORE_FORMS = [
    # an Xid another program relays: the Xid table's class, at most an alert (fresh17; health_checks in the dev set)
    (
        "2020/08/10 19:09:42 XidCriticalError: Xid=69 on Device=GPU-7540a9b3-eeb9-1214-1526-f93c9ea826a8, the device will go "
        "unhealthy.",
        "app_fault",
    ),
    ("Found XID errors: 63", "gpu_memory"),
    # HIP's names for CUDA's errors: the build without code for the GPU (user_code, as CUDA's no kernel image), a call that
    # failed by name (fresh17)
    ('"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"', "user_code"),
    (
        "[hipSYCL Error] from /tmp/hellsvik/hipsycl/0.9.4/src/runtime/hip/hip_queue.cpp:355 @ submit_memset() : hip_queue: "
        "hipMemsetAsync() failed (error code = HIP:1)",
        "cuda_error",
    ),
    # an OSError's text after a program's own words (fresh22); Slurm's accounting check of memory (fresh20)
    ("checkpoint write retry: [Errno 28] No space left on device", "storage"),
    ("slurmstepd: error: Exceeded job memory limit", "host_oom"),
]


@pytest.mark.parametrize(("line", "fault"), _MORE_FORMS)
def test_more_general_forms_in_the_trainer_stream(line: str, fault: str) -> None:
    assert fault in _classes(line, "nccl")


def test_a_relayed_xid_alerts_at_most_and_names_its_number() -> None:
    (event,) = _events("XidCriticalError: Xid=79 on Device=GPU-7540a9b3, the device will go unhealthy.", "nccl")
    assert (event.data["xid"], event.data["fault"], event.data["action"]) == (79, "gpu_lost", "alert")
    # NVML's event type's name, which the device plugin logs when it skips other events, is no Xid (dev set, healthy)
    skipped = (
        "I1025 02:19:08.002792       1 health.go:151] Skipping non-nvmlEventTypeXidCriticalError event: "
        "{Device:{Handle:0x7f0dcf40bdf8} EventType:2 EventData:0 GpuInstanceId:0 ComputeInstanceId:0}"
    )
    assert _acting(skipped, "nccl") == []


@pytest.mark.parametrize(
    "line",
    [
        "[   22.665536][ T4425] ERROR: (device loop0): remounting filesystem as read-only",  # jfs (fresh20)
        "[  924.076873][ T8430] jfs_mount: diMount(ipaimap) failed w/rc = -5",  # jfs by its function's tag (fresh20)
    ],
)
def test_the_other_disk_file_systems_are_storage(line: str) -> None:
    assert "storage" in _classes(line)


def test_a_remount_option_stays_quiet() -> None:
    assert _acting("[    5.857586] EXT4-fs (sde2): re-mounted. Opts: errors=remount-ro") == []


_KERNEL_FORMS = [
    # a DRM driver's function without its module still names the driver (fresh21)
    (
        "[10132.434965] [drm:amdgpu_job_timedout] *ERROR* ring gfx_0.0.0 timeout, signaled seq=2729093, emitted seq=2729095",
        "gpu_reset_required",
    ),
    # the AER header after the device whichever driver owns it (fresh22)
    (
        "[  535.561556] igen6_edac 0000:ed:01.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Inaccessible, "
        "(Unregistered Agent ID)",
        "kernel",
    ),
    # mlx5's firmware command never completed, with a negative errno in its bracket (fresh22)
    (
        "mlx5_core 0000:06:00.0: wait_func_handle_exec_timeout:1128:(pid 185911): cmd[-22]: CREATE_UCTX(0xa04) No done completion",
        "nic",
    ),
    # a hypervisor's virtual disk client (fresh19)
    ("[19095.192532] sunvdc: vdc_tx_trigger() failure, err=-11", "storage"),
    # the driver reading all ones from the GPU; only a reboot recovers it (fresh17)
    ("[168766.854743] NVRM: GPU0 tmrGetTimeEx_GM107: NVRM-RC: Consistently Bad TimeLo value ffffffff", "gpu_lost"),
    (
        "[168767.021499] NVRM: nvGpuOpsReportFatalError: uvm encountered global fatal error 0x60, requiring os reboot to recover.",
        "gpu_reset_required",
    ),
    # a user-space OOM killer (fresh20)
    (
        'user: warning: [2026-01-12T20:27:31.913975631Z]: [talos] Sending SIGKILL to cgroup {"component": "controller-runtime", '
        '"controller": "runtime.OOMController", "cgroup": "/sys/fs/cgroup/kubepods/burstable/pod77f06c5c"}',
        "host_oom",
    ),
]


@pytest.mark.parametrize(("line", "fault"), _KERNEL_FORMS)
def test_kernel_forms(line: str, fault: str) -> None:
    assert fault in _classes(line)


def test_nvrm_reading_all_ones_in_its_init_status_is_still_the_init_rule() -> None:
    # the Xid 120 line's pc:0xffffffff... and RmInitAdapter's status are not a register read as all ones (dev, fresh rows)
    assert "gpu_lost" in _classes("kernel: [ 2108.026780] NVRM: RmInitAdapter failed! (0x30:0xffffffff:861)")


_PROGRAMS_OWN = [
    # a library's own exception type that says the input or set-up is wrong; absl's caller statuses (fresh18, fresh20)
    "json.decoder.JSONDecodeError: Extra data: line 64 column 2 (char 27826)",
    "lightning.fabric.utilities.exceptions.MisconfigurationException: Trainer was configured with `enable_progress_bar=False` "
    "but found `RichProgressBar` in callbacks list.",
    "hydra.errors.InstantiationException: Error in call to target 'rl4co.utils.trainer.RL4COTrainer':",
    "jaxlib.xla_extension.XlaRuntimeError: INVALID_ARGUMENT: Failed to compile a Mosaic module: 'tpu.matmul' op Unsupported "
    "input data type in matrix multiplication.",
    "RuntimeError: a Tensor with 16 elements cannot be converted to Scalar",
]


@pytest.mark.parametrize("line", _PROGRAMS_OWN)
def test_the_programs_own_exception_is_user_code(line: str) -> None:
    assert _classes(line, "nccl") == {"user_code"}


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        # a status that is not the caller's, an exception type that names no input: as before
        (
            "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/runtime/nccl_api.cc:512: NCCL operation "
            "ncclGroupEnd() failed: unhandled system error (run with NCCL_DEBUG=INFO for details)",
            "nccl_error",
        ),
        # (round 19) a library's network failure that ends the program is user_code by docs/design.md §9 now: see
        # test_issue54_round19.py; the job's own socket failures keep their class
        ("ConnectionResetError: [Errno 104] Connection reset by peer", "nccl_error"),
    ],
)
def test_other_statuses_and_types_are_not_user_code(line: str, fault: str | None) -> None:
    classes = _classes(line, "nccl")
    assert "user_code" not in classes
    if fault:
        assert fault in classes


# --- a program that says what it does instead: the failure handled (fresh1, fresh4, fresh15, first sight) --------
@pytest.mark.parametrize(
    "line",
    [
        "[ 7505.919140] BTRFS warning (device sda2): failed to load free space cache for block group 4194304, rebuilding it now",
        "Jan 31 10:13:36 pntop01 kernel: i40e 0000:19:00.0: DCB init failed -63, disabled",
        "May 23 14:33:11 iv-splv-link kernel: [1728536.623544] sda1: WRITE SAME failed. Manually zeroing.",
        "[ 7501.630078] [drm] GMBUS [i915 gmbus dpb] timed out, falling back to bit banging on pin 5",
    ],
)
def test_a_failure_the_program_handles_is_no_alert(line: str) -> None:
    assert _acting(line) == []


def test_going_on_is_not_handling_it() -> None:
    # "continuing anyway" after a non-finite norm is the NaN itself (a fresh batch's nan_loss row)
    line = (
        "train.py:317: FutureWarning: Non-finite norm encountered in torch.nn.utils.clip_grad_norm_; continuing anyway. "
        "Note that the default behavior will change in a future release to error out if a non-finite total norm is "
        "encountered. At that point, setting error_if_nonfinite=false will be required to retain the old behavior."
    )
    assert "nan_loss" in _classes(line, "nccl")
