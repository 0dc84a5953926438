"""Issue 54, the lines part: a line's own word first, boot is not the job, the subsystem table maps
what it knows, and the families that were missed (signals, autograd NaNs, checkpoint writes, MIG
Xids, Xid 154's recovery actions, any driver's TX timeout, cgroup memory reports). Each mechanism
with the healthy look-alikes that must stay quiet."""

from __future__ import annotations

import pytest

from faultlens.diagnosis.rules.xid import XidRule
from faultlens.events.envelope import Envelope
from faultlens.parsing.kernel_log import KernelLogParser
from faultlens.parsing.kernel_quiet import BOOT_UPTIME_S
from faultlens.parsing.registry import parser_for
from faultlens.parsing.severity import severity_of


def kernel(line: str, **kw):
    heard: list[str] = []
    p = KernelLogParser(now=1.8e9, on_unrecognised=heard.append, **kw)
    return p.feed(line), p, heard


def trainer(*lines: str):
    p = parser_for("nccl")
    return [e for line in lines for e in p.feed(line)] + p.flush()


def acting(events):
    return [e for e in events if e.data["action"] != "none"]


# ---- 1. the line's own word ---------------------------------------------------------------------
@pytest.mark.parametrize("line, level", [
    ("BTRFS info (device sdb1): read error corrected: ino 257 off 1048576", 6),
    ("EXT4-fs warning (device sda1): ext4_end_bio:345: I/O error 10 writing to inode 12", 4),
    ("Mar  1 10:00:00 host kern.info kernel: nvme nvme0: something odd", 6),
    ("[Feb 27 2025 14:10:02] [INFO] [tid 1808] request failed, retrying", 6),
    ("ts=2025-01-01 level=debug msg=\"probe failed\"", 7),
])  # fmt: skip
def test_a_level_word_of_the_line_is_its_priority(line, level):
    assert severity_of(line).priority == level


def test_words_that_the_trouble_is_over_make_a_line_information_unless_negated():
    assert not severity_of("mlx5_core 0000:3b:00.0: Successfully unregistered panic handler for port 1").is_error
    assert not severity_of("md/raid1:md0: read error corrected (8 sectors at 2048 on sdb1)").is_error
    assert not severity_of("ghes: memory error recovered, no action required").is_error
    assert severity_of("nvme nvme0: controller not recovered after reset, error -19").is_error
    assert severity_of("sd 0:0:0:0: [sda] medium error could not be corrected").is_error
    # "uncorrected" is no "corrected"
    assert severity_of("mce: Uncorrected hardware memory error").is_error


@pytest.mark.parametrize("line", [
    # the healthy lines that fired; each line says info or corrected / successfully
    "[ 1234.5] BTRFS info (device sdb1): read error corrected: ino 257 off 1048576 (dev /dev/sdb1 sector 2048)",
    "[ 1234.5] mlx5_core 0000:3b:00.0: Successfully unregistered panic handler for port 1",
    "6,812,9000000000,-;nvme nvme0: I/O 12 QID 3 timeout, completion polled",
])  # fmt: skip
def test_a_line_that_says_it_is_information_fires_nothing(line):
    events, p, _ = kernel(line)
    assert acting(events) == []


def test_a_rule_line_at_info_is_recorded_not_acted_on_and_an_error_one_acts():
    info = "Apr 09 10:00:04 host kernel: BTRFS info (device nvme0n1p3): bdev /dev/nvme0n1p3 errs: wr 0, rd 21, flush 0, corrupt 350, gen 0"
    [e], p, _ = kernel(info)
    assert (e.data["fault"], e.data["action"], e.data["severity"]) == ("storage", "none", "info") and "info" in e.data["quiet"]
    assert p.stats.quieted == 1
    [e], _, _ = kernel(info.replace("BTRFS info", "BTRFS error"))
    assert e.data["action"] == "evict" and "quiet" not in e.data


def test_a_rule_whose_message_the_kernel_prints_at_notice_still_acts_at_notice():
    # sunrpc prints "not responding" at KERN_NOTICE (rules.toml printk_level); at info it would not
    [e], _, _ = kernel("5,100,9000000000,-;nfs: server 10.0.0.1 not responding, still trying")
    assert (e.data["fault"], e.data["action"]) == ("storage", "alert")
    [e], _, _ = kernel("6,100,9000000000,-;nfs: server 10.0.0.1 not responding, still trying")
    assert e.data["action"] == "none"


# ---- 2. boot is not the job ---------------------------------------------------------------------
def test_a_kernel_line_logged_at_boot_is_recorded_with_its_class_and_no_action():
    line = "[   18.686204] mlx5_core 0000:41:00.0: init_one:1371:(pid 803): mlx5_load_one failed with error code -22"
    [e], p, _ = kernel(line)
    assert (e.data["fault"], e.data["action"], e.data["boot"]) == ("nic", "none", True) and p.stats.boot == 1
    # the same line later in the machine's life acts
    [e], _, _ = kernel(line.replace("   18.686204", "9018.686204"))
    assert e.data["action"] == "evict" and "boot" not in e.data
    # the agent's own start moves the bound (here: it started at 10 s of uptime)
    [e], _, _ = kernel(line, live_from=10.0)
    assert e.data["action"] == "evict"
    # a line with a wall clock only says nothing of boot
    [e], _, _ = kernel("Feb 09 15:47:06 debian kernel: NVRM: GPU 0000:13:00.0: RmInitAdapter failed! (0x26:0x56:1463)")
    assert e.data["action"] != "none" and "boot" not in e.data


@pytest.mark.parametrize("line", [
    "[   11.625221] gpio_thunderx: probe of 0000:00:11.0 failed with error -22",
    "[    0.912345] GHES: Failed to enable APEI firmware first mode.",
    "[    9.100000] i40e 0000:19:00.0: DCB init failed -63, disabled",
    "[   21.091872] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:894)",
])  # fmt: skip
def test_boot_lines_fire_nothing(line):
    events, _, _ = kernel(line)
    assert acting(events) == [] and float(line[1:line.index("]")]) < BOOT_UPTIME_S


def test_a_boot_xid_finding_asks_for_nothing_even_where_the_rule_rereads_the_code():
    rule = XidRule()
    data = {"xid": 43, "pci": "0000:3b:00", "fault": "app_fault", "action": "none", "severity": "warn", "text": "Ch 8", "boot": True}
    [f] = rule.observe(Envelope(ts=1.8e9, job="j", node="n1", source="kernel", kind="xid", data=data, id="x1"))
    assert f.action == "none"


# ---- 3. the subsystem table maps what it knows -------------------------------------------------
@pytest.mark.parametrize("line", [
    "usbhid 2-3:1.0: suspend error -5",
    "tegra-qspi 3270000.spi: QSPI interrupt timeout, but transfer complete",
    "snd_hda_intel 0000:00:1f.3: azx_get_response timeout, switching to polling mode",
    "xhci_hcd 0000:00:14.0: Timeout while waiting for setup device command",
])  # fmt: skip
def test_a_subsystem_outside_the_job_is_recorded_never_given_a_neighbours_class(line):
    events, _, _ = kernel(line)
    assert [(e.kind, e.data["fault"], e.data["action"]) for e in events] == [("subsystem_error", "unknown", "none")]


def test_an_unknown_drivers_error_is_counted_and_mined_not_guessed():
    events, p, heard = kernel("zzwidget 0000:07:00.0: widget engine failed with error -5")
    assert events == [] and p.stats.alarming == 1 and heard


def test_module_taint_notices_of_any_driver_are_benign():
    for line in ("nvidia: module verification failed: signature and/or required key missing - tainting kernel",
                 "mlx_compat: loading out-of-tree module taints kernel."):
        events, p, _ = kernel(line)
        assert events == [] and p.stats.benign == 1


# ---- 4. the missing families --------------------------------------------------------------------
@pytest.mark.parametrize("line, signal, fault, acts", [
    ("Process finished with exit code 139 (interrupted by signal 11: SIGSEGV)", "SIGSEGV", "user_code", True),
    (" 45%|████▌     | 450/1000 [01:02<01:16,  7.2it/s]Fatal Python error: Segmentation fault", "SIGSEGV", "user_code", True),
    ("traceback : Signal 7 (SIGBUS) received by PID 10", "SIGBUS", "host_oom", True),
    ("segmentation fault (core dumped)  python train.py --config x.yaml", "SIGSEGV", "user_code", True),
    ("zsh: segmentation fault (core dumped)  python train.py", "SIGSEGV", "user_code", True),
    ("/bin/bash: line 1:  4242 Bus error               (core dumped) python train.py", "SIGBUS", "host_oom", True),
    ("srun: error: node017: task 3: Floating point exception", "SIGFPE", "user_code", True),
    ("*** SIGILL (@0x7f3a) received by PID 1234 (TID 0x7f) from PID 0; stack trace: ***", "SIGILL", "user_code", True),
    ("exitcode  : -11 (pid: 10)", "SIGSEGV", "user_code", True),
    ("command terminated with exit code 137", "SIGKILL", "host_oom", False),
    ("Killed", "SIGKILL", "host_oom", False),
    ("srun: error: node017: task 0: Killed (out of memory)", "SIGKILL", "host_oom", True),
    ("traceback : Signal 6 (SIGABRT) received by PID 10", "SIGABRT", "user_code", False),  # torchrun records an abort (§9, round 17)
    ("Process finished with exit code 130 (interrupted by signal 2: SIGINT)", "SIGINT", "unknown", False),
])  # fmt: skip
def test_a_process_killed_by_a_signal_in_every_shape(line, signal, fault, acts):
    [e] = trainer(line)
    assert (e.kind, e.data["signal"], e.data["fault"], e.data["action"] != "none") == ("worker_failed", signal, fault, acts)
    assert e.data["rule"] == f"signal.{signal.lower()}"


def test_a_segfault_naming_a_cuda_library_is_cudas():
    [e] = trainer("*** SIGSEGV (@0x0) received by PID 1234 (TID 0x7f3a) from PID 0; stack trace: *** @ 0x7f3a1c2b3d4e (unknown) libcuda.so.1")
    assert e.data["fault"] == "cuda_error"


@pytest.mark.parametrize("line", [
    "Killed 0 stale processes before start",
    "slurmstepd: error: *** JOB 1234 ON node01 CANCELLED AT 2024-01-01T10:00:00 DUE TO TIME LIMIT ***",
    "installing SIGSEGV handler for faulthandler",
    "Sending process 1234 closing signal SIGTERM",
    "Epoch 3: the model killed 4 dragons",
    "exit status 1",
    "Process finished with exit code 0",
])  # fmt: skip
def test_signal_look_alikes_act_on_nothing(line):
    assert acting(trainer(line)) == []


def test_an_exception_reporting_a_signal_is_judged_by_it():
    [e] = trainer("RuntimeError: DataLoader worker (pid 4242) is killed by signal: Segmentation fault. ")
    assert (e.kind, e.data["fault"]) == ("exception", "user_code")
    tb = ["Traceback (most recent call last):", '  File "/x/site-packages/torch/multiprocessing/spawn.py", line 1, in join',
          "    raise ProcessExitedException(", "torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGBUS"]
    [e] = trainer(*tb)
    assert (e.data["fault"], e.data["signal"]) == ("host_oom", "SIGBUS")


def test_autograd_anomaly_nans_are_nan_loss():
    [e] = trainer("RuntimeError: Function 'MulBackward0' returned nan values in its 0th output.")
    assert (e.kind, e.data["fault"]) == ("exception", "nan_loss")


def test_a_checkpoint_that_cannot_be_written_is_storage_by_errno_then_text():
    [e] = trainer("RuntimeError: [enforce fail at inline_container.cc:595] . PytorchStreamWriter failed writing file data/176: file write failed")
    assert (e.data["fault"], e.data["action"]) == ("storage", "alert")
    [e] = trainer("RuntimeError: [enforce fail at inline_container.cc:664] . unexpected pos 56833600 vs 56833492")
    assert e.data["fault"] == "storage"
    [e] = trainer("RuntimeError: PytorchStreamWriter failed writing file data/3: [Errno 5] Input/output error")
    assert (e.data["fault"], e.data["action"], e.data["error"]) == ("storage", "stop_time_diagnosis", "EIO")


def test_an_xid_with_a_mig_designator_or_an_elided_one_is_read():
    # NVIDIA open-gpu-kernel-modules src/nvidia/.../nv_debug_dump / the A100 memory error management page
    [e], _, _ = kernel("[ 5000.0] NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No")
    assert (e.data["xid"], e.data["pci"], e.data["gpu_instance"], e.data["fault"]) == (94, "0000:01:00", 5, "gpu_memory")
    [e], _, _ = kernel("[ 5000.0] NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 13, pid=9, name=a, Graphics Exception")
    assert (e.data["gpu_instance"], e.data["compute_instance"]) == (1, 2)
    [e], _, _ = kernel("kernel: NVRM: Xid (PCI:...): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 11 (...)")
    assert (e.data["xid"], e.data["pci"]) == (145, "unknown")


def test_an_xid_or_sxid_line_that_fails_to_parse_is_always_counted_alarming():
    for line in ("NVRM: Xid (PCI:0000:01:00): quiet words", "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): garbled"):
        events, p, heard = kernel(line)
        assert acting(events) == [] and p.stats.alarming == 1 and heard, line


@pytest.mark.parametrize("to, fault, action", [
    ("0x1 (PF FLR)", "gpu_reset_required", "evict_reset_gpu"),
    ("0x1 (GPU Reset Required)", "gpu_reset_required", "evict_reset_gpu"),
    ("0x2 (Node Reboot Required)", "gpu_reset_required", "evict"),
    ("0x2 (OS Reboot)", "gpu_reset_required", "evict"),
    ("0x3 (Drain P2P)", "gpu_reset_required", "evict_reset_gpu"),
    ("0x4 (Drain and Reset)", "gpu_reset_required", "evict_reset_gpu"),
    ("0x2", "gpu_reset_required", "evict"),
    ("0x9 (Something New)", "gpu_reset_required", "alert"),
    ("0x0 (None)", "unknown", "none"),
])  # fmt: skip
def test_every_xid_154_recovery_action(to, fault, action):
    [e], _, _ = kernel(f"[ 5000.0] NVRM: Xid (PCI:0000:0d:00): 154, GPU recovery action changed from 0x0 (None) to {to}")
    assert (e.data["fault"], e.data["action"]) == (fault, action)


@pytest.mark.parametrize("line", [
    "[ 5000.0] ena 0000:00:05.0 eth0: Found a Tx that wasn't completed on time, qid 4, index 220.",
    "[ 5000.0] bnxt_en 0000:3b:00.0 ens1f0np0: TX timeout detected, starting reset task!",
    "[ 5000.0] e1000e 0000:00:19.0 eno1: Detected Hardware Unit Hang: Tx Unit Hang",
    "[ 5000.0] virtio_net virtio0 eth0: TX timeout on queue: 0, sq: output.0, vq: 0x1, name: output.0, 5168 usecs ago",
])  # fmt: skip
def test_a_transmit_timeout_of_any_driver_is_the_nics(line):
    events, _, _ = kernel(line)
    assert [(e.kind, e.data["fault"], e.data["action"]) for e in events] == [("nic_error", "nic", "alert")]


def test_a_driver_tx_timeout_folds_into_the_watchdog_record_of_its_device():
    p = KernelLogParser(now=1.8e9)
    first = p.feed("[ 5000.0] NETDEV WATCHDOG: eth0 (ena): transmit queue 4 timed out")
    second = p.feed("[ 5000.1] ena 0000:00:05.0 eth0: Found a Tx that wasn't completed on time, qid 4, index 220.")
    assert [e.kind for e in first] == ["nic_error"] and second == []


def test_a_cgroup_memory_report_is_host_oom_and_folds_with_its_victim():
    p = KernelLogParser(now=1.8e9)
    # the cgroup v1 report (public GitHub file, index id 7834335718); v2 prints the same line
    head = p.feed("[ 5000.0] memory: usage 1048576kB, limit 1048576kB, failcnt 77296")
    swap = p.feed("[ 5000.0] memory+swap: usage 1048576kB, limit 9007199254740988kB, failcnt 0")
    victim = p.feed("[ 5000.1] Memory cgroup out of memory: Killed process 4242 (python) total-vm:1kB")
    assert [(e.kind, e.data["fault"], e.data["action"]) for e in head] == [("oom_kill", "host_oom", "restart")]
    assert swap == [] and victim == []
    # the kernel prints it at info: its own level does not quiet it (printk_level)
    [e], _, _ = kernel("6,1,5000000000,-;memory: usage 1048576kB, limit 1048576kB, failcnt 3")
    assert e.data["action"] == "restart"


def test_a_trainer_line_that_says_its_trouble_was_recovered_is_not_guessed_by_the_model():
    p = parser_for("nccl")
    assert p.feed("[rank0]: NCCL communicator recovered successfully after error") == []
    assert p.stats.alarming == 1 and p.stats.by_model == 0


def test_every_benign_entry_takes_its_own_example_and_nothing_acts_on_it():
    from faultlens.parsing.benign import TABLE, for_source, parse_table

    for entry in parse_table(TABLE.read_text(encoding="utf-8"), TABLE.name):
        source = "kernel" if entry.source in ("kernel", "any") else entry.source
        assert entry.example and for_source(source).match(entry.example) is not None, entry.id
        assert acting(parser_for(source).feed(entry.example)) == [], entry.id


def test_nccls_ib_completion_errors_with_or_without_its_prefix_are_ncclerrors():
    # NVIDIA/nccl issues 1814 and 1664 (the newer "status=N ... vendor err" form; a plugin's own print)
    for line in ("NCCL WARN NET/IB : Got completion from peer 10.0.0.2<55921> with status=12 opcode=1 len=0 vendor err 129 (Send)",
                 "NET/IBP:Got completion from peer 10.0.0.3<36315> with status=12 opcode=32698 len=32696 vendor err 129 (Send)"):
        [e] = trainer(line)
        assert (e.kind, e.data["fault"], e.data["ib_error"]) == ("nccl_warn", "nccl_error", 12), line
    assert trainer("NET/IB : Got completion from peer 10.0.0.3<1> with status=0 opcode=1") == []


def test_a_cuda_error_naming_nvlink_is_the_links():
    [e] = trainer("CUDA error: uncorrectable NVLink error detected during the execution")
    assert (e.kind, e.data["fault"]) == ("cuda_error", "nvlink")


def test_an_xid_loggers_dump_lines_are_that_xid_and_fold_into_its_record():
    p = KernelLogParser(now=1.8e9)
    head = p.feed("[ 5000.0] NVRM: Xid (PCI:0000:01:00): 119, pid=1, name=python, Timeout after 6s of waiting for RPC response")
    dump = p.feed("[ 5000.0] NVRM: _kgspLogXid119: ********************************* GSP Timeout *****************")
    assert [e.data["xid"] for e in head] == [119] and dump == []
    # the dump alone (its Xid line lost): one event of that Xid, the rest of the dump folded
    p = KernelLogParser(now=1.8e9)
    [e] = p.feed("[ 5000.0] NVRM: _kgspLogXid119: ********************************* GSP Timeout *****************")
    assert (e.data["xid"], e.data["fault"], e.data["pci"]) == (119, "gpu_reset_required", "unknown")
    assert p.feed("[ 5000.1] NVRM: _kgspLogXid119: Xid 119 in 6.0s") == []


@pytest.mark.parametrize("line, fault", [
    ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).", "host_oom"),
    ("RuntimeError: unable to write to file </torch_1234_567>: No space left on device (28)", "host_oom"),
    ("OSError: [Errno 28] No space left on device: '/ckpt/step_100.pt'", "storage"),
    ("RuntimeError: No CUDA GPUs are available", "gpu_lost"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "user_code"),
    ("[rank2]:[E1023 10:00:00.000000 123 ProcessGroupNCCL.cpp:1595] [PG 0 (default_pg) Rank 2] Process group watchdog thread "
     "terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5", "nccl_error"),
    ("RuntimeError: Detected mismatch between collectives on ranks.", "user_code"),
    ("WARNING:root:NaN or Inf found in input tensor.", "nan_loss"),
])  # fmt: skip
def test_trainer_lines_read_by_their_general_form(line, fault):
    found = trainer(line)
    assert found and {e.data["fault"] for e in found} == {fault}, [(e.kind, e.data["fault"]) for e in found]


def test_a_refused_firmware_command_is_recorded_and_an_unanswered_one_alerts():
    # public GitHub file, index id 39599850764 (the firmware refused a capability query: the device answered)
    [e], _, _ = kernel("[ 5000.0] mlx5_core 0000:c1:00.0: mlx5_cmd_out_err:803:(pid 1097): QUERY_HCA_CAP(0x100) op_mod(0x40) "
                       "failed, status bad parameter(0x3), syndrome (0x5add95), err(-22)")
    assert (e.data["fault"], e.data["action"], e.data["rule"]) == ("nic", "none", "nic.mlx5_cmd_refused")
    [e], _, _ = kernel("[ 5000.0] mlx5_core 0000:3b:00.0: wait_func:1045:(pid 1): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource")
    assert (e.data["fault"], e.data["action"]) == ("nic", "alert")


def test_a_kernel_gpf_in_the_newer_wording_is_an_oops():
    [e], _, _ = kernel("[ 7197.250436] general protection fault, probably for non-canonical address 0xdead000000000108")
    assert (e.kind, e.data["action"]) == ("kernel_oops", "evict")
    # a user process's GPF is its own segfault record, not the kernel's
    [e], _, _ = kernel("[ 7197.250436] traps: python[1234] general protection fault ip:7f0 sp:7ffd error:0 in libc.so.6[7f0+1000]")
    assert e.kind == "segfault"


def test_io_errors_of_an_optical_or_floppy_drive_are_recorded():
    for line in ("[ 5000.1] blk_update_request: I/O error, dev sr0, sector 0 op 0x0:(READ) flags 0x80700 phys_seg 1 prio class 0",
                 "[ 5000.1] Buffer I/O error on dev fd0, logical block 0, async page read"):
        [e], _, _ = kernel(line)
        assert (e.data["fault"], e.data["action"]) == ("storage", "none") and "optical" in e.data["quiet"]
    [e], _, _ = kernel("[ 5000.1] blk_update_request: I/O error, dev sda, sector 28751848")
    assert e.data["action"] != "none"


@pytest.mark.parametrize("line", [
    "[ 5000.1] nvme nvme0: Shutdown timeout set to 10 seconds",
    "[ 5000.1] pcieport 0000:00:01.0: DPC: error containment capabilities: Int Msg #0, RPExt+ PoisonedTLP+ SwTrigger+",
    "[ 5000.1] GHES: APEI firmware first mode is enabled by APEI bit and WHEA _OSC.",
])  # fmt: skip
def test_settings_stated_in_error_words_fire_nothing(line):
    events, _, _ = kernel(line)
    assert acting(events) == []
