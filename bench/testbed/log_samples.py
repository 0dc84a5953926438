"""Realistic log lines for the parser tests and the bench (shapes as the kernel, NCCL and torch write them)."""

# -- kernel: NVRM Xid ----------------------------------------------------------------------------
XID_79 = "[ 8523.104567] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
XID_79_UNKNOWN_PID = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
XID_13 = (
    "[Sun Nov 22 10:11:12 2026] NVRM: Xid (PCI:0000:1b:00): 13, pid=48213, name=python, "
    "Graphics SM Warp Exception on (GPC 1, TPC 2, SM 0): Out Of Range Address"
)
XID_13_OLD = "NVRM: Xid (0000:03:00): 13, 0003 00000000 0000a1c0 00000a04 00000000 00000000"
XID_31_OLD = (
    "NVRM: Xid (PCI:0000:02:00): 31, Ch 00000010, engmask 00000101, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 "
    "faulted @ 0x7f85_c6a00000. Fault is of type FAULT_PDE ACCESS_TYPE_READ"
)
XID_45 = "2026-11-22T10:11:12,123456+00:00 NVRM: Xid (PCI:0000:3b:00): 45, pid=1234, name=python3, Ch 00000008"
XID_48 = "Nov 22 10:11:12 gpu-node-17 kernel: [ 9000.000001] NVRM: Xid (PCI:0000:5e:00): 48, pid=2211, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."
XID_63 = "NVRM: Xid (PCI:0000:5e:00): 63, pid=2211, name=python3, Row Remapper: New row marked for remapping, reset gpu to activate."
XID_64 = "NVRM: Xid (PCI:0000:5e:00): 64, pid=2211, name=python3, Row Remapper: Failed to remap a row; GPU reset required."
XID_74 = "NVRM: Xid (PCI:0000:18:00): 74, pid=3388, name=python3, NVLink: fatal error detected on link 2(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"
XID_92 = "NVRM: Xid (PCI:0000:18:00): 92, pid='<unknown>', name=<unknown>, High single-bit ECC error rate"
XID_94 = "NVRM: Xid (PCI:0000:18:00): 94, pid=3388, name=python3, Contained: SM (0x1). RST: No, D-RST: No"
XID_95 = "NVRM: Xid (PCI:0000:18:00): 95, pid=3388, name=python3, Uncontained: FBHUB. RST: Yes, D-RST: No"
XID_119 = "NVRM: Xid (PCI:0000:bb:00): 119, pid=91234, name=python3, Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8)."
XID_149_LINK_DOWN = (
    "NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 "
    "(0x00000bc6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"
)
XID_145_IGNORE = (
    "NVRM: Xid (PCI:0018:01:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 02 "
    "(0x00000004 0x00000100 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"
)
XID_154 = "NVRM: Xid (PCI:0000:1b:00): 154, pid='<unknown>', name=<unknown>, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
XID_UNKNOWN_CODE = "NVRM: Xid (PCI:0000:1b:00): 999, pid=1, name=x, something new"

# The multi-line fall-off record (one gpu_lost event).
FALLEN_MULTILINE = [
    "[ 8523.104001] NVRM: GPU at PCI:0000:3b:00: GPU-5c8a6e2f-3b1d-4c8e-9a0f-2e6d7b1c9a44",
    "[ 8523.104002] NVRM: GPU Board Serial Number: 1652320012345",
    "[ 8523.104003] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
    "[ 8523.104004] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
]
FALLEN_NO_XID = "[ 8523.104004] NVRM: GPU 0000:af:00.0: GPU has fallen off the bus."

SXID_FATAL = "nvidia-nvswitch2: SXid (PCI:0000:c8:00.0): 20034, Fatal, Link 36 LTSSM Fault Up"
SXID_NONFATAL = [
    "nvidia-nvswitch3: SXid (PCI:0000:c9:00.0): 12028, Non-fatal, Link 41 egress non-posted PRIV error (First)",
    "nvidia-nvswitch3: SXid (PCI:0000:c9:00.0): 12028, Severity 0 Engine instance 41 Sub-engine instance 00",
    "nvidia-nvswitch3: SXid (PCI:0000:c9:00.0): 12028, Data {0x00000000, 0x00000000, 0x00000000, 0x00000000}",
]

# -- kernel: NIC / IB -------------------------------------------------------------------------
MLX_LINK_DOWN = "[ 7001.000100] mlx5_core 0000:5e:00.0 ibp94s0: Link down"
MLX_LINK_UP = "[ 7011.000100] mlx5_core 0000:5e:00.0 ibp94s0: Link up"
MLX_MODULE_UNPLUGGED = "mlx5_core 0000:5e:00.0: mlx5_port_module_event:1178:(pid 0): Port module event: module 0, Cable unplugged"
MLX_MODULE_ERROR = "mlx5_core 0000:5e:00.0: mlx5_port_module_event:1165:(pid 0): Port module event[error]: module 0, Cable error, High Temperature"
IB_PORT_DOWN = "mlx5_ib: mlx5_ib_event:3012:(pid 0): infiniband mlx5_3: Port 1 changed state to DOWN"
IPOIB_READY = "IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready"
BOND_DOWN = "bond0: link status definitely down for interface ib1, disabling it"
MLX_HEALTH = "mlx5_core 0000:5e:00.0: poll_health:801:(pid 0): device's health compromised - reached miss count"
MLX_SYNDROME = "mlx5_core 0000:5e:00.0: print_health_info:428:(pid 0): synd 0x1: firmware internal error"

# -- kernel: PCIe, MCE, EDAC ---------------------------------------------------------------------
AER_FATAL = "pcieport 0000:3a:00.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0"
AER_FATAL_DETAIL = "nvidia 0000:3b:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)"
AER_CORRECTED = "pcieport 0000:00:03.1: AER: Corrected error received: 0000:00:03.1"
MCE_UNCORRECTED = "mce: [Hardware Error]: CPU 12: Machine Check Exception: 5 Bank 4: be00000000800400"
MCE_DUMP = "mce: [Hardware Error]: TSC 0 ADDR fef1a140 MISC 38a0000086"
MCE_LOGGED = "mce: [Hardware Error]: Machine check events logged"
EDAC_CE = "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x123 offset:0x0 grain:32 syndrome:0x0)"
EDAC_UE = "EDAC skx MC1: 1 UE memory read error on CPU_SrcID#1_MC#1_Chan#0_DIMM#0 (channel:0 slot:0 page:0x4a1b offset:0x0)"

# -- kernel: host --------------------------------------------------------------------------
SOFT_LOCKUP = "watchdog: BUG: soft lockup - CPU#12 stuck for 22s! [python:1234]"
HUNG_TASK = "INFO: task python3:1234 blocked for more than 120 seconds."
PANIC = "Kernel panic - not syncing: Fatal exception in interrupt"
OOM_KILL = (
    "Out of memory: Killed process 41235 (python3) total-vm:98765432kB, anon-rss:87654321kB, file-rss:0kB, "
    "shmem-rss:0kB, UID:1000 pgtables:171432kB oom_score_adj:0"
)
OOM_SUMMARY = (
    "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,"
    "task_memcg=/user.slice,task=python3,pid=41235,uid=1000"
)
OOM_CGROUP = "Memory cgroup out of memory: Killed process 5120 (pt_data_worker) total-vm:10485760kB, anon-rss:8388608kB"
SEGV_NCCL = "python3[1234]: segfault at 0 ip 00007f2a4c1d2e3f sp 00007ffd3b2a1c80 error 4 in libnccl.so.2[7f2a4c000000+1e00000]"
SEGV_CUDA = "traps: python3[2345] general protection fault ip:7f1c2d3e4f50 sp:7ffe1a2b3c40 error:0 in libcuda.so.535.104.05[7f1c2c000000+1a00000]"

# Timestamp forms of one message.
KMSG = "3,1234,8523104567,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
JOURNAL_ISO = "2026-11-22T10:11:12+0000 gpu-node-17 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=python3, Graphics Exception"

KERNEL_BENIGN = [
    "[    0.000000] Linux version 6.5.0-1024-nvidia (buildd@lcy02-amd64-079) (x86_64-linux-gnu-gcc-12)",
    "[   12.345678] nvidia-nvlink: Nvlink Core is being initialized, major device number 234",
    "[   13.000001] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023",
    "[   20.100000] EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
    "[   30.500000] mlx5_core 0000:5e:00.0: firmware version: 28.39.1002",
    "Nov 22 10:11:12 gpu-node-17 systemd[1]: Started Session 42 of User root.",
]

# -- trainer / NCCL ------------------------------------------------------------------------
NCCL_WARN_IB = (
    "gpu-node-17:48213:48790 [3] NCCL WARN NET/IB : Got completion from peer 10.0.3.17<43121> with error 12, opcode 0, "
    "len 0, vendor err 129 (Recv)"
)
NCCL_WARN_CUDA = "gpu-node-17:48213:48213 [3] NCCL WARN Cuda failure 'an illegal memory access was encountered'"
NCCL_INFO = "gpu-node-17:48213:48213 [3] NCCL INFO comm 0x55d0c1e0 rank 3 nranks 16 cudaDev 3 busId 3b000 - Init COMPLETE"
WATCHDOG_OLD = (
    "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1234, "
    "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600017 milliseconds before timing out."
)
WATCHDOG_NEW = (
    "[rank5]:[E1122 10:11:12.345678 48213 torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) "
    "Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=262144, "
    "NumelOut=262144, Timeout(ms)=600000) ran for 600083 milliseconds before timing out."
)
LAST_WORK = (
    "[rank5]:[E1122 10:11:12.346000 48213 torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1664] [PG ID 0 PG GUID 0(default_pg) "
    "Rank 5] Exception (either an error or timeout) detected by watchdog at work: 1235, last enqueued NCCL work: 1235, "
    "last completed NCCL work: 1234."
)
NCCL_ERROR_LINE = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
    "remote process exited or there was a network error, NCCL version 2.20.5"
)
NCCL_REMOTE = "[rank2]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely."
# gloo on the surviving rank when its peer crashed (torch 2.x, CPU job)
CONN_CLOSED = ("[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
               "[127.0.0.1]:37521")
CONN_RESET = "[rank7]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [10.0.3.17]:23456: Connection reset by peer"
CUDA_ILLEGAL = "RuntimeError: CUDA error: an illegal memory access was encountered"
CUDA_ECC = "[rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered"
CUBLAS = "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, k, ...)`"
NAN_LOSS = "[rank0]: 2026-11-22 10:11:12,345 - train - WARNING - Loss is NaN/Inf at step 4521, skipping"
NAN_LOSS_2 = "iteration 4522 | lm loss: nan | grad norm: inf | lr 3.0e-4"
AMP_OVERFLOW = "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0"

TRACEBACK_USER = [
    "[rank3]: Traceback (most recent call last):",
    '[rank3]:   File "/workspace/train.py", line 212, in <module>',
    "[rank3]:     main()",
    '[rank3]:   File "/workspace/train.py", line 190, in main',
    "[rank3]:     batch = prepare(batch, cfg)",
    '[rank3]:   File "/workspace/data/prep.py", line 41, in prepare',
    '[rank3]:     return batch["tokens"][: cfg.seq_len]',
    "[rank3]:            ~~~~~^^^^^^^^^^",
    "[rank3]: KeyError: 'tokens'",
]
TRACEBACK_CUDA = [
    "Traceback (most recent call last):",
    '  File "/workspace/train.py", line 120, in train_step',
    "    loss.backward()",
    '  File "/usr/local/lib/python3.11/site-packages/torch/_tensor.py", line 581, in backward',
    "    torch.autograd.backward(",
    '  File "/usr/local/lib/python3.11/site-packages/torch/autograd/__init__.py", line 347, in backward',
    "    _engine_run_backward(",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
]
TRACEBACK_LIBRARY = [
    "Traceback (most recent call last):",
    '  File "/workspace/train.py", line 88, in <module>',
    "    ckpt = torch.load(path)",
    '  File "/usr/lib/python3/dist-packages/torch/serialization.py", line 1025, in load',
    "    with _open_zipfile_reader(opened_file) as opened_zipfile:",
    "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
]
TRACEBACK_TRUNCATED = [
    "[rank6]: Traceback (most recent call last):",
    '[rank6]:   File "/workspace/train.py", line 212, in <module>',
]

TRAINER_BENIGN = [
    "[rank0]: 2026-11-22 10:11:12,345 - train - INFO - step 4520 | loss 2.3412 | grad_norm 0.812 | 152.3 TFLOPs",
    NCCL_INFO,
    "gpu-node-17:48213:48213 [3] NCCL INFO Channel 00/32 :    0   1   2   3   4   5   6   7",
    "W1122 10:11:12.000000 1234 torch/distributed/run.py:779 Setting OMP_NUM_THREADS environment variable for each process",
    AMP_OVERFLOW,
]
