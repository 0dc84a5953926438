"""Issue 54 round 23: fresh batches 39-40 mined, each fix by the general property or form that carries,
not by the rows' text (docs/rules.md, round 23).

The healthy line that fired first, quiet by a property of its own, beside the real fault lines of the
same shape that must still act; then the programs' own formats the misses took, each read in a shape
other than the row's (another device, reason, state, level or wording the same program prints). Every
line is a corpus row's (tests/fixtures/log_corpus, with its provenance there) or a rule's example, unless
its comment says it is the same shape with a word changed.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting as _acting
from tests.parsing.line_events import classes as _classes

_HEALTHY = [
    # a Kubernetes controller's reconcile pass failing: requeued and retried by the controller (fresh39)
    (
        '2022-02-28T09:49:55.707Z\tERROR\tReconcile PyTorchJob error\t{"pytorchjob": "default/pytorch-tcp-dist-mnist", '
        '"error": "PyTorchJob.kubeflow.org \\"pytorch-tcp-dist-mnist\\" is invalid: status.replicaStatuses: Invalid value: '
        '\\"null\\": status.replicaStatuses in body must be of type object: \\"null\\""}',
        "nccl",
    ),
    # controller-runtime's own words for the same (the controller and the error changed)
    (
        '2023-01-05T10:11:12.345Z\tERROR\tcontroller.pytorchjob\tReconciler error\t{"name": "bert", "namespace": "default", '
        '"error": "Operation cannot be fulfilled"}',
        "nccl",
    ),
    # Ray's warning that a lagging heartbeat could get the node marked dead, at W (fresh39)
    (
        "[2022-02-16 12:45:07,907 W 149 199] node_manager.cc:157: Last heartbeat was sent 6901 ms ago. There might be resource "
        "pressure on this node. If heartbeat keeps lagging, this node can be marked as dead mistakenly.",
        "nccl",
    ),
    # sinfo's default partition mark on a node that answers (the state and the partition changed)
    ("debug*       up   infinite      4   idle node[01-04]", "nccl"),
    # sinfo -R's header and a reason a person gave (the words changed)
    ("REASON               USER      TIMESTAMP           NODELIST", "nccl"),
    ("replacing PSU        root      2024-03-01T10:22:13 gpu003", "nccl"),
    # IOR's task start spread within what a barrier explains (the value changed)
    ("Start time skew across all tasks: 0.00 sec", "nccl"),
    # Caffe's debug_info with a finite gradient (the value changed)
    ("I0315 11:08:25.792508 11950 net.cpp:630]     [Backward] Layer relu3_1, param blob 0 diff: 0.000123", "nccl"),
    # DPC's probe at boot, and a containment software asked for (the reason changed)
    ("pcieport 0000:00:1c.0: DPC: RP PIO log size 0 is invalid", "kernel"),
    ("pcieport 0000:00:1c.0: DPC: software trigger detected", "kernel"),
    # an NVMe drive that ignored a suspend, not a wake (the states changed)
    ("[ 3021.551201] nvme 0000:01:00.0: Refused to change power state from D0 to D3hot", "kernel"),
]


@pytest.mark.parametrize(("line", "source"), _HEALTHY)
def test_a_healthy_line_is_quiet_by_its_own_property(line: str, source: str) -> None:
    assert _acting(line, source) == []


_STILL_FAULTS = [
    # the same logger's format carrying a program's CUDA error, no controller's reconcile (the message changed)
    (
        "2022-02-28T09:50:01.123Z\tERROR\tworker\tRuntimeError: CUDA error: an illegal memory access was encountered",
        "nccl",
        "cuda_error",
    ),
    # the raylet's own fatal line once the GCS marked it dead (fresh39)
    ("[2022-02-16 12:46:52,789 C 149 149] node_manager.cc:170: This node has beem marked as dead.", "nccl", "node_silent"),
]


@pytest.mark.parametrize(("line", "source", "fault"), _STILL_FAULTS)
def test_the_same_shapes_that_are_faults_still_act(line: str, source: str, fault: str) -> None:
    acting = _acting(line, source)
    assert acting, line
    assert fault in {e.data.get("fault") for e in acting}


_FORMS = [
    # DPC's reason line and the newer containment line naming the requester (the reason, port and requester changed)
    ("pcieport 0000:00:03.1: DPC: ERR_NONFATAL detected", "kernel", "kernel"),
    ("pcieport 0000:00:1c.0: DPC ERR_FATAL detected, remove downstream devices", "kernel", "kernel"),
    ("pcieport 0000:80:01.1: DPC: containment event, status:0x1f05, ERR_NONFATAL received from 0000:81:00.0", "kernel", "kernel"),
    # the PCI core finding an NVMe drive still asleep, in newer kernels' words (the states changed)
    ("[ 3021.551201] nvme 0000:01:00.0: Refused to change power state from D3hot to D0", "kernel", "storage"),
    # FreeBSD's NVMe controller never ready (the controller, bit and wait changed)
    ("nvme1: controller ready did not become 1 within 20000 ms", "kernel", "storage"),
    # Slurm's not-responding mark in sinfo's default and long formats and scontrol's (other columns and states)
    ("debug*       up   infinite      2  down* node[01-02]", "nccl", "node_silent"),
    ("gpu-node07      1       gpu*      idle*   64   2:32:1 515000        0      1   (null) none", "nccl", "node_silent"),
    ("   State=DOWN*+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1", "nccl", "node_silent"),
    # the reason slurmctld sets on it, as sinfo -R and scontrol list it (the nodes and the time changed)
    ("Not responding       slurm     2024-03-01T10:22:13 gpu[003-004]", "nccl", "node_silent"),
    ("   Reason=Not responding [slurm@2024-03-01T10:22:13]", "nccl", "node_silent"),
    # newer Ray's raylet exiting when the GCS marked it dead (the release's wording)
    (
        "[2023-05-01 10:00:00,123 C 5512 5512] node_manager.cc:1024: [Timeout] Exiting because this node manager has mistakenly "
        "been marked as dead by the GCS: GCS failed to check the health of this node for 5 times.",
        "nccl",
        "node_silent",
    ),
    # IOR's task clocks seconds apart (the value changed)
    ("Start time skew across all tasks: 3.25 sec", "nccl", "clock_skew"),
    # Habana's graph compiler refusing another node (the node changed)
    (
        "RuntimeError: synNodeCreateWithId failed for node: spatial_convolution with synStatus 26 [Generic failure].",
        "nccl",
        "user_code",
    ),
    # XLA's cuDNN start failure as JAX raises it (the language changed)
    (
        "jaxlib.xla_extension.XlaRuntimeError: FAILED_PRECONDITION: DNN library initialization failed. Look at the errors above for "
        "more details.",
        "nccl",
        "cuda_error",
    ),
    # Caffe's debug_info NaN in the forward pass and the update (the pass, layer and blob changed)
    ("I0315 11:08:25.792508 11950 net.cpp:608]     [Forward] Layer conv1, top blob conv1 data: nan", "nccl", "nan_loss"),
    ("I0315 11:08:25.792508 11950 net.cpp:648]     [Update] Layer fc8, param 0 data: 0.0123; diff: nan", "nccl", "nan_loss"),
    # NCCL's CUDACHECK text without its WARN prefix, in older NCCL's form without the number (the form changed)
    ("Cuda failure 'invalid argument'", "nccl", "nccl_error"),
    # and a device fault in the same form stays CUDA's (the error changed)
    ("Cuda failure 'an illegal memory access was encountered'", "nccl", "cuda_error"),
]


@pytest.mark.parametrize(("line", "source", "fault"), _FORMS)
def test_each_programs_own_format_is_read(line: str, source: str, fault: str) -> None:
    assert fault in _classes(line, source), line
    assert _acting(line, source), line


def test_a_device_acquire_is_not_the_graph_compilers_refusal() -> None:
    # acquiring the device is the machine's side, left to other readings (the call changed)
    assert "user_code" not in _classes("RuntimeError: synDeviceAcquire failed with synStatus 26 [Generic failure].", "nccl")
