"""Issue 54, round 36 (fresh75 opened, G19): a cluster manager's verdict that a member was lost, read by the form
cluster.member_failed already reads for the gossip layers (a member named, then the verdict): corosync's totem protocol
that saw a processor fail, kronosnet's peer left with no active link, pacemaker's peer whose state is now lost and its
fencing of a node no longer part of the cluster; and a GPU's memory exhausted in plain words with the device after the
memory ("ran out of memory on the GPU").

Every line is written for the test (other hosts, ids and times than the corpus rows), beside the healthy look-alikes
each reading must leave alone.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import events, verdicts


def _read(line: str) -> list[tuple[object, object]]:
    """(fault, action) of each event of a job-stream ``line``."""
    return verdicts(line, "nccl")


@pytest.mark.parametrize(
    "line",
    [
        "Mar  4 02:11:07 gpu-a03 corosync[2210]:  [TOTEM ] A processor failed, forming new configuration.",
        "corosync[877]: [TOTEM ] A processor failed, forming new configuration: token timed out (3000ms)",
        "Mar  4 02:11:07 gpu-a03 corosync[2210]:  [KNET  ] host: host: 3 has no active links",
        "Mar  4 02:11:31 gpu-a03 pacemaker-schedulerd[2301]: warning: Cluster node gpu-a07 will be fenced: peer is no "
        "longer part of the cluster",
    ],
)
def test_a_cluster_managers_lost_member_alerts_node_silent(line: str) -> None:
    assert _read(line) == [("node_silent", "alert")]


@pytest.mark.parametrize(
    "line",
    [
        "Mar  4 02:11:30 gpu-a03 pacemaker-controld[2305]:  notice: Node gpu-a07 state is now lost",
        "Mar  4 02:11:30 gpu-a03 pacemaker-fenced[2299]:  notice: crm_update_peer_proc: Node gpu-a07[7] - state is now "
        "lost (was member)",
    ],
)
def test_a_lost_member_at_notice_is_node_silent_recorded(line: str) -> None:
    # the line's own level (notice) keeps the class for the record and never acts (docs/design.md)
    assert [f for f, _ in _read(line)] == ["node_silent"]
    assert all(a in (None, "none") for _, a in _read(line))


@pytest.mark.parametrize(
    "line",
    [
        "Mar  4 02:12:40 gpu-a03 corosync[2210]:  [TOTEM ] A new membership (1.2c4) was formed. Members joined: 7",
        "Mar  4 02:12:40 gpu-a03 corosync[2210]:  [KNET  ] rx: host: 7 link: 0 is up",
        "Mar  4 02:12:40 gpu-a03 corosync[2210]:  [CFG   ] Node 7 was shut down by sysadmin",
        "Mar  4 02:12:41 gpu-a03 pacemaker-controld[2305]:  notice: Node gpu-a07 state is now member",
        "Mar  4 02:12:41 gpu-a03 corosync[2210]:  [QUORUM] Members[3]: 1 3 7",
        "Mar  4 02:12:45 gpu-a03 pacemaker-schedulerd[2301]: warning: Cluster node gpu-a07 will be fenced: termination "
        "was requested",
    ],
)
def test_members_that_joined_came_up_or_were_shut_down_are_not_node_silent(line: str) -> None:
    assert ("node_silent", "alert") not in _read(line)
    assert "node_silent" not in [f for f, _ in _read(line)]


@pytest.mark.parametrize(
    "line",
    [
        "Error: you ran out of memory on the GPU(s).",
        "ERROR: ran out of memory on GPU 2 while allocating the projector",
        "The run went out of memory on the GPUs.",
    ],
)
def test_a_gpus_memory_exhausted_with_the_device_after_the_memory_is_user_code(line: str) -> None:
    # the runtime's out-of-memory in plain words: the job is rolled back, as CUDA's own "out of memory" is
    assert _read(line) == [("user_code", "rollback")]


@pytest.mark.parametrize(
    "line",
    [
        "If you run out of memory on the GPU, lower the batch size.",
        "To avoid running out of memory on the GPU use --pool 1",
        "Relion: you may run out of memory on the GPU(s) with this box size",
    ],
)
def test_advice_or_a_hedge_about_the_gpus_memory_is_not_read(line: str) -> None:
    assert ("user_code", "rollback") not in _read(line)


@pytest.mark.parametrize(
    ("line", "source"),
    [
        ("2025-01-14T09:02:11.508Z|00042|dpdk|WARN|ice_interrupt_handler(): OICR: MDD event", "nccl"),
        ("[DPDK| -- ] WARN  (00007fa1c2bfe700) i40e_handle_mdd_event(): TX driver issue detected on PF", "nccl"),
        ("i40e 0000:af:00.0: Malicious Driver Detection event 0x02 on TX queue 7 PF number 0x01 VF number 0x00", "kernel"),
    ],
)
def test_a_nics_malicious_driver_detection_is_the_nics(line: str, source: str) -> None:
    assert ("nic", "alert") in [(e.data["fault"], e.data["action"]) for e in events(line, source)]


@pytest.mark.parametrize(
    "line",
    [
        "ethtool --set-priv-flags ens1f0 mdd-auto-reset-vf on",
        "Private flags for ens1f0: mdd-auto-reset-vf: on",
    ],
)
def test_a_nics_malicious_driver_detection_settings_are_not_read(line: str) -> None:
    assert "nic" not in [e.data["fault"] for e in events(line, "kernel")]


def test_a_checksum_that_did_not_match_by_its_crc_name_is_an_error_of_the_storage() -> None:
    line = "libceph: osd7 (1)10.2.0.9:6812 bad crc/signature"
    assert [(e.data["fault"], e.data["action"]) for e in events(line, "kernel")] == [("storage", "alert")]


@pytest.mark.parametrize(
    "line",
    [
        "Btrfs loaded, crc32c=crc32c-intel, zoned=yes, fsverity=yes",
        "libceph: loaded (mon/osd proto 15/24)",
        "crc32c_intel: module verification failed: signature and/or required key missing - tainting kernel",
    ],
)
def test_a_crcs_name_alone_is_no_error_of_the_storage(line: str) -> None:
    assert "storage" not in [e.data["fault"] for e in events(line, "kernel")]
