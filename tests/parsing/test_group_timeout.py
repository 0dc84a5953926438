"""A barrier, rendezvous or collective among a job's tasks or ranks that did not complete in time
(parsing.group_timeout): each form on a line written here, beside the healthy look-alike its guard is for."""

from __future__ import annotations

import pytest

from faultlens.parsing.group_timeout import late_group
from faultlens.parsing.registry import parser_for


def _events(line: str) -> list[tuple[str, str, str | None]]:
    parser = parser_for("nccl")
    events = list(parser.feed(line)) + parser.flush()
    return [(e.data.get("fault"), e.data.get("action"), e.data.get("error")) for e in events]


@pytest.mark.parametrize(
    ("line", "look_alike"),
    [
        # a barrier's status code and its own words; not the barrier's timeout as a setting
        (
            "jax.errors.JaxRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: sync_checkpoint_12. Timed out task names: /job:jax_worker/task:3",
            "I1201 10:00:00.000000 1 coordination_service.cc:210] Barrier sync_checkpoint_12 passed by all 8 tasks, barrier_timeout=300s",
        ),
        # a collective executor aborting at its deadline; not the deadline a collective was given
        (
            "2026-12-01 10:00:00.000001: E tensorflow/core/common_runtime/base_collective_executor.cc:249] BaseCollectiveExecutor::StartAbort DEADLINE_EXCEEDED: Deadline Exceeded",
            "2026-12-01 10:00:00.000001: W tensorflow/core/common_runtime/collective_param_resolver.cc:90] collective deadline set to 600 s for group 1",
        ),
        # a rendezvous of tasks that timed out; not one that completed without timing out
        (
            "E1201 10:00:00 rendezvous.cc:412] Rendezvous of 16 tasks timed out after 600 s: tasks 3 and 7 never joined",
            "W1201 10:00:00 rendezvous.cc:398] Rendezvous of 16 tasks completed in 599 s, close to its timeout but not timed out",
        ),
        # a named collective among ranks whose timeout has expired; not a broadcast outside a group of ranks
        (
            "coll_sched.c:88  COLL  WARN  timeout 30 sec has expired on task 0x7f00, team id 2 size 8 rank 5: Allreduce Host bytes=4096",
            "dhclient[812]: DHCPDISCOVER broadcast on eth0 timed out, retrying in 4 seconds",
        ),
    ],
)
def test_a_group_that_timed_out_is_an_nccl_alert_and_its_look_alike_is_not(line: str, look_alike: str) -> None:
    assert late_group(line)
    assert ("nccl_error", "alert", "group_timeout") in _events(line)
    assert not late_group(look_alike)
    assert not [e for e in _events(look_alike) if e[2] == "group_timeout"]


def test_torchs_watchdog_keeps_its_own_reading() -> None:
    """The watchdog's collective timeout is read first, with its work and a reattempt, as before."""
    line = "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600031 milliseconds before timing out."
    assert _events(line) == [("nccl_error", "reattempt", None)]
