"""The simulator's RDMA port counters (`net`/`sample`) and the network faults it injects."""

from __future__ import annotations

import statistics

import pytest

from faultlens.events.payloads import check_payload
from faultlens.simulator import SimConfig, simulate
from faultlens.simulator.faults import NIC_VARIANTS
from faultlens.simulator.plan import FaultPlan

CFG = SimConfig(nodes=8, gpus=4, seed=5, job="job-sim-net")
ONSET = {v: 150.0 + 200.0 * i for i, v in enumerate(NIC_VARIANTS)}
NODE = {v: f"n{i + 1:03d}" for i, v in enumerate(NIC_VARIANTS)}


@pytest.fixture(scope="module")
def net_trace():
    plan = FaultPlan()
    for v in NIC_VARIANTS:
        plan.fail_at("nic", node=NODE[v], t=ONSET[v], detail=v)
    run = simulate(CFG, plan, duration=1800)
    events = list(run.events())
    return events, run.labels


def nets(events, node=None, t0=0.0, t1=1e9):
    start = CFG.start_ts
    return [e for e in events if e.source == "net" and (node is None or e.node == node)
            and start + t0 <= e.ts < start + t1]


def port(e, dev):
    return next(p for p in e.data["ports"] if p["device"] == dev)


def rail_rate(e, dev):
    p = port(e, dev)
    return (p["rates"]["rx_bytes"] or 0.0) + (p["rates"]["tx_bytes"] or 0.0)


def test_every_node_samples_every_port_every_interval(net_trace):
    events, _ = net_trace
    samples = nets(events, t0=0, t1=100)
    assert len(samples) == CFG.nodes * 20
    for e in samples:
        check_payload(e)
        assert [p["device"] for p in e.data["ports"]] == [f"mlx5_{i}" for i in range(CFG.gpus)]
        p = e.data["ports"][0]
        assert (p["link_layer"], p["state"], p["rate_gbps"], p["netdev"]) == ("InfiniBand", "ACTIVE", 200.0, "ib0")
        assert p["deltas"]["np_cnp_sent"] is None  # InfiniBand: no RoCE congestion counters
    first = nets(events, "n000")[0]
    assert first.data["interval_s"] == 0.0 and port(first, "mlx5_0")["rates"]["rx_bytes"] is None


def test_traffic_follows_the_steps_and_pauses_with_them(net_trace):
    events, _ = net_trace
    rates = [rail_rate(e, "mlx5_0") for e in nets(events, "n000", 20, 140)]
    busy = [r for r in rates if r > 0]
    assert len(busy) > len(rates) // 2 and min(busy) > 1e9
    assert max(busy) > 2 * min(busy)  # all-reduce vs compute phases of a step
    assert 0.0 in rates  # a checkpoint pause moves nothing (every node at once)
    quiet_ts = {e.ts for e in nets(events, t0=20, t1=140) if rail_rate(e, "mlx5_0") == 0.0}
    assert all(len([e for e in nets(events) if e.ts == ts and rail_rate(e, "mlx5_0") == 0.0]) >= CFG.nodes - 1
               for ts in quiet_ts)


def test_rails_and_nodes_differ_a_little(net_trace):
    events, _ = net_trace
    at = [e for e in nets(events, t0=100, t1=140) if rail_rate(e, "mlx5_0") > 0][:CFG.nodes]
    values = [rail_rate(e, d) for e in at for d in ("mlx5_0", "mlx5_1")]
    assert len(set(values)) == len(values)
    assert max(values) < 1.4 * min(values)


def test_background_errors_are_rare(net_trace):
    events, labels = net_trace
    faulty = {label["nodes"][0] for label in labels}
    deltas = [p["deltas"]["symbol_error"] or 0 for e in nets(events) if e.node not in faulty for p in e.data["ports"]]
    assert sum(1 for d in deltas if d) < 0.01 * len(deltas)


def test_kernel_flaps_show_in_the_counters(net_trace):
    events, _ = net_trace
    node, t = NODE["kernel_flap"], ONSET["kernel_flap"]
    downs = [e for e in events if e.node == node and e.source == "kernel" and e.data["line"].endswith("Link down")]
    counted = sum(port(e, "mlx5_0")["deltas"]["link_downed"] or 0 for e in nets(events, node, t, t + 120))
    assert len(downs) == counted >= 2
    assert any(port(e, "mlx5_0")["state"] == "DOWN" for e in nets(events, node, t, t + 120))


def test_counter_flaps_have_no_kernel_line(net_trace):
    events, labels = net_trace
    node, t = NODE["counter_flap"], ONSET["counter_flap"]
    label = next(entry for entry in labels if entry["detail"].startswith("counter_flap"))
    dev = label["detail"].split(" on ")[1].split()[0]
    assert sum(port(e, dev)["deltas"]["link_downed"] or 0 for e in nets(events, node, t, t + 120)) >= 2
    assert not [e for e in events if e.node == node and e.source == "kernel" and t <= e.ts - CFG.start_ts < t + 120]


def test_error_burst_and_degrading_link(net_trace):
    events, labels = net_trace
    burst = next(label for label in labels if label["detail"].startswith("error_burst"))
    dev = burst["detail"].split(" on ")[1].split()[0]
    t = ONSET["error_burst"]
    errors = sum(port(e, dev)["deltas"]["symbol_error"] or 0 for e in nets(events, NODE["error_burst"], t, t + 90))
    assert errors > 1000
    assert port(nets(events, NODE["error_burst"], t + 30, t + 40)[0], dev)["state"] == "ACTIVE"
    slow = next(label for label in labels if label["detail"].startswith("degrading"))
    dev = slow["detail"].split(" on ")[1].split()[0]
    t, node = ONSET["degrading"], NODE["degrading"]
    early, late = nets(events, node, t, t + 120), nets(events, node, t + 400, t + 520)
    err = [sum(port(e, dev)["deltas"]["symbol_error"] or 0 for e in w) for w in (early, late)]
    share = [statistics.fmean(rail_rate(e, dev) / max(1.0, statistics.fmean(rail_rate(e, d) for d in
             (f"mlx5_{i}" for i in range(CFG.gpus)))) for e in w if rail_rate(e, dev) > 0) for w in (early, late)]
    assert err[1] > 5 * max(1, err[0]) and share[1] < 0.6 * share[0]


def test_rail_drop_moves_the_share_to_the_other_rails(net_trace):
    events, labels = net_trace
    label = next(entry for entry in labels if entry["detail"].startswith("rail_drop"))
    dev = label["detail"].split(": ")[1].split()[0]
    t, node = ONSET["rail_drop"], NODE["rail_drop"]
    during = [e for e in nets(events, node, t + 10, t + 100) if rail_rate(e, "mlx5_0" if dev != "mlx5_0" else "mlx5_1")]
    assert during and all(rail_rate(e, dev) == 0.0 and port(e, dev)["state"] == "ACTIVE" for e in during)
    assert sum(port(e, dev)["deltas"]["local_ack_timeout_err"] or 0 for e in during) > 0


def test_labels_name_the_nic_class_and_variant(net_trace):
    _, labels = net_trace
    assert [label["fault"] for label in labels] == ["nic"] * len(NIC_VARIANTS)
    assert {label["detail"].split(":")[0].split()[0] for label in labels} >= {"counter_flap", "error_burst", "degrading",
                                                                      "rail_drop"}
    with pytest.raises(ValueError, match="unknown variant"):
        list(simulate(CFG, FaultPlan().fail_at("nic", node="n001", t=10, detail="bogus"), duration=30).events())


def test_net_telemetry_can_be_switched_off_without_moving_other_events():
    plan = FaultPlan().fail_at("gpu_memory", node="n002", t=60)
    on = [e for e in simulate(CFG, plan, duration=200).events() if e.source != "net"]
    off = list(simulate(SimConfig(**{**CFG.__dict__, "net_interval_s": 0.0}), plan, duration=200).events())
    assert not [e for e in off if e.source == "net"]
    # Event ids (and so the order of simultaneous events) differ; what each node says does not.
    def said(events):
        return sorted((e.ts, e.source, e.kind, e.node, repr(e.data)) for e in events)

    assert said(on) == said(off)
