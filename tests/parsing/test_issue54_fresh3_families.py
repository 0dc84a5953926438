"""Issue 54, round 4: the families fresh batch 3 showed missing or crying wolf, each by its general
form (other members of the family than the batch's own line where there are), each beside the healthy
look-alikes that must stay quiet; and the one convention for RDMA completion errors. Lines are stamped
past BOOT_UPTIME_S or carry no clock."""

from __future__ import annotations

import pytest

from faultlens.parsing.timestamps import split_timestamp
from tests.parsing.test_issue54_fresh1_families import acting, kernel, trainer


def faults(events):
    return {e.data["fault"] for e in events}


# ---- RDMA completions: the transport's error, whoever prints it; the local HCA's own trouble: nic ----
@pytest.mark.parametrize("line", [
    "[lxbk1127:2330859:0:2330859] ib_mlx5_log.c:177  Transport retry count exceeded on mlx5_0:1/IB (synd 0x15 vend 0x81 hw_synd 0/0)",
    "[a670n1:162239:0:162239] ib_mlx5_log.c:177  Local protection on mlx5_0:1/IB (synd 0x4 vend 0x51 hw_synd 0/2)",
    "[h:1:0:1] ib_mlx5_log.c:177  Remote access error on mlx5_2:1/RoCE (synd 0x13 vend 0x88 hw_synd 0/0)",
    "[ast1815:6807 :0:6807] ib_mlx5_log.c:115  FATAL: Error on mlx5_3:1 QP 0xe6d7 wqe[7821]: Transport retry count exceeded (synd 0x15 vend 0x81) opcode SEND",
    "[1701292112.836497] [a670n1:162239:0]          ucp_ep.c:1508 UCX  DIAG  ep 0x7f1eac0b5108: error 'Input/output error' on rc_mlx5/mlx5_0:1 will not be handled since no error callback is installed",
    "[1.2] [h:1:0]          ucp_ep.c:1508 UCX  ERROR ep 0x7f1e: error 'Endpoint timeout' on dc_mlx5/mlx5_1:1 will not be handled since no error callback is installed",
    "Unable to write to EQ: Missing or unavailable event queue. err: Input/output error (5) prov_errno: Unknown error -12 (-12) prov/efa/src/rxr/rxr.h:1343",
    "CQE ERROR wr_id=3 status=5(work request flushed error) opcode=1 byte_len=0 vendor_err=0xf9 qp_num=0x2c10",
    "Failed to modify QP to RTS: Connection timed out",
])  # fmt: skip
def test_a_transport_completion_error_is_the_collectives_error_never_an_eviction(line):
    events = acting(trainer(line))
    assert faults(events) == {"nccl_error"}
    assert all(e.data["action"] not in ("evict", "evict_reset_gpu") for e in events)


@pytest.mark.parametrize("line", [
    "[1701292112.829711] [a670n1:162239:0]      ucp_worker.c:1855 UCX  INFO    0x100b240 inter-node cfg#3 tag(rc_mlx5/mlx5_0:1 rc_mlx5/mlx5_0:1)",
    "[1.3] [h:1:0]     ucp_context.c:1101 UCX  WARN  network device 'mlx5_0:1' is not available, please use one or more of: 'eth0'(tcp)",
    "gpu7:14605:14673 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
])  # fmt: skip
def test_rdma_set_up_lines_are_quiet(line):
    assert not acting(trainer(line))


def test_an_nvme_over_rdma_completion_error_is_the_storages():
    line = "nvme_qpair.c: 453:spdk_nvme_qpair_process_completions: *ERROR*: CQ error, abort requests after transport retry counter exceeded"
    assert faults(acting(trainer(line))) == {"storage"}


def test_the_local_hcas_own_trouble_stays_nic():
    assert faults(acting(kernel("b1360: [14280.445220] mlx5_core 0000:61:00.0: wait_func_handle_exec_timeout:1104:(pid 141183): cmd[22]: CREATE_DCT(0x710) No done completion"))) == {"nic"}  # fmt: skip
    assert faults(acting(trainer("c1:1:2 [0] NCCL WARN NET/IB : mlx5_3:1 Got async event : port error"))) == {"nic"}
    assert faults(acting(trainer("Fatal error:  device '*': sys files not found (/sys/class/infiniband/*/ports)"))) == {"nic"}


# ---- syslog in any locale --------------------------------------------------------------------
@pytest.mark.parametrize("prefix", ["kvě 25 19:29:48 bc250 kernel: ", "maj 08 19:27:35 RX-78-FPC kernel: ", "févr. 3 10:00:00 node1 kernel: "])
def test_a_syslog_prefix_in_another_locale_is_taken_off(prefix):
    assert split_timestamp(prefix + "amdgpu 0000:01:00.0: ring sdma0 timeout").message == "amdgpu 0000:01:00.0: ring sdma0 timeout"
    assert faults(acting(kernel(prefix + "amdgpu 0000:01:00.0: ring sdma0 timeout, signaled seq=309, emitted seq=313"))) == {"gpu_reset_required"}  # fmt: skip


def test_a_line_that_only_starts_with_a_word_and_a_number_keeps_its_text():
    assert split_timestamp("step 25 10:00:00 loss 1.5").message == "step 25 10:00:00 loss 1.5"


# ---- GPUs --------------------------------------------------------------------------------------
@pytest.mark.parametrize("line, fault", [
    ("[ 9000.1] amdgpu 0000:03:00.0: amdgpu: Fatal error during GPU init", "gpu_lost"),
    ("[ 9000.1] amdgpu 0000:03:00.0: amdgpu: hw_init of IP block <gfx_v11_0> failed -110", "gpu_lost"),
    ("[ 9000.1] amdgpu 0000:03:00.0: amdgpu: SMU: I'm not done with your previous command!", "gpu_reset_required"),
    ("[ 9000.1] drmn0: [gfxhub0] retry page fault (src_id:0 ring:0 vmid:3 pasid:32770, for process  pid 101779 thread  pid 101779)", "app_fault"),
    ("NVRM: GPU0 _kgspRpcGspEventPmuHalted: Received signal from GSP that PMU has halted.", "gpu_reset_required"),
])  # fmt: skip
def test_gpu_families(line, fault):
    assert faults(acting(kernel(line))) == {fault}


def test_nvml_finding_no_driver_is_gpu_lost():
    assert faults(acting(trainer("stderr: nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown"))) == {"gpu_lost"}  # fmt: skip
    assert not acting(trainer("NVML library version: 550.54"))


@pytest.mark.parametrize("line", [
    "[ 9000.1] [drm:dc_dmub_srv_wait_idle [amdgpu]] *ERROR* Error waiting for DMUB idle: status=3",
    "[ 9000.1] [drm:dm_helpers_dp_write_dpcd [amdgpu]] *ERROR* Failed to find connector for link!",
    "[ 9000.1] mlx4_core 0000:0d:00.0: command 0x5a failed: fw status = 0x2",
    "[ 9000.1] amdgpu 0000:03:00.0: amdgpu: SMU is resumed successfully!",
])  # fmt: skip
def test_display_and_refused_commands_are_quiet(line):
    assert not acting(kernel(line))


def test_dcgms_optional_module_failing_to_load_is_quiet():
    line = "2024-02-01 14:12:01.207 ERROR [9596:9598] [[SysMon]] A runtime exception occured when creating module. Ex: Incompatible hardware vendor for sysmon. [/w/modules/DcgmModule.h:146] [{anonymous}::SafeWrapper]"  # fmt: skip
    assert not acting(trainer(line))


# ---- the kernel in older words --------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "Jul  9 12:19:41 vz01 kernel: CPU 0: Machine Check Exception: 0000000000000004",
    "Jul  9 12:19:41 vz01 kernel: Bank 4: b604a00100000813 at 000000007e4f2f68",
    "RIP: 0010:0x1297961b1077",
    "note: docker-compose[485954] exited with irqs disabled",
    "note: kworker/3:1[77] exited with preempt_count 1",
    "zvol/8          D ffffffff81609fc0     0  8838      2 0x00000000",
])  # fmt: skip
def test_older_kernel_crash_and_stall_lines_are_kernel(line):
    assert faults(acting(kernel(line))) == {"kernel"}


@pytest.mark.parametrize("line", ["RIP: 0033:0x7f52053fa611", "zvol/8          S ffffffff81609fc0     0  8838      2 0x00000000"])
def test_user_space_and_sleeping_tasks_are_not_kernel_crashes(line):
    assert not acting(kernel(line))


# ---- NICs and storage ------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "[21852.777689] (NULL net_device): hw csum failure",
    "[ 9000.1] eth2: hw csum failure",
    "[  705.152491] kernel: r8169 0000:02:00.0 enp2s0: rtl_txcfg_empty_cond == 0 (loop: 42, delay: 100).",
    "[  705.152491] r8169 0000:02:00.0 enp2s0: rtl_chipcmd_cond == 1 (loop: 100, delay: 100).",
])  # fmt: skip
def test_nic_families(line):
    assert faults(acting(kernel(line))) == {"nic"}


@pytest.mark.parametrize("line", [
    "May 13 06:25:14 k8snode236 kernel: sas: Enter sas_scsi_recover_host busy: 18 failed: 18",
    "May 13 06:25:17 k8snode236 kernel: sas: sas_scsi_find_task: aborting task 0x0000000096ec909c",
    "May 13 06:25:17 k8snode236 kernel: sas: ata2: end_device-1:0:9: cmd error handler",
    "[   69.473319] ata1.00: status: { DRDY ERR }",
    "Nov 25 11:30:58 ceph-client02 tcmu-runner: tcmu_rbd_handle_timedout_cmd:995 rbd/rbd.cdm-03: Timing out cmd.",
    " mmremote: GPFS is not ready to handle commands yet.",
    "[12964845.761251] beegfs: mount(1516568): The config argument 'connClientPort' is invalid",
])  # fmt: skip
def test_storage_families_on_the_node(line):
    assert faults(acting(kernel(line.replace("[   69.", "[ 9069.")))) == {"storage"}


@pytest.mark.parametrize("line", [
    "16:03:51 tar: ./a796e92f: Cannot stat: Structure needs cleaning",
    "mount.nfs: portmap query failed: RPC: Remote system error - Connection timed out",
    "mount.lustre: mount 10.73.20.12@tcp0:/fs at /mnt/fs failed: No such device",
])  # fmt: skip
def test_storage_families_in_programs_output(line):
    assert faults(acting(trainer(line))) == {"storage"}


@pytest.mark.parametrize("line", [
    "Nov 25 11:30:28 ceph-client02 tcmu-runner: tcmu_acquire_dev_lock:441 rbd/rbd.cdm-03: Lock acquisition successful",
    "May 13 06:25:30 k8snode236 kernel: sas: --- Exit sas_scsi_recover_host: busy: 0 failed: 18 tries: 1",
    "May 13 06:25:14 k8snode236 kernel: sas: Enter sas_scsi_recover_host busy: 0 failed: 0",
])  # fmt: skip
def test_storage_look_alikes_are_quiet(line):
    assert not acting(kernel(line))


# ---- the trainer ------------------------------------------------------------------------------------
def test_the_bindings_spelling_of_an_nccl_result_is_nccl_error():
    line = "ERROR 06-13 07:35:59 [core.py:517] cupy_backends.cuda.libs.nccl.NcclError: NCCL_ERROR_SYSTEM_ERROR: unhandled system error (run with NCCL_DEBUG=INFO for details)"  # fmt: skip
    assert faults(acting(trainer(line))) == {"nccl_error"}
    assert not acting(trainer("NCCL_SUCCESS after 3 retries"))


def test_the_store_client_failing_to_connect_is_recorded_and_its_timeout_acts():
    # at warning level the client retries until its timeout (round 17: fresh27's healthy jobs print it too)
    events = trainer("-> [W socket.cpp:601] [c10d] The client socket has failed to connect to [localhost]:29500 (errno: 99 - Cannot assign requested address).")  # fmt: skip
    assert [(e.data["fault"], e.data["action"]) for e in events] == [("nccl_error", "none")]
    timed_out = acting(trainer("[E socket.cpp:860] [c10d] The client socket has timed out after 60s while trying to connect to 192.0.0.1:1234"))  # fmt: skip
    assert {e.data["fault"] for e in timed_out} == {"nccl_error"}


def test_a_pod_evicted_under_memory_pressure_is_host_oom():
    assert faults(acting(trainer("4m7s        Warning   Evicted               pod/egg-1    The node had condition: [MemoryPressure]."))) == {"host_oom"}  # fmt: skip
