"""Issue 54, round 35 (fresh74 opened, G18): a NIC or RDMA driver's own report of its failure read by its tag in the
subsystem table (the kernel's RDMA providers and data-centre Ethernet drivers the table lacked: hns3 and its hclge back
end, erdma, qedr, ...) and by the line's own words, which now hear a resource not created in any spelling of not being
able ("Couldn't create") and a driver's failed consistency check ("<value> != expected <value>"); a Fibre Channel HBA's
lost link (qla2xxx's LOOP DOWN, lpfc's Link Down Event) is the storage's.

Every line is written for the test (other addresses, devices and numbers than the corpus rows), beside the healthy
look-alikes each reading must leave alone.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting_verdicts, events, verdicts


def _acting(line: str) -> list[tuple[object, object]]:
    """(fault, action) of each event of a kernel ``line`` that acts."""
    return acting_verdicts(line, "kernel")


@pytest.mark.parametrize(
    "line",
    [
        # a driver the table lacked: its error line had no class and the model read it healthy
        "hns3 0000:bd:00.2 hns_1: check RQ size error!",
        "hns3 0000:35:00.0: Invalid request remote work queue 0x3 error.",
        "hns3 0000:bd:01.1: hclge device re-init failed, VF is disabled!",
        "hclge 0000:7d:00.1: failed to query PF resource, ret = -110",
        "erdma 0000:5e:00.0: failed to create cmdq, ret = -12",
        "qedr 0000:81:00.1: create qp: failed to allocate memory",
        # a known driver's resource not created, in the contracted spelling
        "infiniband irdma3: Couldn't create ib_mad QP0",
        "mlx5_core 0000:c1:00.0: can't create flow table for RDMA RX",
        # a driver's failed consistency check, as an inequality with what it expected
        "bnxt_en 0000:19:00.1 ens2f1np1: TPA start agg_id 7 != expected agg_id 3",
    ],
)
def test_a_nic_drivers_own_failure_is_the_nics(line: str) -> None:
    assert _acting(line) == [("nic", "alert")]


@pytest.mark.parametrize(
    "line",
    [
        "Mar  3 08:14:22 gpu-17 kernel: qla2xxx [0000:d8:00.1]-500b:7: LOOP DOWN detected (2 5 0 0).",
        "qla2xxx [0000:3b:00.0]-500b:2: LOOP DOWN detected (4 8 0 0).",
        "lpfc 0000:af:00.0: 0:1305 Link Down Event x4 received Data: x4 x20 x80110 x0 x0",
        "lpfc 0000:af:00.1: 2:(0):1305 Link Down Event x6 received Data: x6 x20 x800110 x0 x0",
    ],
)
def test_a_fibre_channel_hbas_lost_link_is_the_storages(line: str) -> None:
    assert _acting(line) == [("storage", "alert")]


@pytest.mark.parametrize(
    "line",
    [
        # the same drivers' healthy words: a link up, a reset done, a probe, the RoCE device registered
        "hns3 0000:bd:00.3: Reset done, hclge driver initialization finished.",
        "hns3 0000:bd:00.3 enp189s0f3: link up",
        "hclge 0000:7d:00.1: PF reset done",
        "erdma 0000:5e:00.0: erdma device registered",
        # a loop that came up, an HBA's link up event
        "qla2xxx [0000:3b:00.0]-500a:2: LOOP UP detected (16 Gbps).",
        "lpfc 0000:af:00.0: 0:1303 Link Up Event x5 received Data: x5 x0 x20 x0 x0 x0 0",
        # a value printed beside an expected one with no inequality; an assignment
        "bnxt_en 0000:19:00.1 ens2f1np1: expected ring count 8, using 8",
        "ionic 0000:24:00.0: fw version = expected",
        # a could-not of something no driver needs of its device (a debug file), by a subsystem outside the job
        "usb 3-2: couldn't set up debugfs entry",
    ],
)
def test_look_alikes_stay_quiet(line: str) -> None:
    assert _acting(line) == []


def test_a_fibre_channel_link_lost_at_boot_is_the_machines_record() -> None:
    """A port down while the machine boots (an unused port, no cable yet) is recorded, never an alert on a job."""
    evs = events("[   31.402117] lpfc 0000:af:00.1: 1:1305 Link Down Event x2 received Data: x2 x7 x98014 x0 x0", "kernel")
    assert [(e.data["fault"], e.data["action"]) for e in evs] == [("storage", "none")]


def _job_stream(line: str) -> list[tuple[object, object]]:
    """(fault, action) of every event of ``line`` read in a job's stream."""
    return verdicts(line, "nccl")


@pytest.mark.parametrize(
    "line",
    [
        # a Go daemon's own log (clock, program[pid], level in angle brackets): the storage client states its error level
        "2024/11/02 03:14:15.926535 juicefs[41210] <ERROR>: error: read tcp 10.8.0.12:51022->10.8.0.3:6379: read: connection reset by peer",
        "2024/11/02 03:14:15.926535 juicefs[41210] <ERROR>: write inode 8812: broken pipe",
    ],
)
def test_a_storage_clients_own_error_level_in_its_go_log_is_the_storages(line: str) -> None:
    assert _job_stream(line) == [("storage", "alert")]


@pytest.mark.parametrize(
    "line",
    [
        # the same format's notices and warnings: the level word wins over the guess
        "2024/11/02 03:14:15.926535 juicefs[41210] <INFO>: Ping redis latency: 812.2ms [redis.go:3512]",
        "2024/11/02 03:14:15.926535 juicefs[41210] <WARNING>: AOF is not enabled, you may lose data if Redis is not shutdown properly.",
        "2024/11/02 03:14:15.926535 badger[41210] <INFO>: Block cache metrics: hit: 12 miss: 40 keys-evicted: 3",
    ],
)
def test_the_go_logs_notices_and_warnings_stay_quiet(line: str) -> None:
    assert [a for _, a in _job_stream(line) if a != "none"] == []


def test_the_go_logs_level_and_program_are_read() -> None:
    from faultlens.parsing.severity import level_word
    from faultlens.parsing.timestamps import program_of

    line = "2024/11/02 03:14:15.926535 juicefs[41210] <FATAL>: The mount point is not ready in 10 seconds, exit it"
    assert program_of(line) == "juicefs" and level_word(line) == 2
    # a syslog line keeps its own program; a bracketed word that is no level, or not upper case, is no level
    assert program_of("2024-11-02T03:14:15+00:00 node7 juicefs[41210]: <ERROR>: x") == "juicefs"
    assert level_word("2024/11/02 03:14:15.926535 juicefs[41210] <error>: x") is None
    assert level_word("2024/11/02 03:14:15.926535 juicefs[41210] <Node 3>: x") is None
