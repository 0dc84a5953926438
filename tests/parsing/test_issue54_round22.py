"""Issue 54 round 22: fresh batches 37-38 mined, each fix by the general property or form that carries,
not by the rows' text (docs/rules.md, round 22).

The healthy lines that fired first, each quiet by a property of its own, beside the real fault lines of
the same shape that must still act; then the programs' own formats the misses took, each read in a shape
other than the row's (another device, signal, error or wording the same program prints). Every line is a
corpus row's (tests/fixtures/log_corpus, with its provenance there) or a rule's example, unless its comment
says it is the same shape with a word changed.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting as _acting
from tests.parsing.line_events import classes as _classes

_HEALTHY = [
    # a NIC's precision-time register, not its data path (fresh37)
    ("igc 0000:2e:00.0 enp46s0: Timeout reading IGC_PTM_STAT register", "kernel"),
    # the same clock side in another Intel driver's words (the driver changed)
    ("igb 0000:01:00.0 eth0: Tx timestamp timeout", "kernel"),
    # a scheduler ending the job at its time limit, or a person cancelling it (fresh37; the type changed for the second)
    ("1.129s: job.exception type=timeout severity=0 resource allocation expired", "nccl"),
    ("2.504s: job.exception type=cancel severity=0 ", "nccl"),
    # a loop device detached on purpose, and a disk given its size at attach (the device and the sizes changed)
    ("[ 1486.551942] loop3: detected capacity change from 2097152 to 0", "kernel"),
    ("[    3.2] sdb: detected capacity change from 0 to 1953525168", "kernel"),
    # bonding's member coming back (fresh38)
    ("[ 4441.852238] bond0: (slave enp83s0f0np0): link status definitely up, 100000 Mbps full duplex", "kernel"),
]


@pytest.mark.parametrize(("line", "source"), _HEALTHY)
def test_a_healthy_line_is_quiet_by_its_own_property(line: str, source: str) -> None:
    assert _acting(line, source) == []


_STILL_FAULTS = [
    # the same driver timing out on a register of its data path (the register changed)
    ("igc 0000:2e:00.0 enp46s0: Timeout reading IGC_CTRL register", "kernel", "nic"),
]


@pytest.mark.parametrize(("line", "source", "fault"), _STILL_FAULTS)
def test_the_same_shapes_that_are_faults_still_act(line: str, source: str, fault: str) -> None:
    acting = _acting(line, source)
    assert acting, line
    assert fault in {e.data.get("fault") for e in acting}


_FORMS = [
    # libata retrying a failed cache flush (the port, the command and the mask changed)
    ("[  812.004411] ata1.00: retrying FLUSH 0xe7 Emask 0x1", "kernel", "storage"),
    # a disk whose capacity went to zero, at info (the device and the size changed)
    ("[11508.698359] sdc: detected capacity change from 3907029168 to 0", "kernel", "storage"),
    # the CIFS client's server gone silent, in its other message (a rule's wording, no corpus row)
    ("CIFS VFS: Server fs01 has not responded in 120 seconds. Reconnecting...", "kernel", "storage"),
    ("[373403.856202] fs/cifs/connect.c: Unable to send echo request to server: stor02.bk.prodrive.nl", "kernel", "storage"),
    # bonding's member down in the slave_info form of kernels >= 5.2 (the bond and the port changed)
    ("[ 4444.035309] bond1: (slave ens2f1): link status definitely down, disabling slave", "kernel", "nic"),
    # Flux's broker losing ranks, behind a journal header and behind dmesg's reltime (fresh37; the hosts changed)
    ("Jun 04 09:21:45.016921 PDT broker.err[0]: dead to Flux: gpu[01-04] (rank 1-4)", "nccl", "node_silent"),
    ("[ +21.998384] broker[0]: gpu07 (rank 7) has disconnected unexpectedly. Marking it LOST.", "nccl", "node_silent"),
    # NVML unable to open a device the driver lists (the index and the error changed)
    ("error getting device handle for index '3': GPU is lost", "nccl", "gpu_lost"),
    # the CUDA samples' failure report (another call and error)
    ("Failed to copy vector C from device to host (error code an illegal memory access was encountered)!", "nccl", "cuda_error"),
    # the fabric manager not starting (the config path and the code changed) or refusing its configuration
    (
        'Mar 02 10:11:12 gpu-node nvidia-fabricmanager-start.sh[4242]: "/usr/bin/nv-fabricmanager -c /etc/fm.cfg" failed! '
        "Exit code: 2",
        "kernel",
        "nvlink",
    ),
    ("fabric manager config file item: FABRIC_MODE has an invalid value", "kernel", "nvlink"),
    # an AMD GPU fault record's status register, the MM hub's (the hub and the value changed)
    ("[  955.602811] amdgpu 0000:09:00.0: amdgpu: MMVM_L2_PROTECTION_FAULT_STATUS:0x00041152", "kernel", "app_fault"),
    # infinity spelled out as Java and JavaScript print it (the sign and the wording changed)
    ("[Epoch 3 1200/50000][Iteration 90] Loss is -Infinity. Current learning rate is 0.01.", "nccl", "nan_loss"),
    ("step 310, loss = Infinity", "nccl", "nan_loss"),
    # glog's fatal-signal banner with a null address (the signal and the PIDs changed)
    ("*** SIGILL (@(nil)) received by PID 7 (TID 0x7f3a) from PID 0; stack trace: ***", "nccl", "user_code"),
]


@pytest.mark.parametrize(("line", "source", "fault"), _FORMS)
def test_each_programs_own_format_is_read(line: str, source: str, fault: str) -> None:
    assert fault in _classes(line, source)


def test_a_cuda_sample_out_of_memory_or_build_mismatch_is_not_a_cuda_error() -> None:
    for line in (
        "Failed to allocate device vector A (error code out of memory)!",
        "Failed to launch vectorAdd kernel (error code no kernel image is available for execution on the device)!",
    ):
        assert "cuda_error" not in _classes(line, "nccl"), line
