"""Issue 54 round 26: fresh batches 45-46 mined, each fix by the general property or form that carries,
not by the rows' text (docs/rules.md, round 26).

No healthy line of the two batches fired, so the look-alikes here are the same programs' healthy lines
beside each new form (they must stay quiet); then the programs' own formats the misses took, each read
in a shape other than the row's (another host, device, version, component or wording the same program
prints). Every line is a corpus row's (tests/fixtures/log_corpus, with its provenance there), a public
file's from the search index (its id in the comment) or a rule's example, unless its comment says it is
the same shape with a word changed.
"""

from __future__ import annotations

import pytest

from faultlens.parsing.registry import parser_for
from tests.parsing.line_events import acting as _acting
from tests.parsing.line_events import classes as _classes
from tests.parsing.line_events import events

_HEALTHY = [
    # the NVIDIA installer's warning that an optional module is left out: the driver itself loads (fresh45)
    ("WARNING: The nvidia-drm module will not be installed. As a result, DRM-KMS", "nccl"),
    # libnvidia-container loading the module at its info level, beside the installer's failure to (fresh45)
    ("I1123 07:34:52.457483 21157 nvc.c:278] loading kernel module nvidia", "nccl"),
    # the raylet's own info and warning lines behind the same '(raylet)' component prefix (fresh45)
    ("[2022-04-12 09:34:39,077 I 74 74] (raylet) io_service_pool.cc:35: IOServicePool is running with 1 io_service.", "nccl"),
    (
        "[2022-04-12 09:34:52,472 W 74 97] (raylet) metric_exporter.cc:206: [1] Export metrics to agent failed: GrpcUnknown: "
        "RPC Error message: Method not found!; RPC Error details: . This won't affect Ray, but you can lose metrics from the cluster.",
        "nccl",
    ),
    # the driver's banner as it loads, and the mismatch record's second line alone (the client's line decides)
    ("[    3.100000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  515.48.07  Fri May 27 10:31:31 UTC 2022", "kernel"),
    ("[ 7386.259800] NVRM: this kernel module has the version 510.73.05.  Please", "kernel"),
    # slurmd's warning on the way to the count line (index id 69393319938)
    ("slurmd.log: warning: Ignoring file-less GPU gpu:orin from final GRES list", "nccl"),
]


@pytest.mark.parametrize(("line", "source"), _HEALTHY)
def test_a_healthy_line_beside_a_new_form_is_quiet(line: str, source: str) -> None:
    assert _acting(line, source) == []


_FORMS = [
    # the NVIDIA installer unable to load what it built: older installers pad the level (index id 56837817153),
    # another module's file (the module changed), newer installers' wording without the file
    (
        "ERROR:  Unable to load the kernel module 'nvidia.ko'.  This is most likely because",
        "nccl",
        "gpu_lost",
    ),
    ("ERROR: Unable to load the kernel module 'nvidia-drm.ko'.  This happens most", "nccl", "gpu_lost"),
    ("ERROR: Unable to load the 'nvidia-drm' kernel module.", "nccl", "gpu_lost"),
    # Slurm's reason for a node whose GPUs did not register: scontrol's one-line form (index id 70931040414), sinfo's
    # reason column (index id 69393319938); slurmd refusing a missing device file (the device changed)
    (
        "NodeName=n1 State=DOWN+DRAIN+INVALID_REG Partitions=gpu Reason=gres/gpu count reported lower than configured "
        "(3 < 4) [slurm@2026-07-28T17:13:24]",
        "nccl",
        "gpu_lost",
    ),
    ("orin  inval  gres/gpu count reported lower than configured (0 < 1)", "nccl", "gpu_lost"),
    (
        "Mar 11 04:20:31 gpu-07 slurmd[2210]: slurmd: fatal: can't stat gres.conf file /dev/nvidia3: No such file or directory",
        "nccl",
        "gpu_lost",
    ),
    # the raylet's fatal line behind the component prefix, in newer releases' wording (the time, pids and line changed)
    (
        "[2023-05-01 10:00:00,000 C 1234 1234] (raylet) node_manager.cc:1020: [Timeout] Exiting because this node manager "
        "has mistakenly been marked as dead by the GCS: GCS failed to check the health of this node for 5 times.",
        "nccl",
        "node_silent",
    ),
    # Ray's C++ terminate handler, another component, exception type and what() (the same shape, words changed)
    (
        "[2024-01-10 08:00:00,123 E 812 901] (gcs_server) logging.cc:97: Unhandled exception: St12system_error. "
        "what(): Resource temporarily unavailable",
        "nccl",
        "user_code",
    ),
    # NCCL relaying the driver's failure to unmap a buffer object, the pair of the fresh46 row's 205 (host, pid changed)
    (
        "[2026-08-24 18:02:11] gpu-node-3:5120:5120 [1] allocator.cc:112 (ncclMemFree) NCCL WARN Cuda failure 206 "
        "'unmapping of buffer object failed'",
        "nccl",
        "cuda_error",
    ),
]


@pytest.mark.parametrize(("line", "source", "fault"), _FORMS)
def test_each_programs_own_format_is_read(line: str, source: str, fault: str) -> None:
    assert fault in _classes(line, source), line
    assert _acting(line, source), line


def test_the_kernel_modules_version_mismatch_record_is_read_by_its_client_line() -> None:
    # the driver's four-line record with the newer drivers' client name (index id 68568832715, its two lines as
    # NVRM prints them, a dmesg stamp added): gpu_lost by its first line, alerted
    p = parser_for("kernel")
    record = [
        "[ 8120.500100] NVRM: API mismatch: the client 'gnome-shell' has the version 595.58.03,",
        "[ 8120.500110] NVRM: but this kernel module has the version 595.91.07",
    ]
    got = [e for line in record for e in p.feed(line)] + p.flush()
    assert {e.data.get("fault") for e in got} == {"gpu_lost"}
    assert [e.data.get("action") for e in got] == ["alert"]


def test_nccls_own_codes_stay_its_own() -> None:
    # NCCL's CUDACHECK of a call's misuse stays nccl_error beside the driver's 205/206 (the fresh46 row, code changed)
    line = "[2026-08-24 17:57:25] host-a:2274:2274 [0] allocator.cc:89 (ncclMemAlloc) NCCL WARN Cuda failure 1 'invalid argument'"
    assert _classes(line, "nccl") == {"nccl_error"}


def test_slurms_rule_takes_only_the_gpus_device_files() -> None:
    # a gres file that is not a GPU's (the fresh45 row's shape, the device changed to a Xeon Phi's): no rule claims
    # it as the GPUs'; the line model, retrained with the fresh45 row, reads it gpu_lost (an alert at most, as every
    # model event: slurmd not starting is a person's matter either way)
    line = "slurmd: fatal: can't stat gres.conf file /dev/mic0: No such file or directory"
    assert [e for e in events(line, "nccl") if e.data.get("rule") not in (None, "model")] == []
    assert {e.data.get("action") for e in events(line, "nccl")} <= {"alert"}
