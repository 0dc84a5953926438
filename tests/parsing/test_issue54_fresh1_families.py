"""Issue 54, round 2: the families fresh batch 1 showed missing or crying wolf, each by its general
form, each beside the healthy look-alikes that must stay quiet (lines stamped past BOOT_UPTIME_S or
with no clock, so boot does not quiet them)."""

from __future__ import annotations

import pytest

from faultlens.parsing.registry import parser_for


def kernel(*lines: str):
    p = parser_for("kernel")
    return [e for line in lines for e in p.feed(line)] + p.flush()


def trainer(*lines: str):
    p = parser_for("nccl")
    return [e for line in lines for e in p.feed(line)] + p.flush()


def classes(events):
    return {(e.data["fault"], e.data["action"]) for e in events}


def acting(events):
    return [e for e in events if e.data["action"] != "none"]


# ---- kernel: a record's detail lines alone --------------------------------------------------------
@pytest.mark.parametrize("line", [
    "[ 5395.351681] RIP: 0010:_nv031695rm+0x79/0x940 [nvidia]",
    "Mar 24 11:53:43 host kernel: [ 913.312537] IP: [<ffffffffc01cc246>] amdgpu_bo_list_set+0x196/0x3d0 [amdgpu]",
    "[ 5395.351700] #PF: error_code(0x0000) - not-present page",
    "[ 5300.244482] CPU: 2 PID: 25629 Comm: kworker/2:1 Tainted: G OEL 5.10.0-18-2-amd64 #1 Debian 5.10.140-1",
    "[271081.489167] rcu: rcu_sched kthread timer wakeup didn't happen for 254299 jiffies! g8370033 f0x2 RCU_GP_WAIT_FQS(5) ->state=0x200",
    "[ 1103.057792] \t101-...: (1 GPs behind) idle=a0b/140000000000002/0 softirq=288/289 fqs=2099",
    "[271072.632592] Showing busy workqueues and worker pools:",
])  # fmt: skip
def test_a_crash_or_stall_reports_detail_line_alone_is_a_kernel_alert(line):
    assert classes(kernel(line)) == {("kernel", "alert")}


def test_the_lines_of_one_dump_are_one_event():
    events = kernel("[ 5395.351681] RIP: 0010:_nv031695rm+0x79/0x940 [nvidia]", "[ 5395.351690] #PF: supervisor read access in kernel mode",
                    "[ 5395.351700] #PF: error_code(0x0000) - not-present page")
    assert len(events) == 1


@pytest.mark.parametrize("line", [
    "[ 5395.351681] RIP: 0033:0x7f3a8c2e1b2d",  # a user-space RIP in a hung task's dump: no kernel symbol
    "[ 7300.118807] task:python3         state:S stack:0     pid:40771 ppid:40702  flags:0x00000002",  # sysrq's sleeping task
])  # fmt: skip
def test_what_only_looks_like_a_crash_detail_raises_nothing(line):
    assert acting(kernel(line)) == []


def test_the_unknown_nmi_report_is_one_kernel_alert():
    events = kernel("[ 9101.494068] Uhhuh. NMI received for unknown reason 29 on CPU 0.",
                    "[ 9101.494068] Do you have a strange power saving mode enabled?",
                    "[ 9101.494068] Dazed and confused, but trying to continue")
    assert [(e.data["fault"], e.data["action"]) for e in events] == [("kernel", "alert")]


def test_an_aer_records_detail_lines_are_recorded_and_its_header_still_decides():
    assert acting(kernel("pcieport 0000:00:1c.0:    [ 0] Receiver Error")) == []
    assert acting(kernel("pcieport 0000:00:1c.2:   device [8086:a112] error status/mask=00000001/00002000")) == []
    fatal = kernel("pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: 0000:00:03.0")
    assert ("kernel", "evict") in classes(fatal)


# ---- storage --------------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "[211786.517948] sd 4:0:0:1: [sdb] tag#0 Sense Key : Medium Error [current]",
    "[ 363.803218] sd 6:0:0:0: [sde] tag#3 Add. Sense: Unaligned write command",
    "res 40/00:00:00:00:00/00:00:00:00:00/00 Emask 0x4 (timeout)",
    "[ 363.021655] ata7: SError: { PHYRdyChg CommWake DevExch }",
    "[257266.338225] XFS (dm-11): Please umount the filesystem and rectify the problem(s)",
    "[ 7602.036917] systemd-journald[590]: Failed to write entry (17 items, 467 bytes), ignoring: Read-only file system",
    "[3807962.547561] mptscsih: ioc1: attempting task abort! (sc=ffff88061db32a00)",
])  # fmt: skip
def test_storage_detail_lines_are_storage(line):
    assert "storage" in {f for f, _ in classes(kernel(line))}


@pytest.mark.parametrize("line", [
    "[ 5543.674502] sd 0:0:0:0: [sda] Sense Key : Unit Attention [current]",
    "[ 5543.674510] sd 0:0:0:0: [sda] Add. Sense: Power on, reset, or bus device reset occurred",
    "[ 5543.674512] sd 0:0:0:0: [sda] Sense Key : Recovered Error [current]",
    "[ 1125.529032] BTRFS error (device dm-15): fixed up error at logical 124463056945152 on dev /dev/dm-10 physical 408018681856",
    "[3616466.601734] mpt2sas0-msix0: PCI-MSI-X enabled: IRQ 134",
])  # fmt: skip
def test_storage_look_alikes_stay_quiet(line):
    assert acting(kernel(line)) == []


# ---- GPUs -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("line, fault", [
    ("[ 2312.522692] amdgpu 0000:28:00.0: ring gfx_0.0.0 timeout, signaled seq=57638, emitted seq=57641", "gpu_reset_required"),
    ("[ 2679.729846] [drm:gfx_v10_0_hw_fini [amdgpu]] *ERROR* KGQ disable failed", "gpu_reset_required"),
    ("[ 2679.300615] amdgpu: Failed to suspend process 0x800c", "gpu_reset_required"),
    ("[ 4700.649497] amdgpu 0000:02:00.0: VM fault (0x08, vmid 2) at page 1113630, read from 'TC7' (0x54433700) (452)", "app_fault"),
    ("[ 3034.966247] amdgpu 0000:03:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:32 vmid:0 pasid:0)", "app_fault"),
    ("NVRM: GPU0 _kgspIsHeartbeatTimedOut: GSP RM heartbeat timed out", "gpu_reset_required"),
    ("[ 8084.300476] NVRM: GPU6 kbusSendSysmembarSingle_GH100: - timeout error waiting for startToken = 0x3 cnt=24105122", "gpu_reset_required"),
    ("NVRM: BAR0 is 0M @ 0x0 (PCI:0000:02:00.0)", "gpu_lost"),
])  # fmt: skip
def test_gpu_driver_lines_get_their_class(line, fault):
    assert fault in {f for f, _ in classes(kernel(line))}


@pytest.mark.parametrize("line", [
    "[ 2312.774536] amdgpu 0000:28:00.0: GPU reset succeeded, trying to resume",
    "[ 2312.774540] amdgpu 0000:28:00.0: amdgpu: Ring gfx_0.0.0 reset succeeded",
    "[ 3000.100000] [drm:intel_pipe_update_end [i915]] *ERROR* Atomic update failure on pipe A",  # a display: outside the job
    "[ 3000.100000] NVRM: GPU0 kgspInitRm_IMPL: GSP-RM is running",
    "pcie_plda 2b000000.pcie: Failed to get power-gpio, but maybe it's always on.",  # a SoC's PCIe host controller probe
])  # fmt: skip
def test_gpu_and_platform_look_alikes_stay_quiet(line):
    assert acting(kernel(line)) == []


def test_the_qdisc_watchdogs_warning_is_the_nics():
    line = "[ 2438.150000] WARNING: CPU: 0 PID: 6 at net/sched/sch_generic.c:316 dev_watchdog+0x230/0x248"
    assert ("nic", "alert") in classes(kernel(line))


# ---- trainer lines --------------------------------------------------------------------------------
@pytest.mark.parametrize("line, fault", [
    ("[0] NCCL INFO bootstrap.cc:701 -> 6", "nccl_error"),
    ("RuntimeError: NCCL Error 2: unhandled system error", "nccl_error"),
    ("RuntimeError: connect() timed out. Original timeout was 60000 ms.", "nccl_error"),
    ("host1: Test NCCL failure common.cu:497 'unhandled cuda error'", "nccl_error"),
    ("Exception raised from ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1521 (most recent call first):", "nccl_error"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousClosedError", "nccl_error"),
    ("terminate called after throwing an instance of 'c10::DistBackendError'", "nccl_error"),
    ("terminate called after throwing an instance of 'std::runtime_error'", "user_code"),
    ("CUDA Exception: Warp Illegal Address", "cuda_error"),
    ("decoder->cuvidDecodePicture(decoder->decoder, &ctx->pic_params) failed -> CUDA_ERROR_INVALID_VALUE: invalid argument", "cuda_error"),
    ("RuntimeError: cuda runtime error (802) : system not yet initialized at /work/aten/src/THC/THCGeneral.cpp:50", "cuda_error"),
    ("cudaGetDeviceProperties returned 802", "cuda_error"),
    ("cudaMalloc returned 2", "user_code"),  # cudaErrorMemoryAllocation: the job asked for too much
    ("[Errno 28] No space left on device", "storage"),
    ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -11) local_rank: 0 (pid: 2012686) of binary: /usr/bin/python3", "user_code"),
    ("Program received signal SIGSEGV, Segmentation fault.", "user_code"),
    ("22-12-29 00:38:18.071 CRASH (pid=25720) by SIGSEGV after 0s -- stack was:", "user_code"),
    ("loss_dict = {'loss_box_reg_stage0': tensor(nan, device='cuda:0', grad_fn=<MeanBackward0>), 'data_time': 0.0079}", "nan_loss"),
    ("      Reason:       OOMKilled", "host_oom"),
    ("The node was low on resource: memory.", "host_oom"),
])  # fmt: skip
def test_trainer_lines_get_their_class(line, fault):
    assert fault in {f for f, _ in classes(trainer(line))}


@pytest.mark.parametrize("line", [
    "node-0:2139:2139 [0] NCCL INFO Channel 00 : 0[1b0] -> 4[1b0] [receive] via NET/Socket/0",
    "[0] NCCL INFO group.cc:75 -> 7 [Async thread]",  # ncclInProgress: a non-blocking call still running
    "[Errno 2] No such file or directory: 'config.yaml'",  # an errno the table does not name
    "mypackage.module.SomethingError",  # a bare type the table does not know
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -15) local_rank: 1 (pid: 12) of binary: /usr/bin/python3",
    "Program received signal SIGINT, Interrupt.",
    "      Reason:       Completed",
    "{'loss_box_reg': 0.4121, 'loss_cls': 0.2210, 'data_time': 0.0079}",
])  # fmt: skip
def test_trainer_look_alikes_act_on_nothing(line):
    assert acting(trainer(line)) == []


def test_a_cxx_exceptions_echoes_after_its_frames_fold_into_the_ranks_error():
    frames = [f"frame #{i}: <unknown function> + 0x{i:x} (0x7efe in /usr/lib/libtorch_cuda.so)" for i in range(20)]
    events = trainer(
        "[rank0]:[E1126 20:56:05.812926717 ProcessGroupNCCL.cpp:2119] [PG ID 0 PG GUID 0 Rank 0] Process group watchdog thread "
        "terminated with exception: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, "
        "NumelIn=65536, NumelOut=65536, Timeout(ms)=3000) ran for 3067 milliseconds before timing out.",
        "Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:692 (most recent call first):",
        *frames, "", "terminate called after throwing an instance of 'c10::DistBackendError'")
    assert [e.kind for e in events] == ["nccl_timeout"]
