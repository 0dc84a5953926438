"""Issue 54, round 37 (fresh76 opened, G20): a node lost under the job in a scheduler's and a cluster manager's words
(slurmctld killing a job on a failed node; pacemaker's fencing daemon that terminated a peer on the controller's
request), the kernel CephFS client's session with a metadata server that stopped answering, and a host firewall's
configuration errors kept off the NIC.

Every line is written for the test (other hosts, ids and times than the corpus rows), beside the healthy look-alikes
each reading must leave alone.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import verdicts


def _read(line: str, source: str = "nccl") -> list[tuple[object, object]]:
    """(fault, action) of each event of ``line`` in ``source``'s stream."""
    return verdicts(line, source)


@pytest.mark.parametrize(
    "line",
    [
        "[2023-05-02T11:07:31.552] error: Killing JobId=7712 on failed node gpu-c14",
        "Killing JobId=901_3(905) on failed node compute-0-7",
        "[2016-02-11T09:14:02] error: Killing job_id 4411 on failed node tux12",
    ],
)
def test_a_job_killed_on_a_failed_node_is_node_silent(line: str) -> None:
    assert ("node_silent", "alert") in _read(line)


@pytest.mark.parametrize(
    "line",
    [
        "[2023-05-02T11:07:31.552] Removing failed node gpu-c14 from JobId=7712",
        "[2023-05-02T11:09:02.001] Killing JobId=7712 on node gpu-c14 at user request",
        "[2023-05-02T11:09:05.114] node gpu-c14 returned to service",
    ],
)
def test_a_node_removed_from_a_surviving_job_or_a_kill_by_request_is_not_node_silent(line: str) -> None:
    assert "node_silent" not in [f for f, _ in _read(line)]


@pytest.mark.parametrize(
    "line",
    [
        "Jun 14 03:02:11 gpu-a02 crmd[1190]:   notice: tengine_stonith_notify: Peer gpu-a05 was terminated (reboot) by "
        "gpu-a02 for gpu-a02: OK (ref=0c3c7a2e-11f0-4b6e-9d1e-5b7f3e2d0a11) by client crmd.1190",
        "Jun 14 03:02:11 gpu-a02 pacemaker-fenced[1187]:  notice: Peer gpu-a05 was terminated (off) by gpu-a03 on behalf "
        "of pacemaker-controld.1191: OK",
    ],
)
def test_a_peer_fenced_on_the_controllers_request_is_node_silent_for_the_record(line: str) -> None:
    # printed at notice (libqb's level word): node_silent kept for the machine's record, never an action
    assert ("node_silent", "none") in _read(line)


@pytest.mark.parametrize(
    "line",
    [
        "Jun 14 03:04:40 gpu-a02 stonith-ng[1187]:   notice: Peer gpu-a05 was terminated (reboot) by gpu-a03 for "
        "gpu-a02: OK (ref=77ad1c90-5e3b-4a55-8f0e-2c9d41b8e6a0) by client stonith_admin.2210",
        "Jun 14 03:04:40 gpu-a02 pacemaker-fenced[1187]:  error: Peer gpu-a05 was not terminated (reboot) by gpu-a03 on "
        "behalf of pacemaker-controld.1191: No route to host",
        "Jun 14 03:04:41 gpu-a02 stonith-ng[1187]:  warning: No match for //@st_delegate in /st-reply",
    ],
)
def test_a_fencing_an_administrator_asked_for_or_that_failed_is_not_node_silent(line: str) -> None:
    assert "node_silent" not in [f for f, _ in _read(line)]


@pytest.mark.parametrize(
    "line",
    [
        "[ 5821.004417] ceph: mds1 caps stale",
        "Feb 02 07:31:09 gpu-d11 kernel: ceph: mds0 hung",
        "[77120.551203] ceph: mds0 closed our session",
        "[77121.002841] ceph: mds2 reconnect denied",
        "<6>[ 5821.004417] ceph: mds1 caps stale",
        "[ 5821.004417] ceph: [3f1c9e2a-7b1d-4c55-9a0e-6d2b1f0c8e77 14202]: mds1 caps stale",
    ],
)
def test_a_cephfs_client_whose_metadata_server_stopped_answering_is_storage(line: str) -> None:
    assert ("storage", "alert") in _read(line, "kernel")


@pytest.mark.parametrize(
    "line",
    [
        "[ 5840.118022] ceph: mds1 caps renewed",
        "[ 5840.118022] ceph: mds1 reconnect success",
        "[ 5840.118022] ceph: mds1 recovery completed",
        "[ 5840.118022] libceph: mon0 (1)10.2.0.11:6789 session established",
    ],
)
def test_a_cephfs_session_renewed_or_reconnected_stays_quiet(line: str) -> None:
    assert _read(line, "kernel") == []


@pytest.mark.parametrize(
    "line",
    [
        "Nov 03 10:12:44 gpu-e07 firewalld: ERROR: UNKNOWN_INTERFACE: 'ens4f1' is not in any zone",
        "Nov 03 10:12:44 gpu-e07 firewalld[1022]: ERROR: INVALID_ZONE: trusted2",
        "Nov 03 10:12:45 gpu-e07 firewalld[1022]: ERROR: COMMAND_FAILED: '/usr/sbin/iptables -w10 -t nat -F' failed",
    ],
)
def test_a_host_firewalls_configuration_error_fires_nothing(line: str) -> None:
    assert all(action == "none" for _, action in _read(line, "kernel"))
    assert "nic" not in [f for f, _ in _read(line, "kernel")]


def test_a_nic_drivers_own_error_keeps_its_class_beside_the_firewall() -> None:
    line = "Nov 03 10:12:46 gpu-e07 kernel: mlx5_core 0000:3b:00.1 ens4f1: Error cqe on cqn 0x40f, ci 0x12, qn 0x8b3"
    assert "nic" in [f for f, _ in _read(line, "kernel")]


@pytest.mark.parametrize(
    ("line", "source"),
    [
        ("HEALTH_WARN 3 OSD(s) experiencing slow operations in BlueStore", "nccl"),
        ("[WRN] BLUESTORE_SLOW_OP_ALERT: 2 OSD(s) experiencing slow operations in BlueStore", "nccl"),
        ("            12 OSD(s) experiencing slow operations in BlueStore", "nccl"),
        ("2024-06-01T10:00:00.000+0000 mon.b (mon.1) 4410 : cluster [WRN] Health check failed: 2 OSD(s) experiencing "
         "slow operations in BlueStore (BLUESTORE_SLOW_OP_ALERT)", "kernel"),
    ],
)
def test_osds_slow_in_bluestore_are_storage(line: str, source: str) -> None:
    assert ("storage", "alert") in _read(line, source)


@pytest.mark.parametrize(
    ("line", "source"),
    [
        ("            0 OSD(s) experiencing slow operations in BlueStore", "nccl"),
        ("2024-06-01T10:04:00.000+0000 mon.b (mon.1) 4415 : cluster [INF] Health check cleared: BLUESTORE_SLOW_OP_ALERT "
         "(was: 2 OSD(s) experiencing slow operations in BlueStore)", "kernel"),
        ("    bluestore_slow_ops_warn_threshold = 5", "nccl"),
    ],
)
def test_bluestores_slow_operations_cleared_counted_none_or_configured_stay_quiet(line: str, source: str) -> None:
    assert all(action == "none" for _, action in _read(line, source))


def _acts(line: str, source: str = "kernel") -> bool:
    """Whether any event of ``line`` asks an action."""
    return any(action != "none" for _, action in _read(line, source))


@pytest.mark.parametrize(
    "line",
    [
        "Warning: Volume check failed but did not find any errors",
        "Warning: Disk check failed but did not detect errors",
    ],
)
def test_a_check_that_says_it_found_no_errors_fires_nothing(line: str) -> None:
    assert not _acts(line)


@pytest.mark.parametrize(
    "line",
    [
        "Mar  3 10:00:00 gpu-f01 kernel: XFS (nvme1n1): metadata check failed: did not find the superblock",
        "Warning: File system check failed, errors detected",
    ],
)
def test_a_check_that_did_not_find_what_it_needed_or_found_errors_still_fires(line: str) -> None:
    assert ("storage", "alert") in _read(line, "kernel")
