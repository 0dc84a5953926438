"""Issue 54, round 44 (fresh87 opened, G29): AMD's decoded machine-check status that says corrected whatever the
kernel printed before the bank, the EDAC core's older one-error records, the x86 NMI handler's reports of a PCI
system error or an I/O channel check, a FreeBSD RAID or SAS controller's firmware in its fault state; and the round's
label decisions the parser already keeps (DeepSpeed's bare skipped step, a NIC driver's set-up failure at boot).

Every line is written for the test (other hosts, stamps, devices, codes and numbers than the corpus rows), beside the
healthy look-alikes each reading must leave alone.
"""

from __future__ import annotations

import pytest

from faultlens.parsing.registry import parser_for
from tests.parsing.line_events import acting_verdicts, events, verdicts

# ---- AMD's decoded MCi_STATUS flags (parsing/benign.toml mce.amd_status_corrected) ----


@pytest.mark.parametrize(
    "line",
    [
        # 3.0's print: the bank's flags with nothing before them; family 15h's Deferred, Poison and the ECC field after
        "[Hardware Error]: MC4_STATUS[Over|CE|MiscV|-|AddrV|-|-|CECC]: 0xd814c00031080a13",
        # (a syslog copy that lost the space after its tag)
        " kernel:[Hardware Error]: MC4_STATUS[-|CE|MiscV|-|AddrV|-|-|CECC]: 0x9c1c400000080813",
        # 3.2's print: the CPU and a tab
        "[ 8123.551020] [Hardware Error]: CPU:3\tMC0_STATUS[-|CE|-|-|AddrV]: 0x9400000000000151",
        # 3.x's: the CPU and its family, model and stepping (round 19's form, kept)
        "[ 8123.551020] [Hardware Error]: CPU:3 (15:2:0) MC2_STATUS[Over|CE|MiscV|-|AddrV|-|-|CECC]: 0xdc0c400002080813",
    ],
)
def test_a_banks_status_that_says_corrected_is_quiet_whatever_precedes_it(line: str) -> None:
    assert acting_verdicts(line) == []


@pytest.mark.parametrize(
    "line",
    [
        "[Hardware Error]: MC4_STATUS[Over|UE|MiscV|PCC|AddrV|-|-|UECC]: 0xfe10400000080a13",
        "[Hardware Error]: MC4_STATUS[-|CE|MiscV|PCC|AddrV|-|-|CECC]: 0x9e1c400000080813",
        "[Hardware Error]: MC0_STATUS[-|CE|MiscV|-|AddrV|-|Poison|CECC]: 0x9c1c400000080813",
        "[Hardware Error]: CPU:3\tMC0_STATUS[-|UE|-|PCC|AddrV]: 0xb600000000000151",
    ],
)
def test_an_uncorrected_or_poisoned_status_still_acts(line: str) -> None:
    assert acting_verdicts(line) != []


# ---- the EDAC core's older records, one error a line (parsing/kernel_host.py _EDAC) ----


@pytest.mark.parametrize(
    "line",
    [
        'Mar  3 22:10:05 db-17 kernel: EDAC MC1: CE row 2, channel 1, label "CPU_SrcID#1_Channel#1_DIMM#0": 1 Unknown '
        "error(s): memory read on FATAL area : cpu=8 Err=0001:0090 (ch=1), addr = 0x81a0c2c0 => socket=1, Channel=1(mask=2), rank=4",
        'EDAC MC0: CE page 0x3a1c0, offset 0x840, grain 64, syndrome 0x4b, row 1, channel 0, label "DIMM_A2": i5000 CE',
        "EDAC MC0: CE - no information available: INTERNAL ERROR",
    ],
)
def test_an_older_corrected_record_is_recorded_not_acted_on(line: str) -> None:
    assert verdicts(line) == [("kernel", "none")]


@pytest.mark.parametrize(
    "line",
    [
        'EDAC MC1: UE row 2, channel-a= 0 channel-b= 1 labels "DIMM_B1": i5400 UE',
        'EDAC MC0: UE page 0x3a1c0, offset 0x840, grain 64, row 1, labels "DIMM_A2": i5000 UE',
        "EDAC MC0: UE - no information available: INTERNAL ERROR",
    ],
)
def test_an_older_uncorrected_record_evicts_as_the_counted_one(line: str) -> None:
    assert verdicts(line) == [("kernel", "evict")]


def test_the_counted_records_keep_their_reading() -> None:
    assert verdicts("EDAC MC3: 12 CE memory read error on CPU_SrcID#1_Ha#0_Chan#2_DIMM#1 (channel:2 slot:1)") == [("kernel", "none")]
    assert verdicts("EDAC MC3: 1 UE memory read error on CPU_SrcID#1_Ha#0_Chan#2_DIMM#1 (channel:2 slot:1)") == [("kernel", "evict")]


@pytest.mark.parametrize(
    "line",
    [
        "EDAC MC0: Giving out device to module sb_edac controller Sandy Bridge SrcID#0_Ha#0: DEV 0000:7f:0e.0 (INTERRUPT)",
        "EDAC sbridge: Ver: 1.1.2",
    ],
)
def test_edacs_set_up_lines_stay_quiet(line: str) -> None:
    assert acting_verdicts(line) == []


# ---- the x86 NMI handler's SERR and IOCHK reports (parsing/rules.toml kernel.platform_nmi) ----


@pytest.mark.parametrize(
    "line",
    [
        "[ 7342.118210] NMI: PCI system error (SERR) for reason b1 on CPU 12.",
        "Jun 11 04:52:19 node-311 kernel:NMI: PCI system error (SERR) for reason 80 on CPU 0.",
        "[ 7342.118210] NMI: IOCK error (debug interrupt?) for reason 71 on CPU 3.",
        "[ 7342.118210] NMI: IOCK error (debug interrupt?)",
        "[ 7342.118230] You have some hardware problem, likely on the PCI bus.",
    ],
)
def test_an_nmi_for_a_bus_or_io_channel_error_is_the_hosts_fault(line: str) -> None:
    assert acting_verdicts(line) == [("kernel", "alert")]


def test_the_old_kernels_three_lines_are_one_fault() -> None:
    p = parser_for("kernel")
    lines = [
        "[ 9130.004411] Uhhuh. NMI received for unknown reason a1 on CPU 2.",
        "[ 9130.004413] You have some hardware problem, likely on the PCI bus.",
        "[ 9130.004415] Dazed and confused, but trying to continue",
    ]
    found = [e for line in lines for e in p.feed(line)] + p.flush()
    assert [(e.data["fault"], e.data["action"]) for e in found] == [("kernel", "alert")]


def test_an_nmi_report_logged_at_boot_is_recorded() -> None:
    found = events("[   41.220871] You have some hardware problem, likely on the PCI bus.")
    assert found and all(e.data.get("boot") and e.data.get("action") == "none" for e in found)


@pytest.mark.parametrize(
    "line",
    [
        "[ 7342.118210] NMI watchdog: Perf event create on CPU 0 failed with -2",
        "[ 7342.118210] NMI watchdog: enabled on all CPUs, permanently consumes one hw-PMU counter.",
        "[ 7342.118210] NMI watchdog: disabled (cpu0): hardware events not enabled",
    ],
)
def test_the_lockup_detectors_own_nmi_lines_stay_quiet(line: str) -> None:
    assert acting_verdicts(line) == []


# ---- a FreeBSD storage controller's firmware in its fault state (subsystems.toml scsi; storage_state.py) ----


@pytest.mark.parametrize(
    "line",
    [
        "mfi1: Firmware fault",
        "Feb  2 07:41:09 nas04 kernel: mfi0: Firmware fault",
        "mrsas0: FW is in FAULT state!!",
        "mpr1: IOC Fault 0x40002622, Resetting",
        "mps0: IOC in fault state 0x0d04, resetting",
    ],
)
def test_a_freebsd_raid_or_sas_controllers_firmware_fault_is_storage(line: str) -> None:
    assert acting_verdicts(line) == [("storage", "alert")]


@pytest.mark.parametrize(
    "line",
    [
        "mfi0: <Invader> port 0x6000-0x60ff mem 0xc7300000-0xc730ffff,0xc7200000-0xc72fffff irq 34 at device 0.0 numa-domain 0 on pci4",
        "mfi0: Using MSI",
        "mfi0: Megaraid SAS driver Ver 4.23",
        "mfi0: 8713 (boot + 24s/0x0020/info) - Firmware initialization started (PCI ID 005d/1000/1f49/1028)",
        "mps0: Firmware: 20.00.07.00, Driver: 21.02.00.00-fbsd",
        "mps0: IOCCapabilities: 5285c<ScsiTaskFull,DiagTrace,SnapBuf,EEDP,TransRetry,EventReplay,HostDisc>",
        "ciss0: <HP Smart Array P420i> port 0x4000-0x40ff mem 0xf7d00000-0xf7dfffff,0xf7cf0000-0xf7cf03ff irq 16 at device 0.0 on pci3",
    ],
)
def test_the_controllers_attach_and_notice_lines_stay_quiet(line: str) -> None:
    assert acting_verdicts(line) == []


# ---- the round's labels the parser already keeps ----


@pytest.mark.parametrize(
    "line",
    [
        "[2024-05-17 18:02:44,913] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
        "Attempted loss scale: 262144, reducing to 131072",
        # late in a run with the scale held: still one skipped step (round 44's label)
        "[2024-05-17 23:40:02,118] [INFO] [stage_1_and_2.py:1720:step] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
        "Attempted loss scale: 524288.0, reducing to 524288.0",
    ],
)
def test_deepspeeds_bare_skipped_step_is_quiet(line: str) -> None:
    assert acting_verdicts(line, "nccl") == []


def test_deepspeeds_scale_at_its_minimum_is_nan_loss() -> None:
    line = "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."
    assert [fault for fault, _ in acting_verdicts(line, "nccl")] == ["nan_loss"]


def test_a_nic_drivers_set_up_failure_at_boot_is_recorded_and_later_alerts() -> None:
    at_boot = events("[    6.102284] bnxt_en 0000:3b:00.1 bnxt_re1: Failed to register fence-MR")
    assert at_boot and all(e.data.get("boot") and e.data.get("action") == "none" for e in at_boot)
    assert acting_verdicts("[ 6102.284410] bnxt_en 0000:3b:00.1 bnxt_re1: Failed to register fence-MR") == [("nic", "alert")]
