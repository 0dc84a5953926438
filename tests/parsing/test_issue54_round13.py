"""Issue 54 round 13: the /dev/kmsg level read in every header form, and fresh batches 15 and 16
mined: each healthy line that fired closed by its general form, each miss by its program's own
format (docs/rules.md, round 13), beside its healthy look-alikes."""

from __future__ import annotations

import pytest

from faultlens.parsing.alarm import kernel_priority
from faultlens.parsing.kernel_log import KernelLogParser
from faultlens.parsing.timestamps import split_timestamp
from tests.parsing.line_events import acting as _acting
from tests.parsing.line_events import events as _events


def _faults(line: str, source: str = "kernel") -> set:
    return {e.data.get("fault") for e in _acting(line, source)}


# --- the kmsg header with and without its flags field ------------------------------------------------
# Real messages (nvme pci.c nvme_timeout, ext4 __ext4_error, mlx5 cmd failure) behind the record header
# /dev/kmsg gives them (Documentation/ABI/testing/dev-kmsg: "prefix,seq,usec,flags;"), and behind the
# same header without its flags field, as relays and some readers pass it on.
_MESSAGES = [
    "nvme nvme0: I/O 12 QID 3 timeout, aborting",
    "EXT4-fs error (device sda1): ext4_find_entry:1455: inode #2: comm ls: reading directory lblock 0",
    "sd 2:0:0:0: [sdb] tag#0 FAILED Result: hostbyte=DID_OK driverbyte=DRIVER_SENSE",
]


@pytest.mark.parametrize("flags", [",-", ",c", ",+", ",-,caller=T412", ""])
@pytest.mark.parametrize("level", range(8))
def test_the_kmsg_level_is_read_with_or_without_flags(level: int, flags: str) -> None:
    raw = f"{level},902,1048771904{flags};{_MESSAGES[0]}"
    assert kernel_priority(raw) == level
    stamped = split_timestamp(raw)
    assert stamped.message == _MESSAGES[0]
    assert stamped.mono == pytest.approx(1048.771904)


def test_the_facility_bits_are_not_the_level() -> None:
    # prefix = facility * 8 + level: 14 is user.info, 11 user.err
    assert kernel_priority("14,3,104,-;systemd[1]: Started Journal Service.") == 6
    assert kernel_priority("11,4,105;systemd-udevd[312]: error opening ATTR") == 3


@pytest.mark.parametrize("message", _MESSAGES)
@pytest.mark.parametrize("flags", [",-", ""])
def test_an_info_kmsg_record_never_acts_on_its_own(message: str, flags: str) -> None:
    for level in (5, 6, 7):
        p = KernelLogParser(live_from=0)
        out = p.feed(f"{level},902,5000000000{flags};{message}")
        assert [e for e in out if e.data.get("action") not in (None, "none")] == [], (level, flags)


@pytest.mark.parametrize("message", _MESSAGES)
@pytest.mark.parametrize("flags", [",-", ""])
def test_an_err_kmsg_record_still_acts(message: str, flags: str) -> None:
    p = KernelLogParser(live_from=0)
    out = p.feed(f"3,902,5000000000{flags};{message}")
    assert [e for e in out if e.data.get("action") not in (None, "none")], flags


def test_an_err_record_with_no_error_word_reaches_the_fallback_without_flags() -> None:
    # The pre-filter lets a line with no literal through only on an err level; without flags that
    # level went unread and the line was skipped unseen.
    seen: list[str] = []
    p = KernelLogParser(live_from=0, on_unrecognised=seen.append)
    p.feed("3,77,5000000000;frobnicator 0000:3b:00.0: giving up on channel 2")
    assert seen == ["frobnicator 0000:3b:00.0: giving up on channel 2"]


@pytest.mark.parametrize("raw", ["6,902;too short", "6,a,101;not a header", "2024-01-31 06:00:01,902,101;csv"])
def test_what_is_not_a_kmsg_header_keeps_no_level(raw: str) -> None:
    assert kernel_priority(raw) is None


# --- what cried wolf ------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    # blkdev_issue_zeroout's fallback: the device lacks WRITE SAME, the kernel zeroes it itself
    "May 23 14:33:11 iv-splv-link kernel: [1728536.623544] sda1: WRITE SAME failed. Manually zeroing.",
    "[22118.009112] vda1: WRITE SAME failed. Manually zeroing.",
    # e1000e's PHY power state at resume; the driver goes on (netdev 2020-07-30)
    "Dec 12 09:22:32 peter-x1c kernel: e1000e 0000:00:1f.6 enp0s31f6: Failed to disable ULP",
    "[ 1663.694828] e1000e 0000:00:19.0 eth0: Failed to disable ULP",
    # an ACPI method the firmware lacks (pci-acpi.c)
    "[  226.391528] pcieport 0000:00:1c.0: ACPI _REG disconnect evaluation failed (5)",
    "[  226.391528] pcieport 0000:00:1c.0: ACPI _REG connect evaluation failed (5)",
])
def test_lines_that_cried_wolf_are_recorded(line: str) -> None:
    assert _acting(line) == []


@pytest.mark.parametrize(("line", "fault"), [
    # beside them, the same devices' faults still act
    ("[ 1665.093513] e1000e 0000:00:19.0 eth0: Hardware Error", "nic"),
    ("[ 1728.623544] blk_update_request: I/O error, dev sda, sector 2048 op 0x1:(WRITE) flags 0x0", "storage"),
])
def test_their_neighbours_still_act(line: str, fault: str) -> None:
    assert fault in _faults(line)


# --- misses, by each program's own format, beside their look-alikes ---------------------------------
@pytest.mark.parametrize(("line", "source", "fault"), [
    # the GPU off the bus when woken (pci.c), only for a GPU driver's device
    ("kernel: nvidia 0000:01:00.0: can't change power state from D3cold to D0 (config space inaccessible)", "kernel", "gpu_lost"),
    # GSP: never booted, the reset wording the driver also uses, NV_ERR_RESET_REQUIRED printed bare
    ("[  +0.000001] NVRM: kgspInitRm_IMPL: Max GSP-RM boot attempts exceeded: 4/4", "kernel", "gpu_lost"),
    ("kernel: NVRM: kgspWaitForGfwBootOk_TU102: (the GPU may be in a bad state and may need to be reset)", "kernel", "gpu_reset_required"),
    ("NVRM: gpuPowerManagementResume: GSP boot failed at resume (bootMode 0x1): 0x62", "kernel", "gpu_reset_required"),
    # nvgpu (Tegra) names the context that took an MMU fault, Xid 31's class
    ("[  500.10] nvgpu: 17000000.gpu       nvgpu_tsg_set_ctx_mmu_error:1069 [ERR]  TSG 8 generated a mmu fault", "kernel", "app_fault"),
    # Hyper-V's disk failing a read or write
    ("[  249.512760] hv_storvsc fd1d2cbd-ce7c-535c-966b-eb5f811c95f0: tag#683 cmd 0x28 status: scsi 0x2 srb 0x4 hv STATUS_UNSUCCESSFUL", "kernel", "storage"),
    ("[  500.10] hv_storvsc fd1d2cbd-ce7c-535c-966b-eb5f811c95f0: tag#12 cmd 0x2a status: scsi 0x2 srb 0x4 hv 0xc0000001", "kernel", "storage"),
    # btrfs read-only at info, md degraded, NVMe multipath waiting, Ceph's blocked requests
    ("Feb 22 21:35:56 Tower7 kernel: BTRFS info (device sdb state E): forced readonly", "kernel", "storage"),
    ("[1158185.744188] md/raid:md1: Operation continuing on 11 devices.", "kernel", "storage"),
    ("[  500.10] md/raid1:md127: Operation continuing on 1 devices.", "kernel", "storage"),
    ("[  683.652086] block nvme0n1: no usable path - requeuing I/O", "kernel", "storage"),
    ("Nov 03 08:25:09 cephadm2 ceph-mds[3133]: log_channel(cluster) log [WRN] : 1 slow requests, 1 included below; oldest blocked for > 31.627241 secs", "kernel", "storage"),
    # the page allocator and the kernel's own checks
    ("[54273.996578] apache2: page allocation failure: order:0, mode:0x90c00(GFP_NOIO|__GFP_NORETRY|__GFP_NOMEMALLOC), nodemask=(null),cpuset=/,mems_allowed=0", "kernel", "host_oom"),
    ("[12537.059309] WARNING: possible circular locking dependency detected", "kernel", "kernel"),
    ("[  409.680668] WARNING: possible recursive locking detected", "kernel", "kernel"),
    ("[ 1048.771904] WARNING: CPU: 5 PID: 25997 at fs/dcache.c:1651", "kernel", "kernel"),
    ("[31033.887797] CacheFiles: Assertion failed", "kernel", "kernel"),
    ("[  552.905799] XFS: Assertion failed: !current->journal_info, file: fs/xfs/xfs_trans.h, line: 280", "kernel", "kernel"),
    # CockroachDB's clock-offset check, both generations
    ("clock synchronization error: this node is more than 500ms away from at least half of the known nodes", "nccl", "clock_skew"),
    ("F170708 00:01:58.440256 26 server/server.go:162  [n?] fewer than half the known nodes are within the maximum offset of 500ms (0 of 1)", "nccl", "clock_skew"),
    # the job's own command and configuration
    ("slurmstepd: error: execve(): /gpfs/home1/gsavchenko/bench_2/cloud_noise/./run.sh: No such file or directory", "nccl", "user_code"),
    ("RuntimeError: The server socket has failed to listen on any local network address. port: 4321, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use", "nccl", "user_code"),
    ("OSError: /home/u/ckpt_100000 does not appear to have a file named config.json. Checkout 'https://huggingface.co//home/u/ckpt_100000/tree/None' for available files.", "nccl", "user_code"),
    # a progress bar's NaN loss with the fp16 scaler's note glued after it
    ("[Epoch 0 / Train]:   0%|          | 2/8614 [00:00<1:00:07,  2.39it/s, loss=nan, lr=2.5e-05][deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 2147483648.0, reducing to 1073741824.0", "nccl", "nan_loss"),
])
def test_round13_misses_are_read(line: str, source: str, fault: str) -> None:
    assert fault in _faults(line, source)


@pytest.mark.parametrize(("line", "source"), [
    # a GPU card's sound function is not the GPU
    ("[  500.10] snd_hda_intel 0000:01:00.1: can't change power state from D3cold to D0 (config space inaccessible)", "kernel"),
    # smartd's ATA pass-through the virtual disk does not implement
    ("[  500.10] hv_storvsc fd1d2cbd-ce7c-535c-966b-eb5f811c95f0: tag#0 cmd 0x85 status: scsi 0x2 srb 0x4 hv 0xc0000001", "kernel"),
    ("[  500.10] BTRFS info (device sdb1): disk space caching is enabled", "kernel"),
    ("[  500.10] md/raid:md0: raid level 5 active with 4 out of 4 devices, algorithm 2", "kernel"),
    ("[  500.10] Lock dependency validator: Copyright (c) 2006 Red Hat, Inc., Ingo Molnar", "kernel"),
    ("[  500.10] ceph-osd[1]: log_channel(cluster) log [INF] : 3.1f scrub ok", "kernel"),
    ("I230807 23:34:17.522098 520 1@server/server.go:246 [n4] clock offset: 1.2ms", "nccl"),
    # the scaler's note alone, and after a finite loss
    ("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768", "nccl"),
    ("  0%|  | 2/8614 [00:00<1:00:07,  2.39it/s, loss=1.234, lr=2.5e-05][deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 2147483648.0, reducing to 1073741824.0", "nccl"),
])
def test_round13_look_alikes_stay_quiet(line: str, source: str) -> None:
    assert _acting(line, source) == []


def test_a_file_systems_warning_stays_storage_and_the_vfs_core_is_the_kernels() -> None:
    assert _faults("[  500.10] WARNING: CPU: 5 PID: 25997 at fs/ext4/inode.c:3901 ext4_set_page_dirty+0x44/0x60") == {"storage"}
    assert _faults("[  500.10] WARNING: CPU: 5 PID: 25997 at fs/namei.c:1651 walk_component+0x1/0x2") == {"kernel"}


def test_a_gsp_boot_failure_with_another_status_is_not_reset_required() -> None:
    assert "gpu_reset_required" not in _faults("NVRM: gpuPowerManagementResume: GSP boot failed at resume (bootMode 0x1): 0x65")


# --- the step of a NaN progress line whose counter is padded ------------------------------------------
# Megatron-LM's training_log pads the iteration to the width of the last one (found by an outside-check
# rehearsal, tests/outside/): the step the NaN came at is what remediation rolls back before.
@pytest.mark.parametrize(("line", "step"), [
    (" iteration     6150/  500000 | consumed samples:      3148800 | elapsed time per iteration (ms): 612.3 | "
     "learning rate: 2.999E-04 | global batch size:   512 | lm loss: nan | loss scale: 1.0 | grad norm: nan | "
     "number of skipped iterations:   0 | number of nan iterations:   1 |", 6150),
    ("step: 41 loss=nan", 41),
    ("Step #7 | loss nan", 7),
])
def test_a_nan_lines_step_is_read_through_padding(line: str, step: int) -> None:
    [nan] = [e for e in _events(line, "nccl") if e.kind == "nan"]
    assert nan.data["fault"] == "nan_loss" and nan.data["step"] == step
