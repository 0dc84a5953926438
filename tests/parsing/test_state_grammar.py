"""The state grammar (parsing.state_grammar): what happened to which device, on lines written here from the
general form "<object> <state>" / "<state> <object>", and the healthy look-alikes each guard is for."""

from __future__ import annotations

import pytest

from faultlens.parsing.registry import parser_for
from faultlens.parsing.state_grammar import read_state

FAULTS = [
    # object then state
    ("hca7 port 2 ==> ibs9f1 (Down)", "nic", "down"),
    ("Link 5: <inactive>", "nic", "down"),
    ("teamd: bond4: port eth7 is down", "nic", "down"),
    ("Module nvidia-peermem not found in directory /lib/modules/6.1.0", "gpu_lost", "absent"),
    ("nvswitch-audit: NVSwitch 3 is missing", "nvlink", "absent"),
    ("Device ib3 does not appear to be present, giving up.", "nic", "absent"),
    ("mydrv: Disk write failed on sector group 12", "storage", "failed"),
    ("volume vol7 went inactive", None, None),  # a volume is no link: inactive is not a disk's state
    ("GPU 3 is hung!", "gpu_reset_required", "hung"),
    ("The worker node gpu-17 has been marked as unreachable by the monitor", "node_silent", "dead"),
    ("kubelet status: NodeNotReady on host gpu-17", "node_silent", "not ready"),
    # state then object
    ("No InfiniBand adapters found on this host", "nic", "absent"),
    ("None of the NVIDIA GPUs are initialized", "gpu_lost", "absent"),
    ("fatal: could not find any RoCE device", "nic", "absent"),
    ("error: unable to load the kernel module 'nvidia-uvm'", "gpu_lost", "absent"),
    ("team0: now running without any active port!", "nic", "down"),
    ("scheduler lost contact with the remote daemon on gpu-17", "node_silent", "lost"),
    ("  3/900 [00:01<05:10,  2.90it/s]Killed", "host_oom", "killed"),
    ("Reason=gres/gpu count reported fewer than configured", "gpu_lost", "absent"),
]


@pytest.mark.parametrize(("line", "fault", "state"), FAULTS)
def test_reads_object_and_state(line: str, fault: str | None, state: str | None) -> None:
    got = read_state(line, line, "nccl")
    if fault is None:
        assert got is None
        return
    assert got is not None and got.fault == fault
    assert state is not None and state in got.state and got.quiet is None


HEALTHY = [
    # a negation or a count of none before the state
    "0 ports down, 4 ports up",
    "link eth2 is not down",
    "no ports down",
    # the line says all is well, or that it will try again
    "port 2 went down and recovered",
    "link down on eth4, will retry in 5 seconds",
    # a question, a hedge, help text
    "Is the InfiniBand port down?",
    "check whether the bond has any active interface, if the link is down",
    "  --fail-on-missing   exit when a GPU is missing",
    "usage: probe [-v] print whether the NIC is down",
    # a search for a kind, not the device absent
    "No matching GPU found for the display profile",
    "no compatible IB ports found for flags 0x40",
    # a failed action whose object follows, a thing already there, a complement not the subject
    "GPU:1: Failed to query the display engine's state",
    'Failed to load module "nvidia" (already loaded)',
    "Resume from disk failed.",
    # a bus's link, not a network's; a filesystem a probe cannot find is a disk's content
    "ata6: SATA link down (SStatus 0 SControl 300)",
    "foo-pcie 10000.pcie: link is down after init",
    "VFS: Can't find ext5 filesystem",
    # a status table's row of a condition that does not hold
    "  DiskPressure   False   Tue   KubeletHasNoDiskPressure",
    # an inventory line
    "3b:00.0 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7] (not found in pci.ids)",
    # words between the object and the state: the state is another thing's
    "nvidia: module signature check failed - tainting kernel",
]


@pytest.mark.parametrize("line", HEALTHY)
def test_guards_keep_healthy_lines_quiet(line: str) -> None:
    assert read_state(line, line, "nccl") is None


def test_generic_device_takes_the_class_of_the_driver_tag() -> None:
    got = read_state("nvme nvme3: controller not detected", "nvme nvme3: controller not detected", "kernel")
    assert got is not None and got.fault == "storage"
    # a generic device with no driver and no other object says nothing of its kind
    assert read_state("Did not find any devices", "Did not find any devices", "nccl") is None


def test_own_info_level_makes_the_reading_a_record() -> None:
    line = "host:1:1 [0] SOMELIB INFO NET : No IB devices found."
    got = read_state(line, line, "nccl")
    assert got is not None and got.quiet is not None


@pytest.mark.parametrize(("source", "line", "fault"), [
    ("kernel", "[ 1200.5] qzx_hca 0000:41:00.0 hcx2: port 1 ==> ibq2 (Down)", "nic"),
    ("nccl", "[rank3]: no Infiniband HCAs found on gpu-17", "nic"),
    ("nccl", "agent: NVSwitch 2 is missing", "nvlink"),
    ("kernel", "[ 1200.5] zzfs: Disk write failed on sector group 12", "storage"),
])  # fmt: skip
def test_parsers_emit_a_grammar_suspicion_for_a_line_nothing_else_takes(source: str, line: str, fault: str) -> None:
    events = parser_for(source).feed(line)
    assert [(e.kind, e.data["fault"], e.data["action"], e.data["basis"]) for e in events] == [
        ("suspect_line", fault, "alert", "grammar")
    ]
    assert "reads" in events[0].data["finding"]


def test_parsers_record_a_grammar_reading_at_the_lines_own_info_level() -> None:
    events = parser_for("nccl").feed("I0101 10:00:00.000001  42 agent.go:10] Recording NodeNotReady event for node gpu-17")
    assert [(e.data["fault"], e.data["action"]) for e in events] == [("node_silent", "none")]


def test_advice_on_what_to_set_instead_is_no_fault() -> None:
    line = "libfoo WARN  network device 'hca9:1' is not available, please use one of: 'eth3'"
    assert read_state(line, line, "nccl") is None
