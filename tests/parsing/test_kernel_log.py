"""KernelLogParser on realistic kernel log lines."""

from __future__ import annotations

import pytest

from bench.testbed import log_samples as S
from faultlens.events.diagnosis_record import ACTIONS, FAULT_CLASSES
from faultlens.parsing.kernel_log import KernelLogParser


def parse(*lines: str) -> list:
    p = KernelLogParser()
    out = []
    for line in lines:
        out += p.feed(line)
    return out + p.flush()


def one(line: str):
    events = parse(line)
    assert len(events) == 1, events
    return events[0]


def test_xid_79_is_gpu_lost_with_pci_pid_and_process():
    e = one(S.XID_79)
    assert e.kind == "gpu_lost"
    assert e.data["xid"] == 79 and e.data["pci"] == "0000:3b:00"
    assert e.data["pid"] == 1234 and e.data["process"] == "python3"
    assert (e.data["fault"], e.data["action"], e.data["severity"]) == ("gpu_lost", "evict", "fatal")
    assert e.mono == pytest.approx(8523.104567) and e.ts is None
    assert e.data["line"] == S.XID_79


def test_xid_with_unknown_pid_and_name():
    e = one(S.XID_79_UNKNOWN_PID)
    assert e.data["pid"] is None and e.data["process"] is None and e.data["pci"] == "0000:3b:00"


@pytest.mark.parametrize(
    "line, code, fault, action",
    [
        (S.XID_13, 13, "app_fault", "reattempt"),
        (S.XID_13_OLD, 13, "app_fault", "reattempt"),
        (S.XID_31_OLD, 31, "app_fault", "reattempt"),
        (S.XID_48, 48, "gpu_memory", "evict_reset_gpu"),
        (S.XID_63, 63, "gpu_memory", "none"),
        (S.XID_64, 64, "gpu_memory", "evict_reset_gpu"),
        (S.XID_74, 74, "nvlink", "evict"),
        (S.XID_92, 92, "gpu_memory", "none"),
        (S.XID_94, 94, "gpu_memory", "reattempt"),
        (S.XID_95, 95, "gpu_memory", "evict_reset_gpu"),
        (S.XID_119, 119, "gpu_reset_required", "evict_reset_gpu"),
        (S.XID_UNKNOWN_CODE, 999, "unknown", "none"),
    ],
)
def test_xid_lines(line, code, fault, action):
    e = one(line)
    assert e.kind == "xid"
    assert e.data["xid"] == code
    assert (e.data["fault"], e.data["action"]) == (fault, action)


def test_old_xid_format_has_no_pid():
    e = one(S.XID_31_OLD)
    assert e.data["pid"] is None and e.data["pci"] == "0000:02:00"
    assert e.data["text"].startswith("Ch 00000010")


def test_xid_45_is_sympathetic_and_records_only():
    e = one(S.XID_45)
    assert e.data["sympathetic"] is True and e.data["action"] == "none"
    assert e.ts == pytest.approx(1795342272.123456)


def test_xid_149_decoded_from_intrinfo():
    fatal = S.XID_149_LINK_DOWN.replace("0x00000bc6", "0x00100011")
    e = one(fatal)
    assert e.data["subcode"] == "NETIR_LINK_EVT/NETIR_LINK_DOWN" and e.data["action"] == "evict"
    ignore = S.XID_149_LINK_DOWN.replace("0x00000bc6", "0x02600011")
    e = one(ignore)
    assert (e.data["fault"], e.data["action"]) == ("nvlink", "none")


def test_xid_145_ignore_decode():
    e = one(S.XID_145_IGNORE)
    assert (e.data["subcode"], e.data["action"], e.data["intrinfo"]) == ("RLW_REMAP", "none", "0x00000004")


def test_xid_154_takes_the_recovery_action_it_names():
    e = one(S.XID_154)
    assert (e.data["fault"], e.data["action"]) == ("gpu_reset_required", "evict_reset_gpu")


def test_multiline_fall_off_the_bus_is_one_event():
    events = parse(*S.FALLEN_MULTILINE)
    assert [e.kind for e in events] == ["gpu_lost"]
    e = events[0]
    assert e.data["uuid"] == "GPU-5c8a6e2f-3b1d-4c8e-9a0f-2e6d7b1c9a44"
    assert e.data["serial"] == "1652320012345"
    assert e.data["xid"] == 79
    assert e.data["line"].count("\n") == 2  # header, serial and the Xid line


def test_fall_off_text_first_then_xid_is_still_one_event():
    events = parse(S.FALLEN_MULTILINE[3], S.FALLEN_MULTILINE[2])
    assert [e.kind for e in events] == ["gpu_lost"]


def test_two_gpus_lost_are_two_events():
    events = parse(S.FALLEN_MULTILINE[2], S.FALLEN_NO_XID)
    assert sorted(e.data["pci"] for e in events) == ["0000:3b:00", "0000:af:00"]


def test_fall_off_without_xid():
    e = one(S.FALLEN_NO_XID)
    assert e.kind == "gpu_lost" and e.data["pci"] == "0000:af:00"
    assert e.data["xid"] == 79 and e.data["xid_inferred"] is True  # the text is Xid 79 without its line


def test_three_line_fall_off_notice_names_its_gpu():
    # NVIDIA/NVSentinel health-monitors/syslog-health-monitor/pkg/gpufallen/gpufallen_handler_test.go
    events = parse(
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
        "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
        "               NVRM: fallen off the bus and is not responding to commands.",
    )
    assert [(e.kind, e.data["pci"], e.data["xid"]) for e in events] == [("gpu_lost", "0000:b3:00", 79)]
    assert events[0].data["line"].count("NVRM:") == 3  # the whole notice is the evidence


def test_sxid_fatal_and_detail_lines_folded():
    e = one(S.SXID_FATAL)
    assert (e.kind, e.data["sxid"], e.data["device"], e.data["action"]) == ("sxid", 20034, "nvidia-nvswitch2", "evict")
    # 12028 says "Non-fatal" but NVIDIA's NVSwitch catalogue treats it as fatal (issue 37).
    events = parse(*S.SXID_NONFATAL)
    assert len(events) == 1 and events[0].data["action"] == "evict" and events[0].data["severity"] == "fatal"
    # A code outside that list goes by its own word (the same line with another code: synthetic).
    events = parse(*(line.replace("12028", "11012") for line in S.SXID_NONFATAL))
    assert len(events) == 1 and events[0].data["action"] == "none" and events[0].data["severity"] == "warn"


@pytest.mark.parametrize(
    "line, kind, device, port",
    [
        (S.MLX_LINK_DOWN, "link_down", "ibp94s0", None),
        (S.MLX_LINK_UP, "link_up", "ibp94s0", None),
        (S.MLX_MODULE_UNPLUGGED, "link_down", "0000:5e:00.0", 0),
        (S.IB_PORT_DOWN, "link_down", "mlx5_3", 1),
        (S.IPOIB_READY, "link_up", "ib0", None),
        (S.BOND_DOWN, "link_down", "ib1", None),
    ],
)
def test_nic_link_state(line, kind, device, port):
    e = one(line)
    assert (e.kind, e.data["device"], e.data["port"]) == (kind, device, port)
    assert e.data["fault"] == "nic"
    assert e.data["action"] == ("evict" if kind == "link_down" else "none")


@pytest.mark.parametrize("line", [S.MLX_HEALTH, S.MLX_SYNDROME, S.MLX_MODULE_ERROR])
def test_mlx5_health_is_nic_error(line):
    e = one(line)
    assert (e.kind, e.data["fault"], e.data["device"]) == ("nic_error", "nic", "0000:5e:00.0")


def test_pcie_aer_and_its_detail_line_fold():
    events = parse(S.AER_FATAL, S.AER_FATAL_DETAIL)
    assert len(events) == 1
    assert (events[0].kind, events[0].data["pci"], events[0].data["error_type"], events[0].data["action"]) == (
        "pcie_aer", "0000:3b:00", "fatal", "evict",
    )
    corrected = one(S.AER_CORRECTED)
    assert (corrected.data["error_type"], corrected.data["action"]) == ("corrected", "none")


def test_machine_check_and_edac():
    events = parse(S.MCE_UNCORRECTED, S.MCE_DUMP)
    assert [e.kind for e in events] == ["mce"] and events[0].data["corrected"] is False
    assert one(S.MCE_LOGGED).data["corrected"] is True
    ce, ue = one(S.EDAC_CE), one(S.EDAC_UE)
    assert (ce.kind, ce.data["corrected"], ce.data["action"]) == ("edac", True, "none")
    assert (ue.data["corrected"], ue.data["action"]) == (False, "evict")


def test_lockups_hangs_panics():
    e = one(S.SOFT_LOCKUP)
    assert (e.kind, e.data["process"], e.data["pid"], e.data["cpu"]) == ("soft_lockup", "python", 1234, 12)
    e = one(S.HUNG_TASK)
    assert (e.kind, e.data["process"], e.data["pid"]) == ("hung_task", "python3", 1234)
    e = one(S.PANIC)
    assert (e.kind, e.data["action"], e.data["text"]) == ("panic", "evict", "Fatal exception in interrupt")


def test_oom_kill_and_its_summary_are_one_event():
    events = parse(S.OOM_KILL, S.OOM_SUMMARY)
    assert len(events) == 1
    assert (events[0].kind, events[0].data["pid"], events[0].data["process"], events[0].data["fault"]) == (
        "oom_kill", 41235, "python3", "host_oom",
    )
    cg = one(S.OOM_CGROUP)
    assert cg.data["cgroup"] is True and cg.data["process"] == "pt_data_worker"


def test_segfaults_in_nccl_and_cuda():
    e = one(S.SEGV_NCCL)
    assert (e.kind, e.data["lib"], e.data["fault"], e.data["pid"]) == ("segfault", "libnccl.so.2", "nccl_error", 1234)
    e = one(S.SEGV_CUDA)
    assert (e.data["lib"], e.data["fault"], e.data["process"]) == ("libcuda.so.535.104.05", "cuda_error", "python3")


@pytest.mark.parametrize(
    "line, ts, mono",
    [
        (S.KMSG, None, 8523.104567),
        (S.JOURNAL_ISO, 1795342272.0, None),
        (S.XID_13, 1795342272.0, None),
        (S.XID_48, None, 9000.000001),
    ],
)
def test_timestamp_forms(line, ts, mono):
    e = one(line)
    if ts is None:
        assert e.mono == pytest.approx(mono)
    else:
        assert e.ts == pytest.approx(ts)


def test_syslog_line_has_both_clocks():
    e = one(S.XID_48)
    assert e.ts is not None and e.mono == pytest.approx(9000.000001)


def test_benign_lines_say_nothing_and_count_as_skipped():
    p = KernelLogParser()
    benign = S.KERNEL_BENIGN + [
        "IPv6: ADDRCONF(NETDEV_UP): eth0: link is not ready",
        "docker0: port 3(veth12ab) entered forwarding state",
        "NVRM: GPU at PCI:0000:3b:00: GPU-5c8a6e2f-3b1d-4c8e-9a0f-2e6d7b1c9a44",
    ]
    for line in benign:
        assert p.feed(line) == []
    assert p.stats.skipped == len(benign) and p.stats.recognised == 0


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: Xid (PCI:0000:3b:0",
        "NVRM: Xid (PCI:0000:3b:00): ",
        "mlx5_core 0000:5e:00.0",
        "python3[12]: segfault at",
        "Out of memory: Killed process (",
        "[ 123.4",
        "",
    ],
)
def test_truncated_lines_do_not_raise(line):
    p = KernelLogParser()
    p.feed(line)
    assert p.stats.lines == 1 and p.stats.recognised + p.stats.skipped + p.stats.garbled == 1


def test_binary_garbage_is_garbled_and_the_next_good_line_still_parses():
    p = KernelLogParser()
    assert p.feed("\x00\x01\x02\x03\xff\xfe\x00garbage\x00\x07\x08\x00") == []
    assert p.feed(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00".decode("latin-1")) == []
    assert p.stats.garbled == 2
    assert [e.kind for e in p.feed(S.XID_79)] == ["gpu_lost"]


def test_every_event_carries_the_common_keys():
    lines = [v for k, v in vars(S).items() if k.isupper() and isinstance(v, str)]
    p = KernelLogParser()
    events = [e for line in lines for e in p.feed(line)]
    assert len(events) > 30
    for e in events:
        assert e.source == "kernel"
        assert e.data["fault"] in FAULT_CLASSES and e.data["action"] in ACTIONS
        assert e.data["severity"] in ("fatal", "error", "warn", "info")
        assert isinstance(e.data["line"], str) and e.data["line"]
    assert p.stats.lines == p.stats.recognised + p.stats.skipped + p.stats.garbled
