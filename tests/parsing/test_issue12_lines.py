"""Lines real clusters print that the parsers must read right (issue 12)."""

from faultlens.parsing.kernel_log import KernelLogParser
from faultlens.parsing.trainer_log import TrainerLogParser


def test_netdev_watchdog_is_a_nic_error_with_driver_and_queue():
    p = KernelLogParser()
    [e] = p.feed("[4567890.112233] NETDEV WATCHDOG: ens7np0 (mlx5_core): transmit queue 5 timed out 5392 ms")
    assert e.kind == "nic_error" and e.data["fault"] == "nic"
    assert (e.data["device"], e.data["driver"], e.data["queue"]) == ("ens7np0", "mlx5_core", 5)
    # another queue of the same hang a moment later is the same report
    assert p.feed("[4567890.212233] NETDEV WATCHDOG: ens7np0 (mlx5_core): transmit queue 6 timed out 5492 ms") == []


def test_management_nic_link_down_names_its_driver():
    [e] = KernelLogParser().feed("[3456789.001200] e1000e 0000:00:1f.6 eno1: NIC Link is Down")
    assert e.kind == "link_down" and (e.data["device"], e.data["driver"]) == ("eno1", "e1000e")
    [m] = KernelLogParser().feed("[1234567.130221] mlx5_core 0000:5e:00.0 ibp94s0: Link down")
    assert m.kind == "link_down" and (m.data["device"], m.data["driver"]) == ("ibp94s0", "mlx5_core")


def test_cuda_out_of_memory_from_user_code_is_user_code():
    [e] = TrainerLogParser().feed("[rank9]: RuntimeError: CUDA error: out of memory")
    assert e.kind == "cuda_error" and (e.data["fault"], e.data["action"]) == ("user_code", "rollback")


def test_the_same_error_a_few_lines_but_hours_apart_is_reported_twice():
    line = "[rank42]: RuntimeError: CUDA error: an illegal memory access was encountered"
    p = TrainerLogParser()
    assert len(p.feed(line, ts=600.0)) == 1
    assert p.feed(line, ts=601.0) == []  # the echo of the same report
    assert len(p.feed(line, ts=10800.0)) == 1  # hours later: a new fault


def test_kernel_echo_folding_is_by_time_too():
    p = KernelLogParser()
    assert len(p.feed("[100.000000] NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=python, GPU has fallen off the bus.")) == 1
    assert p.feed("[100.001000] NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.") == []
    assert len(p.feed("[9100.001000] NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.")) == 1
