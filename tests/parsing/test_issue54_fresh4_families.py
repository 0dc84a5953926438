"""Issue 54, round 5: the families fresh batch 4 showed missing or crying wolf, each by its general
form (other members of the family than the batch's own line where there are), each beside the healthy
look-alikes that must stay quiet. Lines are stamped past BOOT_UPTIME_S or carry no clock."""

from __future__ import annotations

import pytest

from tests.parsing.test_issue54_fresh1_families import acting, kernel, trainer


def faults(events):
    return {e.data["fault"] for e in events}


# ---- storage: the daemons and tools that report a failed disk or file system ------------------------
@pytest.mark.parametrize("line", [
    "A DegradedArray event had been detected on md device /dev/md0.",
    "A Fail event had been detected on md device /dev/md127.",
    "A DeviceDisappeared event had been detected on md device /dev/md/data.",
    "May  7 13:35:35 localhost kernel: WARNING: MMP writes to pool 'tank' have not succeeded in over 5s; suspending pool",
    "WARNING: Pool 'tank' has encountered an uncorrectable I/O failure and has been suspended.",
    "Dec 28 2015 15:59:02.888314999 ereport.fs.zfs.checksum",
    "May  7 13:35:35 localhost zed: eid=41 class=checksum pool_guid=0x4DF2AB8F8BC5EE6F",
    "status: One or more devices are faulted in response to IO failures.",
    "[ 9123.000001] libceph: osd3 (1)10.0.0.5:6801 socket error on write",
    "[ 9123.000001] libceph: mon1 (1)10.0.0.2:6789 session lost, hunting for new mon",
    "Aug 29 16:05:05 node4 ceph-osd[465565]: 2024-08-29T16:05:05.598+1000 7f71e71648c0 -1 bluefs _allocate failed to allocate 0x400000 on bdev 1",
    "cp: error reading '/mnt/data/shard-0001.tar': Input/output error",
    "tar: /scratch/run7/ckpt.pt: Cannot open: Input/output error",
    "23/01/02 10:00:00 WARN hdfs.DFSClient: Could not obtain block: BP-1:blk_1073741825_1001 file=/data/part-0",
    "Mon Jun 25 22:23:36.298 2018: Close connection to 10.1.1.7 node7 <c0n7>. Attempting reconnect.",
    "Job 12.pbs killed due to exceeding jobfs quota. Quota: 100.0GB, Used: 100.0GB, Host: cn-12",
    "May  7 13:35:35 node1 mount.nfs: mounting srv:/export failed, reason given by server: Permission denied",
])  # fmt: skip
def test_a_storage_daemons_fault_report_is_storage(line):
    assert faults(acting(kernel(line))) | faults(acting(trainer(line))) == {"storage"}


@pytest.mark.parametrize("line", [
    "A RebuildFinished event had been detected on md device /dev/md0.",
    "A TestMessage event had been detected on md device /dev/md0.",
    "errors: No known data errors",
    "May  7 13:35:35 localhost zed: eid=7 class=config_sync pool_guid=0x4DF2AB8F8BC5EE6F",
    "Dec 28 2015 15:59:02.888314999 sysevent.fs.zfs.history_event",
    "[ 9123.000001] libceph: mon0 (1)10.0.0.2:6789 session established",
    "Aug 29 16:05:05 node4 ceph-osd[465565]: 2024-08-29T16:05:05.598+1000 7f71e71648c0  0 bluestore(/var/lib/ceph/osd/ceph-7) _mount path /var/lib/ceph/osd/ceph-7",
    "ls: cannot access '/data/none': No such file or directory",
    "23/01/02 10:00:00 INFO hdfs.DFSClient: Created token for alice on 10.0.0.1:8020",
    "Mon Jun 25 22:23:40.100 2018: Connected to 10.1.1.7 node7 <c0n7>",
])  # fmt: skip
def test_storage_look_alikes_stay_quiet(line):
    assert not acting(kernel(line)) and not acting(trainer(line))


# ---- host memory: the batch schedulers' memory-limit kills ------------------------------------------
@pytest.mark.parametrize("line", [
    "=>> PBS: job killed: mem 38427376kb exceeded limit 33554432kb",
    "=>> PBS: job killed: vmem 9000000kb exceeded limit 8388608kb",
    "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.",
    "Job exceeded a memory resource limit (vmem, pvmem, etc.). Job was aborted",
    "job 42.1 exceeded hard limit \"h_vmem\" of queue \"all.q@node3\" (8.1G > limit:8G) - sending SIGKILL",
])  # fmt: skip
def test_a_schedulers_memory_limit_kill_is_host_oom(line):
    assert faults(acting(trainer(line))) == {"host_oom"}


@pytest.mark.parametrize("line", [
    "=>> PBS: job killed: walltime 86430 exceeded limit 86400",
    "TERM_RUNLIMIT: job killed after reaching LSF run time limit.",
    "Resource_List.mem = 32gb",
])  # fmt: skip
def test_scheduler_limits_other_than_memory_are_not_host_oom(line):
    assert "host_oom" not in faults(acting(trainer(line)))


# ---- clock: an NTP client moving the clock by a second or more ---------------------------------------
@pytest.mark.parametrize("line", [
    "5 Nov 17:27:55 ntpdate[14508]: step time server 2001:67c:1560:8003::c7 offset -3021.868977 sec",
    "5 Nov 17:27:55 ntpdate[14508]: adjust time server 192.0.2.1 offset 1.500000 sec",
    "Jan  1 01:58:34 host ntpd[2825]: adjusting local clock by -12.459975s",
])  # fmt: skip
def test_an_ntp_client_moving_the_clock_a_second_or_more_is_clock_skew(line):
    assert faults(acting(kernel(line))) == {"clock_skew"}


@pytest.mark.parametrize("line", [
    "5 Nov 17:27:55 ntpdate[14508]: adjust time server 192.0.2.1 offset 0.000412 sec",
    "Jan  1 01:58:34 host ntpd[2825]: adjusting local clock by 0.459975s",
    "Jan  1 01:58:34 host ntpd[2825]: peer 192.0.2.1 now valid",
])  # fmt: skip
def test_an_ntp_clients_ordinary_corrections_are_quiet(line):
    assert not acting(kernel(line))


# ---- NIC: bonding, queue-enable polls, NCCL's async events of the local HCA ---------------------------
@pytest.mark.parametrize("line", [
    "[ 1310.479939] internet: link status down for interface eno4, disabling it in 200 ms",
    "[ 1310.479939] bond0: link status definitely down for interface ens1f0, disabling it",
    "ixgbe: rxdctl.enable on rx queue 0 not cleared within the polling  period",
    "[ 1310.5] ixgbe 0000:03:00.0: RXDCTL.ENABLE on Rx queue 3 not set within the polling period",
])  # fmt: skip
def test_a_nic_losing_a_port_or_its_queues_is_nic(line):
    assert faults(acting(kernel(line))) == {"nic"}


@pytest.mark.parametrize("line", [
    "node201:127799:127863 [0] transport/net_ib.cc:101 NCCL WARN NET/IB : mlx5_0:1 Got async event : local access violation work queue error",
    "h:238:1219 [0] transport/net_ib.cc:180 NCCL WARN NET/IB : mlx5_ib0:1 async fatal event on QP (0x7f69f01519a8): local work queue catastrophic error",
    "h:1:2 [0] transport/net_ib.cc:101 NCCL WARN NET/IB : mlx5_2:1 Got async event : CQ error",
])  # fmt: skip
def test_an_async_event_of_the_local_hca_is_nic_not_the_collectives(line):
    assert faults(acting(trainer(line))) == {"nic"}


@pytest.mark.parametrize("line", [
    "[ 1310.479939] bond0: link status up for interface eno4, enabling it in 200 ms",
    "Jan 31 10:13:36 pntop01 kernel: i40e 0000:19:00.0: DCB init failed -63, disabled",
    "Jan 31 10:13:36 pntop01 kernel: i40e 0000:19:00.0: Query for DCB configuration failed, err I40E_ERR_NOT_READY aq_err OK",
    "[ 1310.5] ice 0000:17:00.0: DCB is disabled in FW",
])  # fmt: skip
def test_nic_look_alikes_stay_quiet(line):
    assert not acting(kernel(line))


def test_eio_on_a_gpu_device_node_is_not_read_as_the_disks():
    events = kernel("cat: /dev/nvidia0: Input/output error") + trainer("cat: /dev/nvidia0: Input/output error")
    assert all(e.data.get("rule") != "storage.eio_on_path" for e in events)


def test_ucx_memlock_advice_is_quiet():
    ucx = ("[1668693503.473099] [ampere:1188443:0]          ib_log.c:246  UCX  ERROR mlx5_0: ibv_create_cq() failed: "
           "Cannot allocate memory. Please set max locked memory (ulimit -l) to 'unlimited' (current: 64 kbytes)")
    assert not acting(trainer(ucx))


# ---- RDMA completion errors in libfabric's and the mlx5 provider's words: the transport's -------------
@pytest.mark.parametrize("line", [
    "libfabric:ofi_rxm:cq:rxm_cq_read_write_error():819<warn> fi_cq_readerr: err: 5, prov_err: remote access error (10)",
    "libfabric:4517:1708::efa:cq:efa_rdm_rxe_handle_error():712<warn> err: 5, message: Invalid address (7)",
    "mlx5: cn10: got completion with error:",
])  # fmt: skip
def test_a_providers_completion_error_is_the_collectives_error(line):
    events = acting(trainer(line))
    assert faults(events) == {"nccl_error"}
    assert all(e.data["action"] not in ("evict", "evict_reset_gpu") for e in events)


# ---- GPU: the RM answering NV_ERR_RESET_REQUIRED ----------------------------------------------------
@pytest.mark.parametrize("line", [
    "[ 9123.1] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874",
    "[ 9123.1] NVRM: rpcRmApiAlloc_GSP: GspRmAlloc failed: hClient=0xc1d1a616; hParent=0x5c000054; hObject=0x5c00005b; hClass=0x0000c86f; paramsSize=0x00000170; paramsStatus=0x00000062; status=0x00000062",
])  # fmt: skip
def test_the_rm_answering_reset_required_is_gpu_reset_required(line):
    assert faults(acting(kernel(line))) == {"gpu_reset_required"}


# ---- kernel: AER's older 'Correctable' word, the pre-4.14 task line without an address ---------------
def test_a_correctable_pcie_bus_error_is_recorded_and_an_uncorrectable_one_still_acts():
    corrected = "Sep 19 16:18:02 bubz kernel: [68183.615810] pcieport 0000:00:03.1: PCIe Bus Error: severity=Correctable, type=Data Link Layer, (Transmitter ID)"
    uncorrected = "Sep 19 16:18:02 bubz kernel: [68183.615810] pcieport 0000:00:03.1: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)"
    assert kernel(corrected) and not acting(kernel(corrected))
    assert faults(acting(kernel(uncorrected))) == {"kernel"}


def test_a_task_state_line_without_an_address_is_a_kernel_alert_and_a_running_task_is_not():
    assert faults(acting(kernel("[ 2417.810100] kworker/0:0     D    0  2904      2 0x00000000"))) == {"kernel"}
    assert not acting(kernel("[ 2417.810100] kworker/0:0     S    0  2904      2 0x00000000"))


# ---- trainer: NaN by a bare tensor repr and a non-finite gradient norm; signals in other locales -------
@pytest.mark.parametrize("line", [
    "loss tensor(nan, device='cuda:0', dtype=torch.float16, grad_fn=<MeanBackward0>)",
    "train.py:317: FutureWarning: Non-finite norm encountered in torch.nn.utils.clip_grad_norm_; continuing anyway.",
    "RuntimeError: The total norm of order 2.0 for gradients from `parameters` is non-finite, so it cannot be clipped.",
])  # fmt: skip
def test_a_nan_loss_or_non_finite_gradient_norm_is_nan_loss(line):
    assert faults(acting(trainer(line))) == {"nan_loss"}


@pytest.mark.parametrize("line", [
    "loss tensor(0.6931, device='cuda:0', grad_fn=<MeanBackward0>)",
    "grad norm 1.25, non-finite steps skipped: 0",
])  # fmt: skip
def test_finite_losses_and_norms_are_quiet(line):
    assert "nan_loss" not in faults(acting(trainer(line)))


@pytest.mark.parametrize("line,fault", [
    ("已杀死", "host_oom"),
    ("Getötet", "host_oom"),
    ("段错误", "user_code"),
    ("Speicherzugriffsfehler", "user_code"),
    ("line 1: 4242 Ошибка сегментирования python train.py", "user_code"),
])  # fmt: skip
def test_a_shells_signal_words_in_another_locale_are_read_as_the_signal(line, fault):
    events = trainer(line)
    assert events and faults(events) == {fault}
