"""Issue 54 round 25: fresh batches 43-44 mined, each fix by the general property or form that carries,
not by the rows' text (docs/rules.md, round 25).

The healthy line that fired first, quiet by a property of its own, beside the real fault lines of the
same driver that must still act; then the programs' own formats the misses took, each read in a shape
other than the row's (another host, node, device, path or wording the same program prints). Every line
is a corpus row's (tests/fixtures/log_corpus, with its provenance there) or a rule's example, unless its
comment says it is the same shape with a word changed.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting as _acting
from tests.parsing.line_events import classes as _classes

_HEALTHY = [
    # the driver's chipset object reporting on the host's PCIe chipset at init, not on a GPU (fresh44)
    ("Sep 07 12:33:53 think kernel: NVRM objClInitPcieChipset: *** Chipset Setup Function Error!", "kernel"),
    # the same object's other report, behind the colon newer drivers print (the function changed)
    ("[    5.100000] NVRM: objClGpuIsVgaDevice: unrecognised chipset, using defaults", "kernel"),
    # the kubelet's node becoming ready again and its connect retries: no node went quiet (the events changed)
    (
        "May 05 14:02:10 ip-10-50-20-208.ec2.internal kubelet[2858]: I0505 14:02:10.872880    2858 "
        "kubelet_node_status.go:379] Recording NodeReady event message for node ip-10-50-20-208.ec2.internal",
        "nccl",
    ),
    # c10d's client retrying its connect: the rendezvous has not failed yet (a rule's example elsewhere)
    (
        "[W socket.cpp:601] [c10d] The client socket has failed to connect to [localhost]:29500 "
        "(errno: 99 - Cannot assign requested address).",
        "nccl",
    ),
]


@pytest.mark.parametrize(("line", "source"), _HEALTHY)
def test_a_healthy_line_is_quiet_by_its_own_property(line: str, source: str) -> None:
    assert _acting(line, source) == []


_STILL_FAULTS = [
    # the same driver's own word that a GPU did not come up still acts past boot (the GPU and stamp changed; at boot
    # it is the machine's record)
    ("[ 9000.100000] NVRM: GPU 0000:41:00.0: RmInitAdapter failed! (0x25:0x65:1468)", "kernel", "gpu_lost"),
    (
        "[ 9000.100000] NVRM: GPU3 _kgspBootGspRm: unexpected WPR2 already up, cannot proceed with booting GSP",
        "kernel",
        "gpu_lost",
    ),
]


@pytest.mark.parametrize(("line", "source", "fault"), _STILL_FAULTS)
def test_the_same_driver_s_faults_still_act(line: str, source: str, fault: str) -> None:
    assert fault in _classes(line, source), line
    assert _acting(line, source), line


_FORMS = [
    # the kubelet's node going quiet: PLEG stale (inside 'Skipping pod synchronization'), NodeNotReady (node and time changed)
    (
        'Apr 13 10:53:52 node-7 kubelet: E0413 10:53:52.844381    3263 kubelet.go:2055] "Skipping pod synchronization" '
        'err="PLEG is not healthy: pleg was last seen active 4m12.5s ago; threshold is 3m0s"',
        "nccl",
        "node_silent",
    ),
    # the node's container runtime without its GPU hook, under apptainer's --nvccli (the path changed)
    (
        'FATAL:   container creation failed: exec: "/usr/local/bin/nvidia-container-cli": stat '
        "/usr/local/bin/nvidia-container-cli: no such file or directory",
        "nccl",
        "gpu_lost",
    ),
    # an image without the entrypoint, a bind destination the image lacks, a read-only image (paths changed)
    (
        "slurmstepd: error: pyxis:     enroot-switchroot: failed to execute: /usr/bin/zsh: No such file or directory",
        "nccl",
        "user_code",
    ),
    (
        "FATAL:   container creation failed: mount hook function failure: mount /var/apptainer/mnt/session/scratch->/scratch "
        "error: while mounting /var/apptainer/mnt/session/scratch: destination /scratch doesn't exist in container",
        "nccl",
        "user_code",
    ),
    (
        "ERROR  : Failed creating directory /var/singularity/mnt/final/.singularity.d/env :No such file or directory",
        "nccl",
        "user_code",
    ),
    # NCCL's shared-memory transport and c10d's store socket (the segment, rank, port and timeout changed)
    ("[rank5]: Error while creating shared memory segment /dev/shm/nccl-Xy12Ab (size 9437184)", "nccl", "nccl_error"),
    (
        "[rank3]:[W101 00:00:00.000000000 socket.cpp:489] [c10d] waitForInput: socket SocketImpl(fd=42, "
        "addr=[node-1]:29500, remote=[node-2]:40000) timed out after 600000ms",
        "nccl",
        "nccl_error",
    ),
    # c10's enforce failure writing a checkpoint, with a Windows build's source path (the positions changed)
    (
        "RuntimeError: [enforce fail at ..\\caffe2\\serialize\\inline_container.cc:319] . unexpected pos 100 vs 64",
        "nccl",
        "storage",
    ),
]


@pytest.mark.parametrize(("line", "source", "fault"), _FORMS)
def test_each_programs_own_format_is_read(line: str, source: str, fault: str) -> None:
    assert fault in _classes(line, source), line
    assert _acting(line, source), line


def test_the_kubelets_info_level_node_not_ready_is_recorded_in_its_class() -> None:
    # the kubelet records the event at its info level (I...): node_silent, recorded by the line's own level, as any
    # info line (the node and time changed); its E-level PLEG line above alerts
    line = (
        "Jan 31 15:46:40 gpu-node-12 kubelet[3072]: I0131 15:46:40.357340    3072 kubelet_node_status.go:446] "
        "Recording NodeNotReady event message for node gpu-node-12"
    )
    assert _classes(line, "nccl") == {"node_silent"}
    assert _acting(line, "nccl") == []
