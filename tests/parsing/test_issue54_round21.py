"""Issue 54 round 21: fresh batches 35-36 mined, each fix by the general property or form that carries,
not by the rows' text (docs/rules.md, round 21); the line model taught by the opened batches holds no
guess against a rule or the exceptions table.

The healthy lines that fired first, each quiet by a property of its own, beside the real fault lines of
the same shape that must still act; then the programs' own formats the misses took. Every line is a corpus
row's (tests/fixtures/log_corpus, with its provenance there) or a rule's example, unless its comment says it
is the same shape with one word changed.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting as _acting
from tests.parsing.line_events import classes as _classes
from tests.parsing.line_events import events as _events

_HEALTHY = [
    # the EFA device refusing an admin command as malformed (EINVAL) after a process ended: the vendor's benign race (fresh35)
    (
        "[298850.919248] efa 0000:a0:1a.0 rdmap160s26: Failed to process command DEREG_MR (opcode 8) comp_status 7 err -22",
        "kernel",
    ),
    # NCCL's WARN that says what it does instead, and goes on (fresh36)
    (
        "[2025-05-12 17:31:38] AIS:2374:2645 [0] graph/search.cc:1127 NCCL WARN Could not find a path for pattern 1, "
        "falling back to simple order",
        "nccl",
    ),
]


@pytest.mark.parametrize(("line", "source"), _HEALTHY)
def test_a_healthy_line_is_quiet_by_its_own_property(line: str, source: str) -> None:
    assert _acting(line, source) == []


_STILL_FAULTS = [
    # the same EFA command failing with EIO (the errno changed: the device did not do it)
    (
        "[298850.919248] efa 0000:a0:1a.0 rdmap160s26: Failed to process command DEREG_MR (opcode 8) comp_status 5 err -5",
        "kernel",
        "nic",
    ),
    # an NCCL WARN that names a CUDA failure, even where it then falls back (the text changed)
    (
        "AIS:2374:2645 [0] graph/search.cc:1127 NCCL WARN Cuda failure 'out of memory', falling back to simple order",
        "nccl",
        "user_code",
    ),
]


@pytest.mark.parametrize(("line", "source", "fault"), _STILL_FAULTS)
def test_the_same_shapes_that_are_faults_still_act(line: str, source: str, fault: str) -> None:
    acting = _acting(line, source)
    assert acting, line
    assert fault in {e.data.get("fault") for e in acting}


_FORMS = [
    # util-linux dmesg with reltime and ctime stamps and the caller id; the iSCSI transport's lines at info (fresh35)
    (
        "kern  :info  : [Jan13 04:31] [Tue Jan 13 04:31:07 2026] [T10489]  connection7:0: detected conn error (1021)",
        "kernel",
        "storage",
    ),
    (
        "kern  :info  : [Jan13 04:33] [Tue Jan 13 04:33:10 2026] [  T129]  session7: session recovery timed out after 120 secs",
        "kernel",
        "storage",
    ),
    (
        "kern  :info  : [  +0.000042] [Tue Jan 13 04:33:10 2026] [T88870] sd 2:0:0:1: Device offlined - not ready after error "
        "recovery",
        "kernel",
        "storage",
    ),
    # FreeBSD's AHCI channel timing out, libceph reaching another cluster, libata's irq_stat alone (fresh35, fresh36)
    ("ahcich4: Timeout on slot 19 port 0", "kernel", "storage"),
    (
        "[36773.569029] libceph: bad fsid, had 3b3d279c-05ec-42e2-ab6e-28adcbfc3ce5 got 2e220e3f-e216-40b2-910d-b8f43d3606af",
        "kernel",
        "storage",
    ),
    ("Jul 10 11:59:05 mgmt kernel: ata1.00: irq_stat 0x40000008", "kernel", "storage"),
    # sched_clock's own line when the TSC is dropped (fresh35)
    ("sched_clock: Marking unstable (26553416234, 4203921)<-(26567277071, -9656937)", "kernel", "clock_skew"),
    # Open MPI's runtime losing a node's daemon (fresh36)
    ("ORTE has lost communication with its daemon located on node:", "nccl", "node_silent"),
    ("node29: ORCM has detected failure of an orcm daemon:", "nccl", "node_silent"),
    # the job's wrong settings and builds, on every machine alike (fresh35)
    (
        "WARN Invalid NCCL_COMM_ID [compute1-st-kaena-training-0-1.pcluster-trn1-24-pdx80-2n.pcluster:41211], please use "
        "format: <ipv4>:<port> or [<ipv6>]:<port>",
        "nccl",
        "user_code",
    ),
    ("NEFF version mismatch supported: 1.1 received: 2.0", "nccl", "user_code"),
    (
        "2024-08-12 18:34:56,116::ERROR: 2024-Aug-12 18:34:56.067150 159612:159612 ERROR  TDRV:generate_custom_notification_msg"
        "        nd0:nc0:h_model.id1107: Received notification generated at runtime: failed to run embedding table update, due "
        "to out-of-bound access.",
        "nccl",
        "user_code",
    ),
    ("19:57:59:WU01:FS01:0x22:ERROR:exception: Illegal value for DeviceIndex: 4", "nccl", "user_code"),
    ("terminate called without an active exception", "nccl", "user_code"),
    # an accelerator runtime's uncorrectable memory error, a fabric manager on another driver version (fresh35, fresh36)
    ("Uncorrectable memory error is detected on Neuron device: 5:1 metadata: 0x2. Failing execution.", "nccl", "gpu_memory"),
    (
        "nv-fabricmanager[3228]: fabric manager NVIDIA GPU driver interface version 530.30.02 don't match with driver version "
        "530.41.03. Please update with matching NVIDIA driver package.",
        "kernel",
        "nvlink",
    ),
    # the clocksource watchdog's older line without a boot stamp (fresh36, relabelled by docs/design.md §9)
    (
        "Clocksource tsc unstable (delta = 92016075 ns).  Enable clocksource failover by adding clocksource_failover kernel "
        "parameter.",
        "kernel",
        "clock_skew",
    ),
]


@pytest.mark.parametrize(("line", "source", "fault"), _FORMS)
def test_each_programs_own_format_is_read(line: str, source: str, fault: str) -> None:
    assert fault in _classes(line, source)


def test_the_reltime_and_ctime_stamps_leave_the_message() -> None:
    from faultlens.parsing.timestamps import split_timestamp

    stamped = split_timestamp(
        "kern  :info  : [Jan13 04:31] [Tue Jan 13 04:31:07 2026] [T10489]  connection7:0: detected conn error (1021)"
    )
    assert stamped.message == "connection7:0: detected conn error (1021)"
    assert stamped.ts is not None


def test_a_resource_exhausted_error_alone_is_recorded_and_with_memory_words_acts() -> None:
    # TensorFlow raises it for a full disk as for full memory: alone it is recorded, not guessed (dev corpus: trainer_storage)
    alone = _events(
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: models/context.model/variables/variables_temp", "nccl"
    )
    assert [(e.data.get("fault"), e.data.get("action")) for e in alone] == [("unknown", "none")]
    oom = "ResourceExhaustedError (see above for traceback): OOM when allocating tensor with shape[256,112,112,64]"
    assert "user_code" in {e.data.get("fault") for e in _acting(oom, "nccl")}


def test_a_daemons_journal_line_in_the_jobs_stream_is_not_guessed() -> None:
    # ceph-osd's line: the kernel stream's rule reads it storage; in the job's stream the model is not asked
    line = (
        "Aug 29 16:05:05 node4 ceph-osd[465565]: 2024-08-29T16:05:05.598+1000 7f71e71648c0 -1 bluefs _allocate failed to "
        "allocate 0x400000 on bdev 1"
    )
    assert _classes(line, "kernel") == {"storage"}
    assert _acting(line, "nccl") == []


def test_a_connection_pools_message_without_its_verdict_is_recorded() -> None:
    # the give-up words decide (docs/design.md §9): without them recorded; with them user_code, rolled back
    alone = _events("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='x', port=443)", "nccl")
    assert [(e.data.get("fault"), e.data.get("action")) for e in alone] == [("unknown", "none")]
    gave_up = "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded"
    assert "user_code" in {e.data.get("fault") for e in _acting(gave_up, "nccl")}
