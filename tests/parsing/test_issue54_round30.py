"""Issue 54 round 30: fresh53 and fresh54 mined. No healthy line fired; each miss is read by its program's own
format (docs/rules.md, round 30), and the same program's ordinary lines stay quiet. Round 29's two Ceph readers say
the same of a cluster's lost redundancy, and a status report's count of none is no model guess's.

The fault lines are another device, number, wording or prefix the same program prints (its source's format
string, cited), never the corpus row itself; the rows are in tests/fixtures/log_corpus/fresh53 and fresh54
(provenance there). The quiet lines are the same program's start-up, success or progress words.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting, classes

_ROUND30_FORMS = [
    # kmod's short form in a container's output (fresh53: NVIDIA/nvidia-docker#365), the other module
    ("modprobe: FATAL: Module nvidia-modeset not found.", "nccl", "gpu_lost"),
    ("modprobe: FATAL: Module nvidia_uvm not found.", "kernel", "gpu_lost"),
    # enroot's registry answer relayed by pyxis (fresh53: NVIDIA/pyxis#168; enroot src/docker.sh), another status
    (
        "slurmstepd: error: pyxis:     [ERROR] URL https://nvcr.io/v2/nvidia/pytorch/manifests/24.01-py3 returned "
        "error code: 404 Not Found",
        "nccl",
        "user_code",
    ),
    # a serial console's login prompt before the kernel's line (fresh53: oxidecomputer/crucible#1239), another host
    ("gpu3 login: [ 1022.118733] nvme nvme2: I/O 881 QID 12 timeout, aborting", "kernel", "storage"),
    ("cn-017.cluster login: [ 77.000001] Buffer I/O error on dev nvme1n1, logical block 0, async page read", "kernel", "storage"),
    # block/partitions/ldm.c's readers (fresh53: spdk/spdk#1502)
    ("[  812.004211] ldm_validate_tocblocks(): Disk read failed.", "kernel", "storage"),
    # Mooncake's slice status and async event (fresh53: kvcache-ai/Mooncake#117; worker_pool.cpp), another NIC and words
    (
        "E0301 09:12:44.501122 3342 worker_pool.cpp:291] Worker: Process failed for slice (opcode: 1, source_addr: "
        "0x7f11c0000000, length: 131072, local_nic: mlx5_2, peer_nic: 10.1.2.7:12001@mlx5_2, retry_cnt: 1): "
        "transport retry counter exceeded",
        "nccl",
        "nccl_error",
    ),
    (
        "W0301 09:12:44.501140 3344 worker_pool.cpp:399] Worker: Received context async event local catastrophic "
        "error for context mlx5_1",
        "nccl",
        "nic",
    ),
    # UCCL's completion status by its enum (fresh53: uccl-project/uccl#972), another status
    (
        "[WARN gpu-node-07 2211 2211 pollOnce rdma/providers/ib_data_channel_impl.cc:198] pollOnce - channel_id: 1, "
        "RNR_RETRY_EXC_ERR, qp_num=0x1a07",
        "nccl",
        "nccl_error",
    ),
    # perftest's device calls (fresh53: ofiwg/libfabric#5149; perftest_resources.c)
    ("Couldn't get context for mlx5_0", "nccl", "nic"),
    ("Couldn't get device attributes", "nccl", "nic"),
    # nvidia-smi nvlink --status (fresh53: Azure/azhpc-diagnostics#73), another link
    ("\t Link 11: <inactive>", "nccl", "nvlink"),
    # systemctl's job result for the fabric manager (fresh54: NVIDIA/gpu-operator#356), another result
    ("Job for nvidia-fabricmanager.service failed because a timeout was exceeded.", "nccl", "nvlink"),
    # bonding left with no member (fresh54: coreos/bugs#2515; bond_main.c), another bond and prefix
    ("Mar  3 10:22:41 gpu17 kernel: bond0: now running without any active interface!", "kernel", "nic"),
    # kubectl describe node's event row (fresh54: k3s-io/k3s#8575), the node controller's source column
    ("  Normal   NodeNotReady  3m  node-controller  Node gpu-7 status is now: NodeNotReady", "nccl", "node_silent"),
    # bash's word after a progress bar it cut short (fresh54: InternLandMark/LandMark#65), another bar
    ("100%|##########| 500/500 [01:02<00:00,  8.01it/s]Killed", "nccl", "host_oom"),
    ("Epoch 3:  41%|####1     | 412/1000 [10:02<14:20,  1.46s/it]Killed", "nccl", "host_oom"),
    # Ray Tune's actor reuse refused (fresh54: ray-project/ray#41362; tune_controller.py), another trial
    (
        "2024-02-01 08:00:12,101\tERROR tune_controller.py:1990 -- Could not re-use actor for trial "
        "PPO_env_1f2e3_00004: Trainable runner reuse requires reset_config() to be implemented and return True.",
        "nccl",
        "user_code",
    ),
    # a loss scale halved below 1 (fresh54: NVIDIA/apex#318), apex's older wording and another scale
    ("Gradient overflow.  Skipping step, reducing loss scale to 0.0009765625", "nccl", "nan_loss"),
    ("Gradient overflow. Skipping step, loss scaler 1 reducing loss scale to 3.0517578125e-05", "nccl", "nan_loss"),
    # the Ceph monitor's PG_DEGRADED check reads as `ceph -s`'s same summary does (round 29's left item)
    (
        "cluster 2020-11-03T12:46:58.519597+0200 mon.a (mon.0) 9 : cluster [WRN] Health check update: Degraded data "
        "redundancy: 5/30 objects degraded (16.667%), 3 pgs degraded (PG_DEGRADED)",
        "kernel",
        "storage",
    ),
    ("    Degraded data redundancy: 5/30 objects degraded (16.667%), 3 pgs degraded", "nccl", "storage"),
]


@pytest.mark.parametrize(("line", "source", "fault"), _ROUND30_FORMS)
def test_a_round30_form_in_another_shape_is_read(line: str, source: str, fault: str) -> None:
    assert fault in classes(line, source)


_QUIET_BESIDE = [
    # the routine overflows of dynamic loss scaling (the corpus's healthy 'reducing loss scale to 16384.0')
    ("Gradient overflow.  Skipping step, reducing loss scale to 16384.0", "nccl"),
    ("Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to 1.0", "nccl"),
    # enroot's INFO while it fetches the image
    ("slurmstepd: error: pyxis:     [INFO] Fetching image manifest list", "nccl"),
    # a console prompt alone, and before an ordinary kernel line
    ("node1 login: ", "kernel"),
    ("node1 login: [  519.201025] nvme nvme0: 32/0/0 default/read/poll queues", "kernel"),
    # Mooncake's and libibverbs' state changes that are no failure
    (
        "W0301 09:12:44.501140 3344 worker_pool.cpp:399] Worker: Received context async event port active for context mlx5_1",
        "nccl",
    ),
    # nvidia-smi's active link
    ("         Link 0: 25.781 GB/s", "nccl"),
    # systemctl's other units, bonding's failover to a member it still has
    ("Job for nvidia-powerd.service failed because the control process exited with error code.", "nccl"),
    ("[  131.200001] bond0: making interface eth1 the new active one", "kernel"),
    # kubectl describe's healthy node events
    (
        "  Normal   NodeReady                110m                 kubelet                Node worker-0 status is now: NodeReady",
        "nccl",
    ),
    # a progress bar that ends as bars do, and one ending in another word
    (" 20%|####      | 216/1063 [00:27<02:17,  6.17it/s]", "nccl"),
    # a status report's counts of none (the model read 'nic', then 'storage')
    ("    0 osds down", "nccl"),
    ("    0 hosts (0 osds) down", "nccl"),
    ("    0 osds down", "kernel"),
    # the monitor clearing the check
    ("cluster [INF] Health check cleared: PG_DEGRADED (was: Degraded data redundancy: 3/90 objects degraded (3.333%))", "kernel"),
]


@pytest.mark.parametrize(("line", "source"), _QUIET_BESIDE)
def test_a_healthy_line_beside_a_round30_form_is_quiet(line: str, source: str) -> None:
    assert acting(line, source) == []


def test_a_bare_shell_abort_is_the_programs_own_end() -> None:
    # fresh53's `Aborted (core dumped)` (BVLC/caffe#3377), relabelled user_code by docs/design.md §9 (bash's record of
    # an abort in the job's own output): recorded with that class, the error before it decides the action
    assert classes("Aborted (core dumped)", "nccl") == {"user_code"}
    assert acting("Aborted (core dumped)", "nccl") == []
