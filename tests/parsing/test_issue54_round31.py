"""Issue 54 round 31: fresh55 and fresh56 mined. The one healthy line that fired (UCX's DEBUG trace) is quiet by
its own level word; each miss is read by its program's own format (docs/rules.md, round 31), and the same
program's ordinary lines stay quiet.

The fault lines are another device, number, wording or prefix the same program prints (its source's format
string, cited), never the corpus row itself; the rows are in tests/fixtures/log_corpus/fresh55 and fresh56
(provenance there). The quiet lines are the same program's start-up, success, hint or trace words.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting, classes, events

_ROUND31_FORMS = [
    # libnvidia-container's start failures (fresh55: NVIDIA/libnvidia-container#48, NVIDIA/nvidia-docker#572)
    ("nvidia-container-cli: initialization error: cuda error: no cuda-capable device is detected", "nccl", "gpu_lost"),
    ("nvidia-container-cli: initialization error: driver error: failed to process request", "nccl", "gpu_lost"),
    ("W0301 09:12:44.501140 7721 driver.c:201] terminating driver service (forced)", "nccl", "gpu_lost"),
    # TensorFlow's CUDA diagnostics, logged at I (fresh55: tensorflow/tensorflow#44869; cuda_diagnostics.cc)
    (
        "2023-02-01 08:00:00.000001: I external/org_tensorflow/tensorflow/compiler/xla/stream_executor/cuda/"
        "cuda_diagnostics.cc:169] kernel driver does not appear to be running on this host (gpu-7): "
        "/proc/driver/nvidia/version does not exist",
        "nccl",
        "gpu_lost",
    ),
    # the NVIDIA driver without its GSP firmware (fresh55: ublue-os/bazzite#2668), another prefix
    ("Mar 02 09:14:31 gpu-node-3 kernel: NVRM: RmFetchGspRmImages: No firmware image found", "kernel", "gpu_lost"),
    # amdgpu's PSP ring at psp_hw_start, after a reset (fresh56: ROCm/legacy-rocm-build#2747), another stamp
    ("[ 9000.118201] [drm:psp_hw_start [amdgpu]] *ERROR* PSP create ring failed!", "kernel", "gpu_lost"),
    # lspci with config space all ones (fresh56: lyulyul/shine-cluster#171), another slot, class and GPU
    ("0000:3b:00.0 3D controller: NVIDIA Corporation GA100 [A100 PCIe 40GB] (rev ff)", "kernel", "gpu_lost"),
    # slurmctld's registration check (fresh56: ComputeCanada/puppet-magic_castle#361; gres.c), another node and count
    ("[2024-05-02T11:00:01.000] _node_config_validate: gres/gpu: Count changed on node gpu-a17 (8 != 7)", "nccl", "gpu_lost"),
    # libibverbs' ABI check and perftest's device lookup (fresh55: k8snetworkplumbingwg/sriov-cni#348,
    # Mellanox/k8s-rdma-shared-dev-plugin#106; libibverbs/init.c, perftest_resources.c)
    (
        "libibverbs: Warning: Driver ionic does not support the kernel ABI of 1 (supports 4 to 4) for device "
        "/sys/class/infiniband/ionic_0",
        "nccl",
        "nic",
    ),
    (" Did not detect devices ", "nccl", "nic"),
    ("No IB devices found", "nccl", "nic"),
    # ibdev2netdev (fresh55: openshift/sriov-network-operator#635), another HCA and netdev
    ("mlx5_0 port 1 ==> ens1f0np0 (Down)", "nccl", "nic"),
    # the RDMA shared device plugin (fresh55: Mellanox/k8s-rdma-shared-dev-plugin#192), another device
    (
        '2024/02/11 06:12:40 error creating new device: "missing RDMA device spec for device 0000:af:00.1, '
        'RDMA device \\"uverbs3\\" not found"',
        "nccl",
        "nic",
    ),
    # the kubelet's unmount (fresh55: kubernetes-csi/csi-driver-nfs#649; operation_generator.go), another plugin
    (
        "Jun 03 07:41:09 node-12 kubelet[2231]: E0603 07:41:09.551020    2231 nestedpendingoperations.go:301] "
        'Operation for "{volumeName:kubernetes.io/nfs/1b2c-data podName:1b2c nodeName:}" failed. No retries '
        "permitted until 2025-06-03 07:43:11.551004 +0000 UTC m=+88.1 (durationBeforeRetry 2m2s). Error: "
        'UnmountVolume.TearDown failed for volume "data" (UniqueName: "kubernetes.io/nfs/1b2c-data") pod "1b2c" '
        '(UID: "1b2c") : unmount failed: exit status 32',
        "kernel",
        "storage",
    ),
    # the Neuron compiler (fresh55: aws-neuron/aws-neuron-sdk#1122), another logger
    ("2024-11-02T10:01:22Z ERROR 1188 [neuronx-cc]: An Internal Compiler Error has occurred", "nccl", "user_code"),
    # DeepEP's kernels and NVSHMEM's init (fresh55: deepseek-ai/DeepEP#274, #150), the other kernel and init step
    ("DeepEP combine NVL sender timeout, channel: 3, RDMA: 1, nvl: 4, dst NVL: 2, head: 77, tail: 80", "nccl", "nccl_error"),
    ("DeepEP timeout for dispatch receivers, rank 5, responsible_channel = 2, tokens remained: 17", "nccl", "nccl_error"),
    ("aborting due to error in nvshmemi_setup_connections", "nccl", "nccl_error"),
]


@pytest.mark.parametrize(("line", "source", "fault"), _ROUND31_FORMS)
def test_round31_fault_forms_act(line: str, source: str, fault: str) -> None:
    assert fault in {e.data.get("fault") for e in acting(line, source)}, classes(line, source)


def test_a_relayed_kernel_xid_takes_its_number() -> None:
    # gpud's scan quoting the kernel's NVRM line whole (fresh55: leptonai/gpud#500), another GPU, pid and Xid
    line = '[XID found] (3 minutes ago) "NVRM: Xid (PCI:0000:1a:00): 79, pid=1201, name=python, GPU has fallen off the bus."'
    found = [e for e in events(line, "nccl") if e.data.get("xid") is not None]
    assert [e.data["xid"] for e in found] == [79]
    assert {e.data["fault"] for e in found} == {"gpu_lost"}
    assert {e.data["action"] for e in found} == {"alert"}  # a relay: the kernel's own line evicts


_ROUND31_QUIET = [
    # UCX's trace levels past its time, host and source line (fresh56: openucx/ucx#5749)
    (
        "[1629615907.891301] [gpu-02:4411:0]        mm_posix.c:326  UCX  DEBUG   shared memory mmap(addr=(nil), "
        "length=2097152, flags= HUGETLB, fd=7) failed: Invalid argument",
        "nccl",
    ),
    ("[1629615907.891302] [gpu-02:4411:0]          ucp_worker.c:1720 UCX  INFO  ep_cfg[0]: tag(rc_mlx5/mlx5_0:1)", "nccl"),
    # libnvidia-container's debug log and success words
    ("I0301 09:12:44.501140 7721 driver.c:212] driver service terminated successfully", "nccl"),
    ("I0301 09:12:44.401140 7721 driver.c:101] starting driver service", "nccl"),
    # the firmware loader's fallback for the GSP file (the driver's own line decides; benign.toml)
    (
        "[   23.991660] nvidia 0000:41:00.0: Direct firmware load for nvidia/550.54.14/gsp_tu10x.bin failed with error -2",
        "kernel",
    ),
    # TensorFlow's other diagnostics
    (
        "2023-02-01 08:00:00.000001: I tensorflow/stream_executor/cuda/cuda_diagnostics.cc:176] hostname: gpu-7",
        "nccl",
    ),
    # lspci with a real revision, perftest's hint, an Up port, the plugin's start
    ("0000:3b:00.0 3D controller: NVIDIA Corporation GA100 [A100 PCIe 40GB] (rev a1)", "kernel"),
    (" If device exists, check if driver is up", "nccl"),
    ("mlx5_0 port 1 ==> ens1f0np0 (Up)", "nccl"),
    # the kubelet's unmount as it starts and succeeds
    (
        "Jun 03 07:41:09 node-12 kubelet[2231]: I0603 07:41:09.551020    2231 operation_generator.go:829] "
        'UnmountVolume.TearDown succeeded for volume "kubernetes.io/nfs/1b2c-data" (OuterVolumeSpecName: "data")',
        "kernel",
    ),
    # DeepEP's ordinary words
    ("DeepEP dispatch NVL receiver ready, channel: 6", "nccl"),
]


@pytest.mark.parametrize(("line", "source"), _ROUND31_QUIET)
def test_round31_look_alikes_stay_quiet(line: str, source: str) -> None:
    assert acting(line, source) == []
