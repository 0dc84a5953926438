"""A NIC decaying slowly (diagnosis.peers.net_drift), on hand-written `net`/`sample` events (docs/events.md).

Eight nodes of four HDR rails each, read every 5 s as the agent does: each rail moves a fixed share
of the node's traffic (±4 %, channels are not spread evenly) with ±3 % noise per read, nothing
during checkpoint pauses, and a symbol error an hour in the background.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest

from faultlens.diagnosis.peers.anomaly import PeerAnomalyDetector
from faultlens.diagnosis.peers.net_drift import NetDriftJudge
from faultlens.events.envelope import Envelope, InvalidEvent

T0 = 1767225600.0
JOB = "job-netdrift"
_ids = itertools.count()
NODES, PORTS, DT = 8, 4, 5.0


def _port(dev: str, bytes_s: float, symbol: int, rcv: int) -> dict:
    return {"device": dev, "port": 1, "link_layer": "InfiniBand", "state": "ACTIVE", "phys_state": "LinkUp",
            "rate_gbps": 200.0, "netdev": "ib" + dev[-1],
            "rates": {"rx_bytes": bytes_s / 2, "tx_bytes": bytes_s / 2, "symbol_error": symbol / DT,
                      "port_rcv_errors": rcv / DT},
            "deltas": {"rx_bytes": int(bytes_s / 2 * DT), "tx_bytes": int(bytes_s / 2 * DT), "symbol_error": symbol,
                       "port_rcv_errors": rcv, "link_downed": 0, "link_error_recovery": 0}}


def _poisson(rng: random.Random, lam: float) -> int:
    # Knuth's method: the rates here are small.
    k, p, limit = 0, 1.0, math.exp(-lam)
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def _events(minutes: int, seed: int, decay: tuple[str, int, float] | None = None, errors: float = 1.2,
            fall: float = 0.2):
    """``decay=(node, port, onset_s)``: errors climb to ``errors``/s and the share falls ``fall`` over 30 min."""
    rng = random.Random(seed)
    shares = {(n, p): 1 + rng.gauss(0, 0.04) for n in range(NODES) for p in range(PORTS)}
    for k in range(int(minutes * 60 / DT)):
        t = k * DT
        busy = 0.0 if t % 600 < 30 else 1.0  # a checkpoint save every 10 minutes moves nothing
        for n in range(NODES):
            node = f"n{n:03d}"
            ports = []
            for p in range(PORTS):
                s = min(1.0, max(0.0, (t - decay[2]) / 1800)) if decay and (node, p) == decay[:2] else 0.0
                traffic = 3e9 * busy * shares[(n, p)] * (1 - fall * s) * (1 + 0.03 * rng.gauss(0, 1))
                ports.append(_port(f"mlx5_{p}", max(0.0, traffic), _poisson(rng, DT / 3600 + errors * s * DT),
                                   _poisson(rng, errors / 4 * s * DT)))
            yield Envelope(ts=T0 + t, job=JOB, node=node, source="net", kind="sample", id=f"nd{next(_ids)}",
                           data={"interval_s": DT, "ports": ports})


def _run(minutes: int, seed: int, decay=None, **kw):
    det = PeerAnomalyDetector(10.0, drift=True)
    return [f for e in _events(minutes, seed, decay, **kw) for f in det.observe_net(e)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_healthy_rails_raise_nothing(seed):
    assert _run(60, seed) == []


def test_a_port_whose_errors_climb_while_its_traffic_falls_is_an_alert_naming_it():
    found = _run(60, 4, decay=("n005", 2, 1320.0))
    assert found, "the decay went unseen"
    [f] = found
    assert (f.fault, f.action, f.nodes, f.entity) == ("nic", "alert", ("n005",), "drift:mlx5_2/1")
    assert "physical-layer errors" in f.detail and "share of the node's traffic fell" in f.detail
    # Seen within 15 minutes, while the errors are still a fraction of the rule's burst threshold.
    assert T0 + 1320 < f.ts <= T0 + 1320 + 900


def test_errors_alone_or_a_traffic_shift_alone_are_no_decay():
    # Errors climbing on a port that still carries its share (a noisy but working link), or a rail
    # whose share moves with no error (NCCL rebalancing channels): neither is the joint signature.
    assert _run(60, 4, decay=("n005", 2, 1320.0), fall=0.0) == []
    assert _run(60, 4, decay=("n005", 2, 1320.0), errors=0.0) == []
    # and with the peer model off nothing reads the counters for drifts at all
    assert [f for e in _events(60, 4, ("n005", 2, 1320.0)) for f in PeerAnomalyDetector(10.0).observe_net(e)] == []


def test_a_sample_without_ports_is_a_clear_error():
    bad = Envelope(ts=T0, job=JOB, node="n000", source="net", kind="sample", id="bad", data={"interval_s": 5.0})
    with pytest.raises(InvalidEvent):
        NetDriftJudge().observe(bad)
