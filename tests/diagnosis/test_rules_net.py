"""Network counter rules on hand-written `net`/`sample` events (docs/events.md, source `net`)."""

from __future__ import annotations

import itertools

import pytest

from faultlens.diagnosis.engine.core import Engine
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.peers.net_traffic import NetTraffic, annotate
from faultlens.diagnosis.rules.net_counters import NetCounterRule
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.topology import Topology

T0 = 1767225600.0
JOB = "job-net"
_ids = itertools.count()
GBps = 1e9


def port(dev="mlx5_0", state="ACTIVE", traffic=12 * GBps, **deltas):
    """One ports entry as the agent writes it; ``deltas`` are counter increments of a 5 s interval."""
    rates = {"rx_bytes": traffic / 2, "tx_bytes": traffic / 2}
    counts = {"rx_bytes": int(traffic / 2 * 5), "tx_bytes": int(traffic / 2 * 5), "symbol_error": 0,
              "link_downed": 0, "port_rcv_errors": 0, "link_error_recovery": 0, "port_xmit_wait": 0,
              "local_ack_timeout_err": 0}
    counts.update(deltas)
    rates.update({k: v / 5 for k, v in deltas.items() if v is not None})
    return {"device": dev, "port": 1, "link_layer": "InfiniBand", "state": state,
            "phys_state": "LinkUp" if state == "ACTIVE" else "Polling", "rate_gbps": 200.0,
            "netdev": "ib" + dev[-1], "rates": rates, "deltas": counts}


def net(t, node="n0", ports=None, job=JOB):
    return Envelope(ts=T0 + t, job=job, node=node, source="net", kind="sample", id=f"net{next(_ids)}",
                    data={"interval_s": 5.0, "ports": ports if ports is not None else [port()]})


def healthy(t, node="n0"):
    return net(t, node, [port("mlx5_0"), port("mlx5_1")])


# --- flaps --------------------------------------------------------------------------------------
def test_one_flap_is_tolerated_two_evict():
    rule = NetCounterRule()
    found = []
    for t in range(0, 100, 5):
        found += rule.observe(healthy(t))
    found += rule.observe(net(100, ports=[port("mlx5_0", state="DOWN", traffic=0, link_downed=1), port("mlx5_1")]))
    for t in range(105, 200, 5):
        found += rule.observe(healthy(t))
    assert found == []  # one flap, came back: tolerated
    found += rule.observe(net(200, ports=[port("mlx5_0", link_downed=1), port("mlx5_1")]))  # down and up between reads
    assert [(f.fault, f.action, f.nodes) for f in found] == [("nic", "evict", ("n0",))]
    assert "2 link-down events" in found[0].detail and "mlx5_0/1" in found[0].detail
    assert found[0].onset == T0 + 100 and len(found[0].evidence) == 2



def _flaps(rule, samples):
    """Feed ``(t, state, link_downed)`` readings of port mlx5_0 (mlx5_1 healthy) to ``rule``."""
    found = []
    for t, state, downed in samples:
        found += rule.observe(net(t, ports=[port("mlx5_0", state=state, traffic=0 if state != "ACTIVE" else 12 * GBps,
                                                  link_downed=downed), port("mlx5_1")]))
    return found


@pytest.mark.parametrize("readings", [
    [("DOWN", 0), ("DOWN", 1), ("ACTIVE", 0)],    # the counter a sample behind the state (an 18 s flap)
    [("DOWN", 0), ("ACTIVE", 1)],                  # ... caught up when the port is back
    [("DOWN", 1), ("DOWN", 0), ("ACTIVE", 0)],    # both at once
    [("DOWN", None), ("DOWN", None), ("ACTIVE", None)],  # no counter: the state alone
])
def test_one_outage_counts_once_however_many_samples_see_it(readings):
    rule = NetCounterRule()
    found = _flaps(rule, [(0, "ACTIVE", 0)] + [(10 * (i + 1), s, d) for i, (s, d) in enumerate(readings)])
    assert found == []
    # ... and still counts: a second flap (down and up between two reads) is the eviction.
    [f] = _flaps(rule, [(100, "ACTIVE", 0), (110, "ACTIVE", 1)])
    assert (f.action, f.entity, f.rule_id) == ("evict", "nic", "net")
    assert "2 link-down events" in f.detail and "mlx5_0/1 (ib0)" in f.detail


def test_a_late_increment_past_the_outage_is_a_new_flap():
    # The credit of an outage the state counted lasts to the first sample that finds the port ACTIVE
    # again: an increment after that is another flap, and two in 300 s evict.
    rule = NetCounterRule()
    [f] = _flaps(rule, [(0, "ACTIVE", 0), (10, "DOWN", 0), (20, "ACTIVE", 0), (30, "ACTIVE", 1)])
    assert f.action == "evict" and f.onset == T0 + 10


def test_two_increments_while_down_are_a_second_flap():
    rule = NetCounterRule()
    [f] = _flaps(rule, [(0, "ACTIVE", 0), (10, "DOWN", 0), (20, "DOWN", 2)])
    assert f.action == "evict" and "2 link-down events" in f.detail


def test_a_vanished_port_that_comes_back_counted_is_one_outage():
    rule = NetCounterRule()
    gone = {"device": "mlx5_0", "port": 1, "link_layer": None, "state": None, "phys_state": None, "rate_gbps": None,
            "netdev": None, "rates": {"rx_bytes": None}, "deltas": {"rx_bytes": None, "link_downed": None}}
    found = rule.observe(net(0))
    found += rule.observe(net(10, ports=[gone]))
    found += rule.observe(net(20, ports=[port(link_downed=1)]))
    assert found == []

def test_flaps_far_apart_are_not_a_fault():
    rule = NetCounterRule()
    found = rule.observe(net(0, ports=[port(link_downed=1)]))
    found += rule.observe(net(400, ports=[port(link_downed=1)]))
    assert found == []


def test_state_change_counts_when_the_counter_is_unknown():
    rule = NetCounterRule()
    rule.observe(net(0))
    found = rule.observe(net(5, ports=[port(state="DOWN", traffic=0, link_downed=None)]))
    found += rule.observe(net(10, ports=[port()]))
    found += rule.observe(net(15, ports=[port(state="INIT", traffic=0, link_downed=None)]))
    assert [f.action for f in found] == ["evict"]


def test_a_port_never_active_says_nothing():
    rule = NetCounterRule()
    found = []
    for t in range(0, 200, 5):
        found += rule.observe(net(t, ports=[port("mlx5_0"), port("mlx5_3", state="DOWN", traffic=0)]))
    assert found == []


def test_a_port_that_stays_down_is_a_dead_rail():
    rule = NetCounterRule()
    rule.observe(net(0))
    found = []
    for t in range(5, 70, 5):
        found += rule.observe(net(t, ports=[port(state="DOWN", traffic=0, link_downed=1 if t == 5 else 0)]))
    assert [(f.action, f.entity) for f in found] == [("evict", "net:down:mlx5_0/1")]
    assert "for 60s" in found[0].detail and found[0].onset == T0 + 5


def test_a_vanished_device_counts_as_down():
    rule = NetCounterRule()
    rule.observe(net(0))
    gone = {"device": "mlx5_0", "port": 1, "link_layer": None, "state": None, "phys_state": None, "rate_gbps": None,
            "netdev": None, "rates": {"rx_bytes": None}, "deltas": {"rx_bytes": None, "link_downed": None}}
    found = []
    for t in range(5, 70, 5):
        found += rule.observe(net(t, ports=[gone]))
    assert [f.action for f in found] == ["evict"] and "gone" in found[0].detail


# --- error bursts -------------------------------------------------------------------------------
def test_background_errors_never_burst():
    rule = NetCounterRule()
    found = []
    for t in range(0, 3600, 5):
        found += rule.observe(net(t, ports=[port(symbol_error=1 if t % 300 == 0 else 0)]))
    assert found == []


def test_one_burst_alerts_a_second_evicts():
    rule = NetCounterRule()
    found = []
    for t in range(0, 60, 5):
        found += rule.observe(net(t, ports=[port(symbol_error=15)]))  # 180 in a minute
    assert [f.action for f in found] == ["alert"] and "symbol_error +1" in found[0].detail
    for t in range(60, 130, 5):
        found += rule.observe(net(t, ports=[port(symbol_error=15)]))
    assert [f.action for f in found] == ["alert", "evict"]
    assert found[1].entity != found[0].entity  # dedup must not fold the eviction into the alert
    assert "2 error bursts" in found[1].detail


def test_an_overwhelming_burst_evicts_at_once():
    rule = NetCounterRule()
    found = rule.observe(net(0, ports=[port(port_rcv_errors=900, link_error_recovery=3)]))
    assert [f.action for f in found] == ["evict"] and "port_rcv_errors +900" in found[0].detail


def test_garbage_ports_is_a_dead_letter():
    with pytest.raises(InvalidEvent, match="ports"):
        NetCounterRule().observe(Envelope(ts=T0, job=JOB, node="n0", source="net", kind="sample", data={}))


# --- rails across nodes -------------------------------------------------------------------------
NODES = [f"n{i}" for i in range(4)]


def fleet(t, low=None, low_port=None, node_ports=2, nodes=NODES):
    """A sample from every node; ``low`` node's mlx5_1 carries nothing (with ``low_port`` deltas)."""
    out = []
    for n in nodes:
        ports = [port("mlx5_0")] + [port(f"mlx5_{i}") for i in range(1, node_ports)]
        if n == low:
            ports[1] = port("mlx5_1", traffic=0.0, **(low_port or {}))
        out.append(net(t, n, ports))
    return out


def test_a_silent_rail_alone_is_an_alert_not_an_eviction():
    traffic = NetTraffic()
    found = [f for t in range(0, 60, 5) for e in fleet(t, low="n2") for f in traffic.observe(e)]
    assert [(f.action, f.nodes) for f in found] == [("alert", ("n2",))]
    assert "mlx5_1/1" in found[0].detail and "no eviction" in found[0].detail


@pytest.mark.parametrize("size", [4, 24])  # a small job compares exactly, a big one with a shared median
def test_a_silent_rail_with_transport_errors_evicts(size):
    traffic = NetTraffic()
    nodes = [f"n{i}" for i in range(size)]
    found = [f for t in range(0, 60, 5) for e in fleet(t, low="n2", low_port={"local_ack_timeout_err": 4}, nodes=nodes)
             for f in traffic.observe(e)]
    assert [(f.fault, f.action, f.nodes) for f in found] == [("nic", "evict", ("n2",))]
    assert "transport errors rose" in found[0].detail and found[0].evidence


def test_every_rail_quiet_together_is_no_rail_fault():
    traffic = NetTraffic()
    found = []
    for t in range(0, 120, 5):
        for n in NODES:
            found += traffic.observe(net(t, n, [port("mlx5_0", traffic=0.0), port("mlx5_1", traffic=0.0)]))
    assert found == []


def test_job_silence_is_hang_evidence_only_when_every_node_is_quiet():
    traffic = NetTraffic()
    for t in range(0, 60, 5):
        for e in fleet(t):
            traffic.observe(e)
    assert traffic.job_silence(JOB, since=T0 + 60) is None
    for t in range(60, 180, 5):
        for n in NODES:
            traffic.observe(net(t, n, [port("mlx5_0", traffic=0.0)]))
    quiet, why, ids = traffic.job_silence(JOB, since=T0 + 100)
    assert quiet == T0 + 55 and "whole job is near zero" in why and len(ids) == 4
    hang = Diagnosis(job=JOB, ts=T0 + 180, onset=T0 + 56, fault="job_hang", action="reattempt", nodes=tuple(NODES),
                     confidence=0.2, detail="stalled 124s; no culprit")
    noted = annotate(traffic, hang)
    assert noted.action == "reattempt" and noted.confidence == 0.2  # evidence, never a conviction
    assert "network: RDMA traffic" in noted.detail and set(ids) <= set(noted.evidence)


def test_congestion_is_named_in_a_fail_slow_verdict():
    traffic = NetTraffic()
    for t in range(0, 120, 5):
        for n in NODES:
            hot = n == "n1" and t >= 60
            traffic.observe(net(t, n, [port("mlx5_0", port_xmit_wait=5_000_000 if hot else 10_000,
                                            rp_cnp_handled=4000 if hot else 0)]))
    verdict = Diagnosis(job=JOB, ts=T0 + 120, onset=T0 + 70, fault="fail_slow", action="evict", nodes=("n1",),
                        confidence=0.8, detail="5 stack rounds")
    noted = annotate(traffic, verdict)
    assert "network congestion on n1" in noted.detail and noted.action == "evict"
    calm = annotate(traffic, Diagnosis(job=JOB, ts=T0 + 50, onset=T0 + 10, fault="fail_slow", action="alert",
                                       nodes=("n2",), confidence=0.5, detail="slow"))
    assert calm.detail == "slow"


def _link_down_line(t: float, node: str) -> Envelope:
    """mlx5's kernel line of a flap of ib0 (the netdev of mlx5_0/1), a second before the sample counts it."""
    return Envelope(ts=T0 + t - 1, job=JOB, node=node, source="kernel", kind="link_down", id=f"k{node}{t}",
                    data={"device": "ib0", "port": None, "state": "down", "driver": "mlx5_core", "fault": "nic",
                          "action": "evict", "line": "mlx5_core 0000:c1:00.0 ib0: Link down"})


@pytest.mark.parametrize("logged", [False, True])
def test_engine_turns_counter_flaps_into_one_nic_diagnosis(logged):
    # Logged too: the kernel rule and the port counters both evict n3, and the two are one verdict (they
    # share the entity dedup folds by), not one per rule.
    topo = Topology.grid(NODES, 2, 2, 2, 2).to_event(JOB, T0)
    events = [topo]
    for t in range(0, 300, 5):
        for e in fleet(t):
            if e.node == "n3" and t in (100, 170):
                events += [_link_down_line(t, "n3")] if logged else []
                e = net(t, "n3", [port("mlx5_0", link_downed=1), port("mlx5_1")])
            events.append(e)
    diags = analyze(events, Engine())
    nic = [d for d in diags if d.fault == "nic"]
    assert [(d.action, d.nodes) for d in nic] == [("evict", ("n3",))]
    assert not [d for d in diags if d.action not in ("none",) and d.fault != "nic"]


@pytest.mark.parametrize("data, field", [
    ({"interval_s": 5.0, "ports": "mlx5_0"}, "data.ports"),
    ({"interval_s": 5.0, "ports": [dict(port(), deltas={"symbol_error": -5})]}, "data.ports"),
    ({"interval_s": 5.0, "ports": [dict(port(), rates={"rx_bytes": "fast"})]}, "data.ports"),
    ({"interval_s": 5.0, "ports": [dict(port(), rates={"rx_bytes": float("nan")})]}, "data.ports"),
    ({"interval_s": 5.0, "ports": [dict(port(), rates={"tx_bytes": float("inf")})]}, "data.ports"),
    ({"interval_s": 5.0, "ports": [dict(port(), deltas={"link_downed": True})]}, "data.ports"),
    ({"interval_s": 5.0, "ports": [dict(port(), deltas={"symbol_error": 1.5})]}, "data.ports"),
    ({"interval_s": -1.0, "ports": []}, "data.interval_s"),
])
def test_malformed_net_samples_are_dead_letters_with_the_field(data, field):
    dead = []
    bad = Envelope(ts=T0, job=JOB, node="n0", source="net", kind="sample", data=data)
    analyze([bad, healthy(5)], Engine(), on_dead=lambda e, why: dead.append(why))
    assert len(dead) == 1 and dead[0].startswith(field)
