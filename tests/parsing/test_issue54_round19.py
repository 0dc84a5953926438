"""Issue 54 round 19: fresh batches 31-32 mined, each fix by the general property or form that carries,
not by the rows' text (docs/rules.md, round 19).

The healthy lines that fired first, each quiet by a property of its own, beside the real fault lines of
the same shape that must still act; then the programs' own formats the misses took, and the labels
docs/design.md §9 settled this round. Every line is a corpus row's (tests/fixtures/log_corpus, with its
provenance there) or a rule's example, unless its comment says it is the same shape with one word changed.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting as _acting
from tests.parsing.line_events import classes as _classes

_HEALTHY = [
    # a reset that says it succeeded: "successful" closing the clause states the outcome (fresh31)
    ("[  198.745822] bnxt_en 0000:3b:00.0 p1p1: Firmware reset request successful.", "kernel"),
    ("[1026675.667660] ice 0000:b1:00.0: PTP reset successful", "kernel"),
    # AER's attribution line under a record's header, which states the severity (fresh31)
    ("nvme 0000:03:00.0: AER: Error of this Agent is reported first", "kernel"),
    # AMD's decoded bank status whose flags say the hardware corrected it (fresh32)
    (
        "May 01 15:06:59 kernel: [Hardware Error]: CPU:12 (17:71:0) MC1_STATUS[Over|CE|MiscV|AddrV|-|-|SyndV|-|-|-]: "
        "0xdc20000000030151",
        "kernel",
    ),
    (
        "Feb 22 06:49:34 arch kernel: [Hardware Error]: CPU:0 (19:44:1) MC0_STATUS[-|CE|MiscV|AddrV|-|-|SyndV|CECC|-|-|-]: "
        "0x9c20400002000175",
        "kernel",
    ),
    # a library that will retry: wandb's API error it retries (a corpus row, healthy since it was collected)
    ("wandb: ERROR Error while calling W&B API: context deadline exceeded (<Response [500]>)", "nccl"),
]


@pytest.mark.parametrize(("line", "source"), _HEALTHY)
def test_a_healthy_line_is_quiet_by_its_own_property(line: str, source: str) -> None:
    assert _acting(line, source) == []


_STILL_FAULTS = [
    # the same resets failing, or not successful (one word changed)
    ("[  198.745822] bnxt_en 0000:3b:00.0 p1p1: Firmware reset request failed", "kernel", "nic"),
    ("[1026675.667660] ice 0000:b1:00.0: PTP reset not successful", "kernel", "nic"),
    # the AER record's header that states an uncorrected error
    (
        "[  535.561556] igen6_edac 0000:ed:01.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Inaccessible, "
        "(Unregistered Agent ID)",
        "kernel",
        "kernel",
    ),
    # a bank status with UE, or with CE and a poison flag (the flags changed)
    (
        "Feb 22 06:49:34 arch kernel: [Hardware Error]: CPU:0 (19:44:1) MC0_STATUS[-|UE|MiscV|AddrV|PCC|-|SyndV|UECC|-|-|-]: "
        "0xbc20400002000175",
        "kernel",
        "kernel",
    ),
    (
        "Feb 22 06:49:34 arch kernel: [Hardware Error]: CPU:0 (19:44:1) MC0_STATUS[-|CE|MiscV|AddrV|-|-|SyndV|-|Poison|-|-]: "
        "0x9c20400002000175",
        "kernel",
        "kernel",
    ),
]


@pytest.mark.parametrize(("line", "source", "fault"), _STILL_FAULTS)
def test_the_same_shapes_that_are_faults_still_act(line: str, source: str, fault: str) -> None:
    acting = _acting(line, source)
    assert acting, line
    assert fault in {e.data.get("fault") for e in acting}


def test_the_machine_checks_notice_keeps_its_class() -> None:
    # beside the corrected bank status it stays a record of class kernel (23 corpus rows label it kernel)
    assert _classes("May 01 15:06:59 kernel: mce: [Hardware Error]: Machine check events logged") == {"kernel"}


def test_a_count_of_successes_reassures_nothing() -> None:
    # "7 successful" is a tally: the failures beside it are read as before (a development-set row)
    line = "[    0.020785] ACPI Error: 1 table load failures, 7 successful (20160831/tbxfload-246)"
    assert _classes(line) != {None}


_FORMS = [
    # the scheduler's word that a node went quiet: Ray's GCS, both releases' words (docs/design.md §9)
    (
        "The node with node id: 75b2eec8a61cdafd37cc8072b1caf9abdeef9c4e74a4f24d5dfce28d and ip: 10.4.4.107 has been marked "
        "dead because the detector has missed too many heartbeats from it.",
        "nccl",
        "node_silent",
    ),
    (
        "2019-08-03 09:58:24,196\tERROR worker.py:1713 -- The node with client ID 6a16415bb1baa3dc2e753af42ab73ff900d87222 "
        "has been marked dead because the monitor has missed too many heartbeats from it.",
        "nccl",
        "node_silent",
    ),
    # clock daemons and credential services in the job's output as in syslog
    ("            clock skew detected on mon.ceph-2", "nccl", "clock_skew"),
    ("slurmstepd: error: Munge decode failed: Expired credential", "nccl", "clock_skew"),
    ("slurmstepd: error: Verifying authentication credential: Expired credential", "nccl", "clock_skew"),
    # the NVIDIA driver's load ending with no GPU usable
    ("Jan 29 15:27:02 michaels-arch kernel: NVRM: None of the NVIDIA devices were initialized.", "kernel", "gpu_lost"),
    ("[  194.072309] NVRM: None of the NVIDIA graphics adapters were initialized!", "kernel", "gpu_lost"),
    ("[  194.072267] NVRM: The system BIOS may have misconfigured your GPU.", "kernel", "gpu_lost"),
    # a GPU that stopped making progress, in the display drivers' words
    (
        "nvidia-modeset: ERROR: GPU:0: Error while waiting for GPU progress: 0x0000c77d:0 2:0:3072:3064",
        "kernel",
        "gpu_reset_required",
    ),
    ("[drm] IP block:gfx_v8_0 is hung!", "kernel", "gpu_reset_required"),
    # a GPU context's fault in lima's, PowerVR services' and amdgpu's record lines (app_fault, §9)
    ("[  472.894739] lima 1c40000.gpu: mmu page fault at 0x121020 from bus id 0 of type read on ppmmu0", "kernel", "app_fault"),
    ("[234620.919820] MTGPU:  550:     MMU (Core) - FAULT:", "kernel", "app_fault"),
    (
        "[234620.919824] MTGPU:  550:       * MMU status (0x01150083E9CE2389 | 0x00001043): PC = 21, Reading from "
        "0x83E9CE2380, MCU L1(IP0 Global), Fault (Page Table).",
        "kernel",
        "app_fault",
    ),
    (
        "[  121.670461] amdgpu 0000:c1:00.0: amdgpu:   in page starting at address 0x00007ecfa00bc000 from client 10",
        "kernel",
        "app_fault",
    ),
    (
        "Apr 03 19:44:28 c-pc kernel: amdgpu 0000:0c:00.0: amdgpu:  in process python pid 2945597 thread python pid 2945597",
        "kernel",
        "app_fault",
    ),
    # the kernel's own reports without the BUG: tag
    ("Bad page state in process 'swapper'", "kernel", "kernel"),
    ("Trying to fix it up, but a reboot is needed", "kernel", "kernel"),
    ("kernel tried to execute NX-protected page - exploit attempt? (uid: 0)", "kernel", "kernel"),
    # NICs: an adapter refused for its NVM checksum, a port oneCCL finds failed
    ("ixgbe 0000:65:00.0: The EEPROM Checksum Is Not Valid", "kernel", "nic"),
    (
        "2025:04:02-03:30:40:(4119976) |CCL_WARN| host: a4bf01946f22.jf.intel.com, rank: 0, local_port_id: { 65559 0 1 }, "
        "port issue: { status: failed, details: training timeout }",
        "nccl",
        "nic",
    ),
    # NCCL's own WARN of its shared-memory set-up is NCCL's, whatever errno text ends it (the corpus's 8 shm rows)
    (
        "gpu2-ru7:2143:2561 [1] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
        "nccl",
        "nccl_error",
    ),
    # a program's end in its own words: a fatal Status check, runpy's module lookup
    (
        "F external/xla/xla/service/gpu/autotuning/gemm_fusion_autotuner.cc:1099] Non-OK-status: executable.status()",
        "nccl",
        "user_code",
    ),
    (
        "C:\\Users\\Ivs\\.conda\\envs\\svc\\python.exe: Error while finding module specification for '__main__' "
        "(ValueError: __main__.__spec__ is None)",
        "nccl",
        "user_code",
    ),
    # a library's network failure that ends the program: user_code by §9 (no machine suspect)
    (
        "wandb.errors.errors.CommError: Run initialization has timed out after 90.0 sec. Please try increasing the timeout "
        "with the `init_timeout` setting: `wandb.init(settings=wandb.Settings(init_timeout=120))`.",
        "nccl",
        "user_code",
    ),
    (
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded",
        "nccl",
        "user_code",
    ),
]


@pytest.mark.parametrize(("line", "source", "fault"), _FORMS)
def test_each_programs_own_format_is_read(line: str, source: str, fault: str) -> None:
    assert fault in _classes(line, source)


def test_a_network_failure_of_the_jobs_own_fabric_is_not_user_code() -> None:
    # the socket's own error keeps NCCL's class: only an outside service's HTTP failure is the program's
    assert _classes("ConnectionResetError: [Errno 104] Connection reset by peer", "nccl") == {"nccl_error"}
