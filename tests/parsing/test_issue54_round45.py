"""Issue 54, round 45 (fresh88 opened, G30): an IOMMU's record of a DMA it refused, naming the device (Intel's DMAR
fault and its DRHD header, AMD-Vi's IO_PAGE_FAULT with or without the device's driver tag), and the SCSI midlayer's
"Unhandled sense code"; and the round's label decisions the parser keeps (an NVMe controller removed after timeouts
with -ENODEV is storage; hv_balloon's "Unhandled message" is quiet).

Every line is written for the test (other hosts, stamps, devices, addresses and codes than the corpus rows), beside the
healthy look-alikes each reading must leave alone.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting_verdicts, verdicts

# ---- an IOMMU's DMA fault naming a device (parsing/rules.toml kernel.iommu_dma_fault) ----


@pytest.mark.parametrize(
    "line",
    [
        # Intel, 5.x and later: the request's PASID state in the brackets
        "[ 9312.118204] DMAR: [DMA Write NO_PASID] Request device [3b:00.1] fault addr 0xfffd3000 [fault reason 0x05] "
        "PTE Write access is not set",
        # Intel, 4.x: the PASID after the device
        "Jun  4 02:11:40 gpu-07 kernel: DMAR: [DMA Read] Request device [af:00.0] PASID ffffffff fault addr 7a1c2000 "
        "[fault reason 06] PTE Read access is not set",
        # Intel, 3.x: no space after the tag
        "[ 4411.002931] DMAR:[DMA Read] Request device [02:00.0] fault addr 9c4e1000",
        # the header of the same report, after the boot
        "[ 5120.774012] DMAR: DRHD: handling fault status reg 2",
        # AMD, the device by its address (no driver holds it)
        "[ 7001.400210] AMD-Vi: Event logged [IO_PAGE_FAULT device=c1:00.0 domain=0x0019 address=0x00000000e8a41000 flags=0x0050]",
        # AMD, behind the faulting device's driver tag: the IOMMU's finding, not the driver's class
        "[88120.331907] mlx5_core 0000:41:00.1: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0033 address=0x7f1b2000 flags=0x0020]",
        "[ 3050.926611] nvidia 0000:c1:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0012 address=0xfc0028a0 flags=0x0000]",
        "[ 3050.926611] nvme 0000:02:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000d address=0xffffc000 flags=0x0050]",
    ],
)
def test_an_iommus_dma_fault_after_boot_is_a_kernel_alert(line: str) -> None:
    assert acting_verdicts(line) == [("kernel", "alert")]


@pytest.mark.parametrize(
    "line",
    [
        # the same reports logged at boot: firmware's DMA before the OS took the device, recorded
        "[    0.482190] DMAR: [DMA Read NO_PASID] Request device [00:1f.6] fault addr 0x8c000000 [fault reason 0x02] "
        "Present bit in context entry is clear",
        "[    0.482201] DMAR: DRHD: handling fault status reg 2",
        "[    1.902311] AMD-Vi: Event logged [IO_PAGE_FAULT device=00:14.0 domain=0x0000 address=0x000000fdf9103300 flags=0x0020]",
    ],
)
def test_an_iommus_dma_fault_at_boot_is_recorded(line: str) -> None:
    assert verdicts(line) == [("kernel", "none")]


@pytest.mark.parametrize(
    "line",
    [
        # the IOMMU's set-up lines
        "[ 2200.100012] DMAR: DRHD base: 0x000000c5ffc000 flags: 0x0",
        "[ 2200.100020] DMAR: dmar1: reg_base_addr c5ffc000 ver 1:0 cap 8d2078c106f0466 ecap f020df",
        "[ 2200.100031] AMD-Vi: Found IOMMU at 0000:40:00.2 cap 0x40",
        "[ 2200.100044] AMD-Vi: Interrupt remapping enabled",
        "[ 2200.100050] pci 0000:c0:00.2: AMD-Vi: IOMMU performance counters supported",
    ],
)
def test_the_iommus_setup_lines_stay_quiet(line: str) -> None:
    assert acting_verdicts(line) == []


# ---- the SCSI midlayer's unhandled sense (parsing/rules.toml storage.scsi_unhandled) ----


@pytest.mark.parametrize(
    "line",
    [
        "[ 6120.551840] sd 2:0:0:0: [sdb] Unhandled sense code",
        "Oct 12 04:33:19 nas kernel: sd 4:0:1:0: [sdd] Unhandled error code",
        "[ 6120.551840] sd 0:0:0:0: [sda] tag#14 Unhandled sense code",
    ],
)
def test_a_scsi_commands_unhandled_sense_is_storage(line: str) -> None:
    assert acting_verdicts(line) == [("storage", "alert")]


def test_an_optical_drives_unhandled_sense_is_recorded_as_its_other_errors_are() -> None:
    # (a CD or DVD drive, sr: no job's data is on it; its sense lines are recorded, not alerted, by the earlier rules)
    assert verdicts("[ 6120.551840] sr 1:0:0:0: [sr0] Unhandled sense code") == [("storage", "none")]


def test_a_scsi_commands_unhandled_sense_at_boot_is_recorded_as_storage() -> None:
    assert verdicts("[   19.440121] sd 1:0:0:0: [sdb] Unhandled sense code") == [("storage", "none")]


@pytest.mark.parametrize(
    "line",
    [
        # Hyper-V's balloon driver ignoring a message type it does not know (the lead's decision: healthy)
        "[ 8123.004412] hv_balloon: Unhandled message: type: 40961",
        "Mar  9 11:02:07 vm-3 kernel: hv_balloon: Unhandled message: type: 12",
    ],
)
def test_another_drivers_unhandled_message_stays_quiet(line: str) -> None:
    assert acting_verdicts(line) == []


# ---- an NVMe controller removed after timeouts, status -ENODEV (round 43's quiet -19 rule must not take it) ----


@pytest.mark.parametrize(
    "line",
    [
        "[14021.118823] nvme nvme2: Removing after probe failure status: -19",
        "May 30 07:41:22 worker-12 kernel: nvme nvme0: Removing after probe failure status: -19",
    ],
)
def test_an_nvme_controller_removed_after_probe_failure_is_storage(line: str) -> None:
    assert acting_verdicts(line) == [("storage", "alert")]
