"""The network collector on a sysfs tree laid out as a ConnectX host's (tests/fixtures/sysfs_connectx)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from faultlens.collectors.net_counters import (
    counter_delta,
    parse_ethtool_stats,
    parse_rate,
    parse_state,
    read_snapshot,
    sample_data,
)
from faultlens.collectors.net_sampler import Ethtool, NetSampler, NetUnavailable
from faultlens.events.envelope import Envelope
from faultlens.events.payloads import check_payload
from tests.progress import wait_until

FIXTURE = Path(__file__).parent.parent / "fixtures" / "sysfs_connectx"
ETHTOOL_TEXT = (FIXTURE / "ethtool_S_ens5f0np0.txt").read_text()


@pytest.fixture
def sysfs(tmp_path) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(FIXTURE / "class", root / "class")
    return root


def counter(root: Path, dev: str, name: str, value: int | str, where: str = "counters") -> None:
    (root / "class/infiniband" / dev / "ports/1" / where / name).write_text(f"{value}\n")


def bump(root: Path, dev: str, name: str, by: int, where: str = "counters") -> None:
    path = root / "class/infiniband" / dev / "ports/1" / where / name
    path.write_text(f"{int(path.read_text()) + by}\n")


def ports(data) -> dict:
    return {p["device"]: p for p in data["ports"]}


def test_kernel_formats_parse():
    assert parse_state("4: ACTIVE") == "ACTIVE"
    assert parse_state("1: DOWN\n".strip()) == "DOWN"
    assert parse_state("5: LinkUp") == "LinkUp"
    assert parse_state("2: Polling") == "Polling"
    assert parse_state(None) is None and parse_state("") is None
    assert parse_rate("200 Gb/sec (4X HDR)") == 200.0
    assert parse_rate("400 Gb/sec (4X NDR)") == 400.0
    assert parse_rate("2.5 Gb/sec (1X SDR)") == 2.5
    assert parse_rate("garbage") is None and parse_rate(None) is None


def test_snapshot_reads_every_port_of_the_host(sysfs):
    snap = read_snapshot(sysfs, 100.0)
    by = {p.device: p for p in snap.ports}
    assert sorted(by) == ["mlx5_0", "mlx5_1", "mlx5_2"]
    ib = by["mlx5_0"]
    assert (ib.port, ib.state, ib.phys_state, ib.rate_gbps, ib.link_layer, ib.netdev) == \
        (1, "ACTIVE", "LinkUp", 200.0, "InfiniBand", "ib0")
    assert ib.counters["port_rcv_data"] == 93405812948201 and ib.counters["link_downed"] == 1
    assert ib.counters["np_cnp_sent"] is None  # an IB port has no RoCE congestion counters: null
    roce = by["mlx5_2"]
    assert roce.link_layer == "Ethernet" and roce.netdev == "ens5f0np0" and roce.rate_gbps == 100.0
    assert roce.counters["np_cnp_sent"] == 48213 and roce.counters["rp_cnp_handled"] == 51096


def test_first_sample_has_state_but_no_rates(sysfs):
    data = sample_data(None, read_snapshot(sysfs, 100.0))
    p = ports(data)["mlx5_0"]
    assert data["interval_s"] == 0.0
    assert p["state"] == "ACTIVE" and p["rates"]["rx_bytes"] is None and p["deltas"]["symbol_error"] is None


def test_rates_and_deltas_between_two_reads(sysfs):
    first = read_snapshot(sysfs, 100.0)
    bump(sysfs, "mlx5_0", "port_rcv_data", 5_000_000_000)  # 4-byte words: 20 GB
    bump(sysfs, "mlx5_0", "port_xmit_data", 2_500_000_000)
    bump(sysfs, "mlx5_0", "symbol_error", 7)
    bump(sysfs, "mlx5_0", "port_xmit_wait", 1_000_000)
    bump(sysfs, "mlx5_2", "np_cnp_sent", 300, "hw_counters")
    data = sample_data(first, read_snapshot(sysfs, 110.0))
    assert data["interval_s"] == 10.0
    p = ports(data)["mlx5_0"]
    assert p["deltas"]["rx_bytes"] == 20_000_000_000 and p["rates"]["rx_bytes"] == 2_000_000_000.0
    assert p["rates"]["tx_bytes"] == 1_000_000_000.0
    assert "port_rcv_data" not in p["deltas"]  # published in bytes only
    assert p["deltas"]["symbol_error"] == 7 and p["deltas"]["link_downed"] == 0
    assert p["rates"]["port_xmit_wait"] == 100_000.0
    assert ports(data)["mlx5_2"]["deltas"]["np_cnp_sent"] == 300
    assert ports(data)["mlx5_1"]["deltas"]["rx_bytes"] == 0
    check_payload(Envelope(ts=1.767e9, job="j", node="n", source="net", kind="sample", data=data))


def test_a_32_bit_counter_that_wraps_gives_the_true_increase(sysfs):
    counter(sysfs, "mlx5_2", "port_xmit_wait", 2**32 - 1000)
    counter(sysfs, "mlx5_2", "out_of_sequence", 2**32 - 5, "hw_counters")
    first = read_snapshot(sysfs, 0.0)
    counter(sysfs, "mlx5_2", "port_xmit_wait", 500)
    counter(sysfs, "mlx5_2", "out_of_sequence", 3, "hw_counters")
    p = ports(sample_data(first, read_snapshot(sysfs, 5.0)))["mlx5_2"]
    assert p["deltas"]["port_xmit_wait"] == 1500
    assert p["deltas"]["out_of_sequence"] == 8


def test_32_bit_data_counters_wrap_64_bit_ones_reset(sysfs):
    # An HCA without PortCountersExtended: 32-bit data words.
    counter(sysfs, "mlx5_2", "port_rcv_data", 2**32 - 100)
    first = read_snapshot(sysfs, 0.0)
    counter(sysfs, "mlx5_2", "port_rcv_data", 900)
    counter(sysfs, "mlx5_0", "port_rcv_data", 12)  # a 64-bit counter going backwards: a reset
    data = sample_data(first, read_snapshot(sysfs, 5.0))
    assert ports(data)["mlx5_2"]["deltas"]["rx_bytes"] == 4 * 1000
    assert ports(data)["mlx5_0"]["deltas"]["rx_bytes"] is None and ports(data)["mlx5_0"]["rates"]["rx_bytes"] is None


def test_a_reset_is_null_never_a_huge_number(sysfs):
    first = read_snapshot(sysfs, 0.0)
    for name in ("link_downed", "port_rcv_errors", "port_xmit_packets"):
        counter(sysfs, "mlx5_1", name, 0)
    counter(sysfs, "mlx5_1", "symbol_error", 0)
    p = ports(sample_data(first, read_snapshot(sysfs, 5.0)))["mlx5_1"]
    assert p["deltas"]["port_rcv_errors"] is None and p["deltas"]["symbol_error"] is None
    assert p["deltas"]["port_xmit_packets"] is None
    assert p["deltas"]["link_downed"] == 0  # it was 0 before and is 0 now


def test_a_saturated_error_counter_is_null(sysfs):
    counter(sysfs, "mlx5_1", "symbol_error", 65530)
    first = read_snapshot(sysfs, 0.0)
    counter(sysfs, "mlx5_1", "symbol_error", 65535)  # 16 bits, pegged: the real increase is unknown
    assert ports(sample_data(first, read_snapshot(sysfs, 5.0)))["mlx5_1"]["deltas"]["symbol_error"] is None


def test_missing_files_and_garbage_are_null(sysfs):
    (sysfs / "class/infiniband/mlx5_1/ports/1/counters/symbol_error").unlink()
    (sysfs / "class/infiniband/mlx5_1/ports/1/rate").unlink()
    counter(sysfs, "mlx5_1", "port_rcv_errors", "not a number")
    p = ports(sample_data(None, read_snapshot(sysfs, 0.0)))["mlx5_1"]
    assert p["rate_gbps"] is None and p["deltas"]["symbol_error"] is None and p["deltas"]["port_rcv_errors"] is None


def test_a_device_that_vanishes_is_reported_null(sysfs):
    first = read_snapshot(sysfs, 0.0)
    shutil.rmtree(sysfs / "class/infiniband/mlx5_1")
    data = sample_data(first, read_snapshot(sysfs, 5.0))
    gone = ports(data)["mlx5_1"]
    assert gone["state"] is None and gone["rates"]["rx_bytes"] is None and gone["deltas"]["link_downed"] is None
    assert ports(data)["mlx5_0"]["state"] == "ACTIVE"


def test_a_port_going_down_is_seen(sysfs):
    first = read_snapshot(sysfs, 0.0)
    (sysfs / "class/infiniband/mlx5_0/ports/1/state").write_text("1: DOWN\n")
    (sysfs / "class/infiniband/mlx5_0/ports/1/phys_state").write_text("2: Polling\n")
    bump(sysfs, "mlx5_0", "link_downed", 1)
    p = ports(sample_data(first, read_snapshot(sysfs, 5.0)))["mlx5_0"]
    assert (p["state"], p["phys_state"], p["deltas"]["link_downed"]) == ("DOWN", "Polling", 1)


def test_no_rdma_devices_is_an_empty_snapshot(tmp_path):
    assert read_snapshot(tmp_path, 0.0).ports == ()


def test_ethtool_output_parses():
    stats = parse_ethtool_stats(ETHTOOL_TEXT)
    assert stats["rx_vport_rdma_unicast_bytes"] == 51336211822 and stats["link_down_events_phy"] == 1
    assert "NIC statistics" not in stats and stats["rx_prio3_pause"] == 0
    assert parse_ethtool_stats("garbage\n  : 3\n  a b: 4\n x: y\n") == {}


def test_ethtool_stats_join_ethernet_ports_only(sysfs):
    asked = []

    def ethtool(netdev):
        asked.append(netdev)
        return parse_ethtool_stats(ETHTOOL_TEXT)

    first = read_snapshot(sysfs, 0.0, ethtool)
    text = ETHTOOL_TEXT.replace("rx_crc_errors_phy: 0", "rx_crc_errors_phy: 41")
    data = sample_data(first, read_snapshot(sysfs, 5.0, lambda n: parse_ethtool_stats(text)))
    assert asked == ["ens5f0np0"]  # never ib0 / ib1
    p = ports(data)["mlx5_2"]
    assert p["deltas"]["rx_crc_errors_phy"] == 41 and p["deltas"]["rx_vport_rdma_unicast_bytes"] == 0
    assert "rx_crc_errors_phy" not in ports(data)["mlx5_0"]["deltas"]


def test_absent_ethtool_is_skipped():
    tool = Ethtool(binary="ethtool-that-does-not-exist")
    assert tool("ens5f0np0") is None


def test_sampler_publishes_net_samples(sysfs):
    out: list[Envelope] = []
    wall, mono = iter([1767225600.0, 1767225605.0]), iter([50.0, 55.0])
    sampler = NetSampler(job="j", node="n1", interval_s=5.0, publish=out.append, sysfs_root=sysfs,
                         ethtool=lambda n: None, clock=lambda: next(wall), mono=lambda: next(mono))
    sampler.sample_once()
    bump(sysfs, "mlx5_1", "port_xmit_data", 250)
    ev = sampler.sample_once()
    assert (ev.source, ev.kind, ev.node, ev.ts) == ("net", "sample", "n1", 1767225605.0)
    assert ev.data["interval_s"] == 5.0 and ports(ev.data)["mlx5_1"]["rates"]["tx_bytes"] == 200.0


def test_sampler_without_rdma_devices_is_unavailable(tmp_path):
    sampler = NetSampler(job="j", node="n1", interval_s=5.0, publish=lambda e: None, sysfs_root=tmp_path)
    with pytest.raises(NetUnavailable, match="no RDMA device"):
        sampler.run(threading.Event())


def test_the_agent_runs_the_net_source_on_a_connectx_tree(sysfs, tmp_path):
    from faultlens.collectors.agent import Agent, AgentConfig
    from faultlens.collectors.spool import Spool
    from faultlens.events.envelope import decode
    from faultlens.streams.config import KafkaSettings

    config = AgentConfig(job="j", node="n1", heartbeat_interval_s=0.05, nvml=False, kernel=False,
                         net_interval_s=0.05, sysfs_root=str(sysfs), spool_dir=tmp_path / "spool", create_topics=False)
    # Port 1: nothing listens, so everything lands in the spool where the test can read it.
    agent = Agent(config, KafkaSettings(bootstrap="127.0.0.1:1"))
    sampler = agent.source("net")
    sampler.ethtool = lambda netdev: None  # no ethtool subprocess in a unit test
    agent.start()
    try:
        # Waited for while the agent moves (samples taken, records spooled), not a fixed 20 s (issue 47).
        wait_until(lambda: sampler.samples >= 3, progress=lambda: (sampler.samples, len(agent.spool)), stall_s=60,
                   limit_s=240, what="3 net samples", poll_s=0.05, explain=lambda: str(agent.statuses()))
        statuses = agent.statuses()
    finally:
        agent.stop()
    assert statuses["net"] == "ok"
    events = [decode(r.value) for r in Spool(tmp_path / "spool", 1 << 20).peek(10_000)]
    samples = [e for e in events if e.source == "net"]
    assert len(samples) >= 3
    for e in samples:
        check_payload(e)
    assert {p["device"] for p in samples[-1].data["ports"]} == {"mlx5_0", "mlx5_1", "mlx5_2"}
    assert ports(samples[-1].data)["mlx5_0"]["deltas"]["rx_bytes"] == 0  # a copied tree: nothing moves


def test_the_agent_shows_net_off_on_a_node_without_rdma(tmp_path):
    from faultlens.collectors.agent import Agent, AgentConfig
    from faultlens.streams.config import KafkaSettings

    config = AgentConfig(job="j", node="n1", nvml=False, kernel=False, sysfs_root=str(tmp_path),
                         spool_dir=tmp_path / "spool", create_topics=False)
    agent = Agent(config, KafkaSettings(bootstrap="127.0.0.1:1")).start()
    try:
        wait_until(lambda: agent.statuses()["net"].startswith("unavailable"),
                   progress=lambda: (len(agent.spool), agent.statuses()["net"]), stall_s=60, limit_s=240,
                   what="the net source to say unavailable", poll_s=0.05, explain=lambda: str(agent.statuses()))
        status = agent.statuses()["net"]
    finally:
        agent.stop()
    assert status.startswith("unavailable: no RDMA device")


def test_a_reset_that_looks_like_a_wrap_but_exceeds_the_link_is_null(sysfs):
    # A young 64-bit counter (still under 2^32) reset to zero looks like a 32-bit wrap; read 0.1 s
    # later, that wrap would mean 8.6 GB in 0.1 s, more than a 200 Gb/s link carries.
    counter(sysfs, "mlx5_0", "port_rcv_data", 2**31 + 5)
    first = read_snapshot(sysfs, 0.0)
    counter(sysfs, "mlx5_0", "port_rcv_data", 7)
    assert ports(sample_data(first, read_snapshot(sysfs, 0.1)))["mlx5_0"]["deltas"]["rx_bytes"] is None
    assert counter_delta("port_rcv_data", 2**31 + 5, 7) == 2**32 - 2**31 + 2  # without a link rate: a wrap
