"""The parsers read every fault line the simulator writes (simulator/lines.py) as the fault it injects."""

from __future__ import annotations

import pytest

from faultlens.parsing.kernel_log import KernelLogParser
from faultlens.parsing.trainer_log import TrainerLogParser

L = pytest.importorskip("faultlens.simulator.lines")
PCI = "0000:3b:00"
TS = 1795342272.0


def _parse(parser, lines):
    out = []
    for line in lines:
        out += parser.feed(line)
    return out + parser.flush()


@pytest.mark.parametrize("code", sorted(L.XID_TEXT))
def test_every_simulated_xid(code):
    events = _parse(KernelLogParser(), [L.dmesg(100.5, L.xid(PCI, code))])
    assert len(events) == 1
    e = events[0]
    assert e.data["xid"] == code and e.data["pci"] == PCI and e.mono == pytest.approx(100.5)
    assert e.kind == ("gpu_lost" if code == 79 else "xid")


@pytest.mark.parametrize(
    "lines, kinds",
    [
        ([L.xid(PCI, 79), L.gpu_fell_off_bus(PCI), L.gpu_crash_dump()], ["gpu_lost"]),
        ([L.mlx5_module_event("0000:5e:00.0")], ["link_down"]),
        ([L.mlx5_link("0000:5e:00.0", "ibp94s0", False), L.mlx5_link("0000:5e:00.0", "ibp94s0", True)], ["link_down", "link_up"]),
        ([L.oom_invoked(), L.oom_killed(4321)], ["oom_kill"]),
        ([L.soft_lockup(3, 22, 77)], ["soft_lockup"]),
        (L.hung_task(55), ["hung_task"]),
        # The oops that opens the simulated crash is the event; its panic folds into it.
        (L.kernel_panic(), ["kernel_oops"]),
    ],
)
def test_simulated_kernel_faults(lines, kinds):
    assert [e.kind for e in _parse(KernelLogParser(), lines)] == kinds


def test_simulated_watchdog_lines_carry_rank_seq_and_progress():
    events = _parse(TrainerLogParser(), [
        L.watchdog_timeout(3, TS, 11, 100, "ALLREDUCE", 600000, 600100),
        L.watchdog_exception(3, TS, 11, 101, 101, 99),
    ])
    assert [(e.kind, e.data["rank"], e.data["seq"]) for e in events] == [("nccl_timeout", 3, 100), ("nccl_timeout", 3, 101)]
    assert events[0].data["elapsed_ms"] == 600100 and events[1].data["last_completed"] == 99
    assert events[0].ts == pytest.approx(TS, abs=1e-3)


def test_simulated_nccl_errors():
    events = _parse(TrainerLogParser(), [L.nccl_ib_completion_error("n1", 1, 2, 3, "10.0.0.2", 4000)] + L.nccl_remote_error(4))
    assert [e.kind for e in events] == ["nccl_warn", "nccl_error"]
    assert events[0].data["ib_error"] == 12 and events[0].data["rank"] is None
    assert events[1].data["rank"] == 4
    reset = _parse(TrainerLogParser(), [L.nccl_connection_reset("n1", 1, 2, 3, "n2", 4000)])
    assert [(e.kind, e.data["severity"]) for e in reset] == [("nccl_warn", "error")]


def test_simulated_cuda_error_is_one_event_with_the_rank():
    events = _parse(TrainerLogParser(), L.cuda_error(5, TS, 11))
    assert [(e.kind, e.data["rank"], e.data["fault"]) for e in events] == [("cuda_error", 5, "cuda_error")]


def test_simulated_user_code_and_nan():
    e = _parse(TrainerLogParser(), L.user_code_traceback(6))
    assert [(x.kind, x.data["rank"], x.data["user_code"], x.data["type"]) for x in e] == [("exception", 6, True, "KeyError")]
    n = _parse(TrainerLogParser(), [L.nan_warning(7, 100)])
    assert [(x.kind, x.data["rank"], x.data["step"]) for x in n] == [("nan", 7, 100)]


def test_simulated_benign_lines_say_nothing():
    lines = [L.nccl_init_complete("n1", 1, 2, 3, 8), L.nccl_ib_using("n1", 1, 2)]
    assert _parse(TrainerLogParser(), lines) == []


def test_torchrun_worker_killed_is_recorded_as_host_memory_but_acts_on_nothing():
    # Exit -9 is SIGKILL, most often the OOM killer; the kernel's OOM record (or the rank's own
    # error) is the evidence, so the agent's echo is recorded and asks for nothing.
    [e] = _parse(TrainerLogParser(), [L.torchrun_worker_failed(TS, 2, 3, -9)])
    assert (e.kind, e.data["fault"], e.data["action"], e.data["exitcode"]) == ("worker_failed", "host_oom", "none", -9)
    [e] = _parse(TrainerLogParser(), [L.torchrun_worker_failed(TS, 2, 3, 1)])
    assert (e.data["fault"], e.data["action"]) == ("unknown", "none")
