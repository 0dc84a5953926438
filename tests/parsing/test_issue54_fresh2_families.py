"""Issue 54, round 3: the families fresh batch 2 showed missing or crying wolf, each by its general
form (other members of the family than the batch's own line where there are), each beside the healthy
look-alikes that must stay quiet. Lines are stamped past BOOT_UPTIME_S or carry no clock."""

from __future__ import annotations

import pytest

from tests.parsing.test_issue54_fresh1_families import acting, kernel, trainer


def faults(events):
    return {e.data["fault"] for e in events}


# ---- the node's clock ---------------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "[ 8996.144253] clocksource: timekeeping watchdog on CPU2: Marking clocksource 'tsc' as unstable because the skew is too large:",
    "Sep 23 21:33:08 c4v3 kernel: clocksource: timekeeping watchdog on CPU1: Marking clocksource 'hpet' as unstable because the skew is too large:",
    "[ 8996.144274] tsc: Marking TSC unstable due to clocksource watchdog",
    "[ 9001.1] Clocksource tsc unstable (delta = -2198902436 ns)",
    "Jul 17 04:19:32 intranet chronyd[17789]: System clock wrong by -1946.984184 seconds, adjustment started",
    "Mar  3 10:00:00 node7 ntpd[812]: time reset +3.214507 s",
    "Mar  3 10:00:00 node7 chronyd[812]: Forward time jump detected!",
])  # fmt: skip
def test_a_clock_gone_wrong_is_a_clock_skew_alert(line):
    events = kernel(line)
    assert [(e.kind, e.data["fault"], e.data["action"]) for e in events] == [("clock_skew", "clock_skew", "alert")]


def test_the_clocksource_watchdogs_three_lines_are_one_event():
    events = kernel("[ 8996.144253] clocksource: timekeeping watchdog on CPU2: Marking clocksource 'tsc' as unstable because the skew is too large:",
                    "[ 8996.144274] tsc: Marking TSC unstable due to clocksource watchdog",
                    "[ 8996.144401] TSC found unstable after boot, most likely due to broken BIOS. Use 'tsc=unstable'.")  # fmt: skip
    assert len(events) == 1 and events[0].data["device"] == "tsc"


@pytest.mark.parametrize("line", [
    "Jul 17 04:19:40 intranet chronyd[17789]: Selected source 162.159.200.1",
    "Jul 17 04:19:40 intranet chronyd[17789]: System clock was stepped by 0.000012 seconds",
    "Jul 17 04:19:40 intranet chronyd[17789]: System clock TAI offset set to 37 seconds",
    "[ 9001.2] clocksource: Switched to clocksource tsc",
    "[ 9001.3] tsc: Refined TSC clocksource calibration: 2999.999 MHz",
])  # fmt: skip
def test_a_time_daemons_ordinary_lines_are_quiet(line):
    assert not acting(kernel(line))


# ---- kernel: ARM's crash lines, RCU's closing lines, a WARNING by its source path ------------------
@pytest.mark.parametrize("line", [
    "[ 4000.1] PC is at unlink_anon_vmas+0xbc/0x1f4",
    "[ 4000.2] LR is at free_pgtables+0x9c/0xc0",
    "[ 4000.3] pc : __memcpy+0x110/0x180",
    "[11437.511343] Unhandled fault: page domain fault (0x81b) at 0x00060004",
    "[11437.518462] Internal error: Oops: 96000004 [#1] PREEMPT SMP",
    "[  755.161090] rcu:     Unless rcu_preempt kthread gets sufficient CPU time, OOM is now expected behavior.",
    "Apr 13 06:21:17 pi4-4 kernel: rcu:         Tasks blocked on level-1 rcu_node (CPUs 16-31):",
    "[ 2415.218617] WARNING: CPU: 3 PID: 0 at kernel/rcu/tree.c:1032 rcu_irq_enter+0x9d/0xb0",
])  # fmt: skip
def test_a_crash_or_stall_line_of_other_shapes_is_a_kernel_event(line):
    assert faults(acting(kernel(line))) == {"kernel"}


@pytest.mark.parametrize("line", [
    "[ 1231.038208] WARNING: CPU: 12 PID: 4476 at drivers/nvme/host/pci.c:748 nvme_queue_rq+0x9ed/0xa3c [nvme]",
    "[ 1231.038208] WARNING: CPU: 1 PID: 77 at fs/ext4/inode.c:3612 ext4_set_page_dirty+0x44/0x60",
])  # fmt: skip
def test_a_warning_inside_a_storage_driver_is_storage(line):
    assert faults(acting(kernel(line))) == {"storage"}


@pytest.mark.parametrize("line", [
    "[ 4000.4] PC is at 0x7f3a2b1c",  # a user-space address, no kernel symbol
    "[ 4000.5] rcu: Hierarchical RCU implementation.",
    "[ 4000.6] Machine check events logged",  # the notice: recorded, mcelog's decode decides
])  # fmt: skip
def test_crash_look_alikes_do_not_act(line):
    assert not acting(kernel(line))


def test_an_old_kernels_uncorrectable_aer_header_is_the_pcie_record_whatever_the_driver():
    events = kernel("[ 9000.1] snd_hda_intel 0000:63:00.1: PCIe Bus Error: Uncorrectable (Non-Fatal), type=Transaction Layer")
    assert [(e.kind, e.data["fault"]) for e in events] == [("pcie_aer", "kernel")]
    corrected = kernel("[ 9000.1] pcieport 0000:00:1c.0: PCIe Bus Error: Corrected, type=Physical Layer")
    assert not acting(corrected)


# ---- storage --------------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "Nov 24 22:48:39 f216 kernel: [ 245.908016] ata1: link is slow to respond, please be patient (ready=0)",
    "[ 9000.1] ata3: COMRESET failed (errno=-16)",
    "[ 9000.2] ata3.00: limiting speed to UDMA/66:PIO4",
    "[ 9000.3] ata3: limiting SATA link speed to 1.5 Gbps",
    "[ 9000.4] nvme nvme0: Try \"nvme_core.default_ps_max_latency_us=0 pcie_aspm=off\" and report a bug",
])  # fmt: skip
def test_a_disk_or_link_failing_commands_is_storage(line):
    assert faults(acting(kernel(line))) == {"storage"}


def test_estale_on_any_programs_line_is_storage():
    assert faults(acting(trainer("-bash: cd: /home/ryczkok: Stale file handle"))) == {"storage"}
    assert faults(acting(trainer("ls: cannot access '/mnt/x': Stale NFS file handle"))) == {"storage"}


@pytest.mark.parametrize("line", [
    "[ 9000.1] ata1: SATA link up 6.0 Gbps (SStatus 133 SControl 300)",
    "[ 9000.2] ata1.00: configured for UDMA/133",
    "[130075.278259] sd 15:0:0:1: Power-on or device reset occurred             ",
    "[ 9000.3] sd 2:0:0:0: Mode parameters changed",
    "[ 9000.4] sd 2:0:0:0: Capacity data has changed",
])  # fmt: skip
def test_storage_look_alikes_are_quiet(line):
    assert not acting(kernel(line))


# ---- host memory --------------------------------------------------------------------------------
def test_a_cgroups_oom_statistics_line_is_host_oom_even_at_info():
    line = ("[ 9000.1] Memory cgroup stats for /kubepods/burstable/pod1: cache:0KB rss:613460KB rss_huge:256000KB "
            "shmem:0KB mapped_file:0KB")
    assert faults(acting(kernel(line))) == {"host_oom"}


@pytest.mark.parametrize("line", [
    "OutOfMemoryError: Task was killed due to the node running low on memory.",
    "(raylet) node_manager.cc:3069: 2 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons",
    "138 | 1534166953120 | Failed: learner_exit_code: 137 (out of memory)",
])  # fmt: skip
def test_a_node_memory_monitors_kill_is_host_oom(line):
    assert faults(acting(trainer(line))) == {"host_oom"}


def test_an_exit_code_137_without_memory_words_is_recorded_host_oom():
    events = trainer("138 | 1534166953120 | Failed: learner_exit_code: 137")
    assert faults(events) == {"host_oom"} and not acting(events)
    # not an exit code of a key that merely ends so
    assert not trainer("profile_exit_codes: 137 entries written")


# ---- the trainer: NCCL's process group, rendezvous, CUDA, signals, Slurm -------------------------
@pytest.mark.parametrize("line", [
    "[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=103",
    "[rank4]:[E ProcessGroupNCCL.cpp:1153] [PG 5 Rank 0] ProcessGroupNCCL preparing to dump debug info.",
    "[rank0]:E0101 00:10:01.200000 140213 torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1418] [PG 0 Rank 0] Heartbeat monitor timed out!",
    '    "message": "RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.",',
    "WARNING:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node 'w-1' has failed to shutdown the rendezvous 'none' due to an error of type RendezvousTimeoutError.",
])  # fmt: skip
def test_process_group_and_rendezvous_errors_are_nccl_error(line):
    assert faults(acting(trainer(line))) == {"nccl_error"}


@pytest.mark.parametrize("line", [
    "[rank0]:[W ProcessGroupNCCL.cpp:1168] Warning: WARNING: process group has NOT been destroyed before we destruct ProcessGroupNCCL.",
    "[rank0]:[I ProcessGroupNCCL.cpp:852] [PG 0 Rank 0] ProcessGroupNCCL initialization options: size: 8",
    "INFO:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node 'w-1' has joined round 0 of the rendezvous 'none'.",
])  # fmt: skip
def test_process_group_look_alikes_are_quiet(line):
    assert not acting(trainer(line))


def test_a_process_group_line_naming_a_cuda_error_is_read_by_the_error():
    events = trainer("[E ProcessGroupNCCL.cpp:916] [Rank 1] NCCL watchdog thread terminated with exception: CUDA error: uncorrectable ECC error encountered")  # fmt: skip
    assert "gpu_memory" in faults(events)


def test_cudas_origin_and_a_device_failure_code_are_cuda_error():
    assert faults(acting(trainer("Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:44 (most recent call first):"))) == {"cuda_error"}  # fmt: skip
    assert faults(acting(trainer("[rank0]: Cuda failure 999 'unknown error'"))) == {"cuda_error"}
    # a call's misuse stays NCCL's (the batch's convention): only the device-failure codes are CUDA's
    assert faults(trainer("node23:12098:12141 [2] transport/nvls.cc:244 NCCL WARN Cuda failure 1 'invalid argument'")) == {"nccl_error"}  # fmt: skip
    # c10d's origin stays NCCL's
    assert faults(trainer("Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:565 (most recent call first):")) == {"nccl_error"}  # fmt: skip


def test_a_fatal_python_error_after_a_modules_name_is_judged_by_its_signal():
    events = trainer("Fatal Python error: pygame_parachute: (pygame parachute) Segmentation Fault")
    assert faults(acting(events)) == {"user_code"}
    # a fatal error that names no signal is no crash by a signal
    assert "user_code" not in faults(trainer("Fatal Python error: init_fs_encoding: failed to get the Python codec of the filesystem encoding"))  # fmt: skip


def test_slurm_refusing_a_request_is_the_submissions_fault_not_a_controller_timeout():
    assert faults(trainer("srun: error: Unable to allocate resources: Requested time limit is invalid (missing or exceeds some limit)")) == {"user_code"}  # fmt: skip
    assert faults(trainer("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified")) == {"user_code"}  # fmt: skip
    assert "user_code" not in faults(trainer("srun: error: Unable to allocate resources: Socket timed out on send/recv operation"))  # fmt: skip


# ---- RDMA completions outside NCCL's NET/IB -----------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "CQE ERROR wr_id=8589934593 status=12(transport retry counter exceeded) opcode=1 byte_len=0 vendor_err=0xa qp_num=0x2c0b",
    "[x1005c4s5b0n0:37049:0:37049] ib_mlx5_log.c:147  Transport retry count exceeded on mlx5_1:1/RoCE (synd 0x15 vend 0x81 hw_synd 0/0)",
    "Failed to modify QP to RTR: Connection timed out",
])  # fmt: skip
def test_a_verbs_completion_error_outside_ncls_net_ib_is_the_collectives_error(line):
    # round 4's convention (tests/fixtures/log_corpus/README.md): both ends print it, never the printer's NIC
    assert faults(acting(trainer(line))) == {"nccl_error"}


# ---- corruption by its other words, a controller's error log, the HCA's own verbs calls -----------
@pytest.mark.parametrize("line", [
    "[ 9000.1] JBD2: Invalid checksum recovering block 0 in log",
    "[ 9000.2] EXT4-fs (sda1): ext4_validate_block_bitmap: bad block bitmap checksum",
    "Apr 25 07:58:14 localhost kernel: [  853.905633] sd 1:2:0:0: [sdb] tag#261 Bad block number requested",
    "status_field : 0xc502(READ_ERROR: The read data could not be recovered from the media)",
])  # fmt: skip
def test_corruption_and_a_controllers_error_entry_are_storage(line):
    assert faults(acting(kernel(line))) == {"storage"}


@pytest.mark.parametrize("line", [
    "[ 9000.1] EXT4-fs (sda1): mounted filesystem with ordered data mode. Quota mode: none. metadata_csum enabled",
    "[ 9000.2] md/raid1:md0: bad block list enabled",
    "status_field    : 0(SUCCESS: The command completed successfully)",
])  # fmt: skip
def test_storage_words_that_are_no_fault_are_quiet(line):
    assert not acting(kernel(line))


def test_a_verbs_call_on_the_hca_itself_is_nic_an_allocation_nccls():
    assert faults(trainer("misc/ibvwrap.cu:220 NCCL WARN Call to ibv_get_async_event failed")) == {"nic"}
    assert faults(trainer("misc/ibvwrap.cc:190 NCCL WARN Call to ibv_create_cq failed with error Cannot allocate memory")) == {"nccl_error"}  # fmt: skip


def test_process_group_lines_after_a_watchdog_timeout_are_its_echo_on_that_rank_only():
    timeout = ("[rank0]:[E1126 20:55:39.229222542 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught collective operation timeout: "
               "WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=65536, NumelOut=65536, Timeout(ms)=3000) ran for 3067 milliseconds before timing out.")  # fmt: skip
    fillers = [f"[rank0]:frame #{i}: <unknown function> + 0x{i:x} (0x0 in /usr/lib/libtorch.so)" for i in range(20)]
    dump = "[rank0]:[E1126 20:56:05.811663435 ProcessGroupNCCL.cpp:1628] [PG ID 0 PG GUID 0 Rank 0] ProcessGroupNCCL preparing to dump debug info."  # fmt: skip
    other = "[rank1]:[E1126 20:56:05.811663435 ProcessGroupNCCL.cpp:1628] [PG ID 0 PG GUID 0 Rank 1] ProcessGroupNCCL preparing to dump debug info."  # fmt: skip
    events = trainer(timeout, *fillers, dump, other)
    assert [(e.kind, e.data.get("rank")) for e in events] == [("nccl_timeout", 0), ("nccl_error", 1)]


@pytest.mark.parametrize("line", [
    "[ 9001.4] clocksource:                       'hpet' wd_nsec: 511996988 wd_now: 6a8a5fa wd_last: 5d9d5b8 mask: ffffffff",
    "Mar  3 10:00:00 node7 ptp4l[1022]: [5432.1] clockcheck: clock jumped forward or running faster than expected!",
])  # fmt: skip
def test_the_clock_watchdogs_detail_and_ptps_clock_check_are_clock_skew(line):
    assert faults(acting(kernel(line))) == {"clock_skew"}


def test_ucx_names_any_error_completion_on_its_port():
    line = "[host:1:0:1] ib_mlx5_log.c:171  Remote access error on mlx5_0:1/IB (synd 0x13 vend 0x88 hw_synd 0/0)"
    events = trainer(line)
    # the transport's error by round 4's convention: no device kept, the line cannot say whose NIC
    assert faults(acting(events)) == {"nccl_error"} and events[0].data.get("device") is None
