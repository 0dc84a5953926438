"""Issue 54, round 39 (fresh78 opened, G22): the NVIDIA driver failing to attach a GPU, the kubelet's SystemOOM event,
the CephFS client evicted and fenced by its metadata server, ENOTCONN on a network block device or file system,
HPE Cray PALS naming a rank that died of a signal, and NCCL's socket layer giving up on a peer.

Every line is written for the test (other hosts, devices, ranks, processes and times than the corpus rows), beside the
healthy look-alikes each reading must leave alone.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import verdicts


def _read(line: str, source: str) -> list[tuple[object, object]]:
    """(fault, action) of each event of ``line`` in ``source``'s stream."""
    return verdicts(line, source)


def _faults(line: str, source: str) -> list[object]:
    return [f for f, a in _read(line, source) if a not in ("none", None)]


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: osInitNvMapping: *** Cannot attach gpu",
        "Aug 11 07:30:02 dgx-b12 kernel: NVRM: osInitNvMapping: *** Cannot attach gpu",
        "NVRM: GPU3 osInitNvMapping: *** Cannot attach gpu",
    ],
)
def test_the_driver_failing_to_attach_a_gpu_is_gpu_lost(line: str) -> None:
    assert ("gpu_lost", "evict") in _read(line, "kernel")


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: osInitNvMapping: attaching gpu 2",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
        "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  550.54.15",
    ],
)
def test_the_driver_attaching_or_loading_is_quiet(line: str) -> None:
    assert _faults(line, "kernel") == []


@pytest.mark.parametrize(
    "line",
    [
        "  Warning  SystemOOM  12m (x3 over 40m)  kubelet  System OOM encountered, victim process: pt_main_thread, pid: 90311",
        "Warning  SystemOOM  2s  kubelet, node-a100-7  System OOM encountered, victim process: dataloader, pid: 221",
        "kube-system   8m   Warning   SystemOOM   node/gpu-12   System OOM encountered, victim process: java, pid: 5120",
    ],
)
def test_the_kubelets_system_oom_event_is_host_oom(line: str) -> None:
    assert "host_oom" in _faults(line, "nccl")


@pytest.mark.parametrize(
    "line",
    [
        "  Normal   NodeHasSufficientMemory  5m  kubelet  Node gpu-12 status is now: NodeHasSufficientMemory",
        "  Normal   Started  40s  kubelet  Started container trainer",
        "  Normal   Pulled   41s  kubelet  Container image \"nvcr.io/nvidia/pytorch:24.05-py3\" already present on machine",
    ],
)
def test_kubelets_ordinary_events_are_quiet(line: str) -> None:
    assert _faults(line, "nccl") == []


@pytest.mark.parametrize(
    "line",
    [
        "ceph: mds1 session blocklisted",
        "[88214.500113] ceph: mds0 session blacklisted",
        "Sep  9 14:02:51 cn042 kernel: ceph: mds3 session blocklisted",
    ],
)
def test_a_cephfs_client_fenced_by_its_mds_is_storage(line: str) -> None:
    assert ("storage", "alert") in _read(line, "kernel")


@pytest.mark.parametrize(
    "line",
    [
        "ceph: mds1 session established",
        "ceph: mds0 reconnect success",
        "ceph: mds2 caps renewed",
        "ceph: mds0 came back",
    ],
)
def test_a_cephfs_session_that_holds_is_quiet(line: str) -> None:
    assert _faults(line, "kernel") == []


@pytest.mark.parametrize(
    "line",
    [
        "rbd: rbd3: encountered watch error: -107",
        "[Wed Jan 14 02:12:40 2026] rbd: rbd0: encountered watch error: -107",
        "nbd2: Receive control failed (result -107)",
    ],
)
def test_enotconn_on_a_network_block_device_is_storage(line: str) -> None:
    assert "storage" in _faults(line, "kernel")


@pytest.mark.parametrize(
    "line",
    [
        "rbd: rbd3: watch established",
        "rbd: rbd0: capacity 107374182400 features 0x1",
        "e1000e 0000:00:19.0 eth0: failed to connect, err -107",  # no storage device or word: a NIC's
    ],
)
def test_a_healthy_rbd_line_or_enotconn_elsewhere_is_not_storage(line: str) -> None:
    assert "storage" not in _faults(line, "kernel")


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        ("nid001234: rank 12 died from signal 11 and dumped core", "user_code"),
        ("x1002c3s7b0n1.hsn.cm.polaris.alcf.anl.gov: rank 0 died from signal 7 and dumped core", "host_oom"),
    ],
)
def test_pals_naming_a_rank_that_died_of_a_crash_signal(line: str, fault: str) -> None:
    assert fault in _faults(line, "nccl")


def test_pals_naming_a_rank_that_aborted_is_user_code_recorded() -> None:
    assert ("user_code", "none") in _read("nid004410: rank 31 died from signal 6 and dumped core", "nccl")


def test_pals_naming_a_rank_that_was_sent_term_is_no_fault() -> None:
    assert _faults("nid004410: rank 31 died from signal 15", "nccl") == []


@pytest.mark.parametrize(
    "line",
    [
        "[rank6]: [rank6]: socketPollConnect: connect returned Connection refused, exceeded error retry count (35)",
        "[rank2]: socketPollConnect: connect returned Connection timed out, exceeded timeout retry count (10)",
        "gpu-7:4410:4512 [3] misc/socket.cc:590 NCCL WARN socketPollConnect: connect returned No route to host, exceeded error retry count (35)",
    ],
)
def test_nccls_socket_layer_giving_up_on_a_peer_is_nccl_error(line: str) -> None:
    assert "nccl_error" in _faults(line, "nccl")


@pytest.mark.parametrize(
    "line",
    [
        "gpu-7:4410:4512 [3] NCCL INFO socketPollConnect: connect returned Connection refused, retrying (12/34) after sleep for 1200 msec",
        "[rank6]: socketPollConnect: connect returned Connection refused, retrying (1/34) after sleep for 100 msec",
    ],
)
def test_nccls_socket_retries_while_still_trying_are_quiet(line: str) -> None:
    assert _faults(line, "nccl") == []


# Beyond fresh78, from tools.miss_stops over fresh1-78's misses: the kubelet's node-condition events and valgrind's
# record of the signal that ended the program it ran.


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        ("  Normal   NodeHasDiskPressure   7m  kubelet, gpu-worker-2  Node gpu-worker-2 status is now: NodeHasDiskPressure", "storage"),
        ("  Normal   NodeHasInsufficientMemory  55s  kubelet  Node a100-03 status is now: NodeHasInsufficientMemory", "host_oom"),
    ],
)
def test_the_kubelets_pressure_condition_event_is_read(line: str, fault: str) -> None:
    assert fault in _faults(line, "nccl")


@pytest.mark.parametrize(
    "line",
    [
        "  Normal   NodeHasNoDiskPressure   7m  kubelet, gpu-worker-2  Node gpu-worker-2 status is now: NodeHasNoDiskPressure",
        "  Normal   NodeHasSufficientMemory  55s  kubelet  Node a100-03 status is now: NodeHasSufficientMemory",
        "  Normal   NodeHasSufficientPID  55s  kubelet  Node a100-03 status is now: NodeHasSufficientPID",
    ],
)
def test_the_kubelets_healthy_condition_event_is_quiet(line: str) -> None:
    assert _faults(line, "nccl") == []


def test_valgrind_recording_a_crash_signal_is_user_code() -> None:
    line = "==20417== Process terminating with default action of signal 11 (SIGSEGV)"
    assert "user_code" in _faults(line, "nccl")


def test_valgrind_recording_an_abort_is_recorded_and_an_interrupt_is_no_fault() -> None:
    assert ("user_code", "none") in _read("==20417== Process terminating with default action of signal 6 (SIGABRT): dumping core", "nccl")
    assert _faults("==20417== Process terminating with default action of signal 2 (SIGINT)", "nccl") == []
