"""The typed read of a NIC port sample (events.net_reading) gives what the general decoding and
the payload check give: the same data, and the same verdict (dead-letter reason) on odd input."""

import json
import random

import orjson
import pytest

from faultlens.events.envelope import Envelope, InvalidEvent, decode, encode
from faultlens.events.net_reading import CheckedPorts, decode_net_message
from faultlens.events.payloads import check_payload
from tests.events.damaged import damaged

T = 1_790_000_000.0

# sysfs counters/ and hw_counters/ of a ConnectX-6 HDR port (mlx5_ib), data counters in bytes.
IB_COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
               "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
               "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
               "excessive_buffer_overrun_errors", "VL15_dropped", "port_xmit_wait", "rx_bytes", "tx_bytes",
               "port_rcv_packets", "port_xmit_packets", "unicast_rcv_packets", "unicast_xmit_packets",
               "out_of_sequence", "out_of_buffer", "packet_seq_err", "local_ack_timeout_err",
               "implied_nak_seq_err", "rnr_nak_retry_err", "req_cqe_error", "resp_cqe_error", "duplicate_request",
               "np_cnp_sent", "rp_cnp_handled")
# A ConnectX-6 Dx RoCE port adds `ethtool -S` statistics under ethtool's names.
ROCE_EXTRA = ("rx_vport_rdma_unicast_bytes", "tx_vport_rdma_unicast_bytes", "rx_crc_errors_phy", "rx_symbol_err_phy",
              "rx_pcs_symbol_err_phy", "link_down_events_phy", "rx_discards_phy", "tx_pause_ctrl_phy",
              "rx_prio3_pause", "np_ecn_marked_roce_packets", "roce_adp_retrans", "roce_slow_restart")


def _port(device: str = "mlx5_0", netdev: str | None = "ib0", *, roce: bool = False, **over) -> dict:
    """One entry of ``ports`` as collectors/net_counters.port_payload writes it over a 2.0 s interval."""
    names = IB_COUNTERS + (ROCE_EXTRA if roce else ())
    deltas = {name: 0 for name in names}
    deltas.update(rx_bytes=48_215_441_408, tx_bytes=48_190_007_296, port_rcv_packets=11_771_352,
                  port_xmit_packets=11_765_143, port_xmit_wait=1_083_270, unicast_rcv_packets=11_771_352,
                  unicast_xmit_packets=11_765_143, VL15_dropped=None)
    rates = {name: None if d is None else 0.0 if d == 0 else round(d / 2.0, 3) for name, d in deltas.items()}
    p = {"device": device, "port": 1, "link_layer": "Ethernet" if roce else "InfiniBand", "state": "ACTIVE",
         "phys_state": "LinkUp", "rate_gbps": 200.0 if roce else 200, "netdev": netdev, "rates": rates,
         "deltas": deltas}
    p.update(over)
    return p


def _ports() -> list:
    return [_port("mlx5_0", "ib0"), _port("mlx5_1", "ib1"), _port("mlx5_2", "ens5f0np0", roce=True),
            _port("mlx5_3", None, state="DOWN", phys_state="Disabled", rate_gbps=None,
                  rates={n: None for n in IB_COUNTERS}, deltas={n: None for n in IB_COUNTERS})]


def _message(ports, *, envelope: dict | None = None, **data) -> bytes:
    # As an agent writes it (compact UTF-8); the json module also writes integers past 64 bits.
    return json.dumps({"v": 1, "id": "n1", "ts": T, "job": "llm", "node": "dgx-a17", "source": "net",
                       "kind": "sample", "data": {"interval_s": 2.0, "ports": ports, **data}, **(envelope or {})},
                      ensure_ascii=False, separators=(",", ":")).encode()


def _verdict(event: Envelope) -> str | None:
    try:
        check_payload(event)
    except InvalidEvent as exc:
        return str(exc)
    return None


def _outcome(read, raw):
    try:
        event = read(raw)
    except InvalidEvent as exc:
        return ("invalid", str(exc))
    return ("ok", event.id, event.ts, event.node, event.data, _verdict(event))


def test_a_plain_sample_reads_as_the_general_decoding_does():
    raw = _message(_ports())
    typed, general = decode_net_message(raw), decode(raw)
    assert type(typed.data["ports"]) is CheckedPorts and type(general.data["ports"]) is list
    assert typed == general  # the same envelope, the same dicts: the rules read them unchanged
    assert all(type(p) is dict and type(p["rates"]) is dict for p in typed.data["ports"])
    assert _verdict(typed) is None and _verdict(general) is None
    assert orjson.loads(encode(typed)) == orjson.loads(raw)  # a re-encoding loses nothing


def test_checked_ports_are_not_checked_again(monkeypatch):
    from faultlens.events import payloads
    typed = decode_net_message(_message(_ports()))
    monkeypatch.setattr(payloads, "convert", lambda *a: pytest.fail("checked twice"))
    assert _verdict(typed) is None


@pytest.mark.parametrize("raw", [
    _message(_ports(), interval_s=0.0),  # the first sample after the agent started
    _message([_port(rates={**_port()["rates"], "port_xmit_wait": 2**63 + 5})]),  # a counter past int64
    _message([_port(deltas={**_port()["deltas"], "rx_prio5_pause": 2**64 - 1})]),  # a counter the driver added
    _message([_port(rate_gbps=1e308)]),
    _message([]),
    _message(_ports(), envelope={"ts": 1_790_000_000}),  # an integer time
])
def test_unusual_but_valid_samples_are_kept(raw):
    typed, general = decode_net_message(raw), decode(raw)
    assert typed == general and _verdict(typed) is None


def _with(ports_over=None, **port_over) -> bytes:
    p = _port(**port_over)
    if ports_over:
        p = {**p, **ports_over}
    return _message([_port("mlx5_1"), p])


def _counter(where: str, name: str, value) -> bytes:
    p = _port()
    p[where] = {**p[where], name: value}
    return _message([p])


BAD_OR_ODD = [
    _counter("deltas", "symbol_error", -1),
    _counter("rates", "rx_bytes", -0.5),
    _counter("deltas", "link_downed", 1.0),  # a delta counts increments
    _counter("deltas", "link_downed", True),
    _counter("rates", "tx_bytes", "nan"),
    _counter("rates", "tx_bytes", "Infinity"),
    _counter("rates", "tx_bytes", [1]),
    _counter("deltas", "port_rcv_errors", 10**30),  # past uint64: orjson reads a float
    _counter("deltas", "port_rcv_errors", 2**64),
    _counter("rates", "port_rcv_errors", 10**30),  # a float to orjson, which a rate may be
    _counter("deltas", "rx_prio3_pause", -7),  # a counter no rule reads is checked all the same
    _with(port=-1),
    _with(port="1"),
    _with(port=1.0),
    _with(rate_gbps=-200),
    _with(rate_gbps="200 Gb/sec (4X HDR)"),
    _with(state=4),
    _with(device=["mlx5_0"]),
    _with(netdev=False),
    _with(rates=[1, 2]),
    _with(deltas="0"),
    _with(rates=None, deltas=None),
    _with({"lid": 17, "sm_lid": 1}),  # port keys the docs do not name
    _with({"fw_ver": "20.39.1002"}),
    _message([{k: v for k, v in _port().items() if k != "netdev"}]),  # a key left out
    _message([{k: v for k, v in _port().items() if k != "deltas"}]),
    _message([_port(), None]),
    _message([_port(), "mlx5_1"]),
    _message(_ports(), interval_s=-2.0),
    _message(_ports(), interval_s=None),
    _message(_ports(), interval_s="2s"),
    _message(_ports(), agent="0.4.1"),  # a payload key the typed read does not know
    _message(_ports(), envelope={"trace": "x"}),  # an envelope key it does not know
    _message(_ports(), envelope={"v": 10**30}),
    _message(_ports(), envelope={"ts": 10**30}),
    _message(_ports(), envelope={"ts": 1_790_000_000_000}),  # milliseconds
    _message(_ports(), envelope={"id": ""}),
    _message(_ports(), envelope={"kind": "snapshot"}),
    _message(_ports(), envelope={"source": "host"}),
    _message(_ports(), envelope={"source": "nic"}),
    _message([_port(netdev="ib0·v")]),  # not ASCII
    _message([_port(device="mlx5_0\u00e9")]),
    orjson.dumps({"v": 1, "id": "n1", "ts": T, "job": "llm", "node": "dgx-a17", "source": "net", "kind": "sample",
                  "data": {"interval_s": 2.0}}),  # no ports
    orjson.dumps({"v": 1, "id": "n1", "ts": T, "job": "llm", "node": "dgx-a17", "source": "net", "kind": "sample"}),
    _message(_ports()).replace(b'"port":1', b'"port":1,"port":2', 1),  # a key twice: the last counts
    _message(_ports())[:5000],  # cut short
    _message(_ports()).replace(b'"ib0"', b'"ib\xff"'),  # a byte that is not UTF-8
    None,
    b"",
    b"[]",
]


@pytest.mark.parametrize("raw", BAD_OR_ODD)
def test_odd_input_gets_the_general_verdict(raw):
    assert _outcome(decode_net_message, raw) == _outcome(decode, raw)


def test_some_odd_input_is_refused():
    """The list above holds real dead letters (the comparison is not between two acceptances)."""
    outcomes = [_outcome(decode, raw) for raw in BAD_OR_ODD]
    assert sum(o[0] == "invalid" or o[-1] is not None for o in outcomes) >= 30
    assert ("ok", "n1", T, "dgx-a17", orjson.loads(_with({"lid": 17, "sm_lid": 1}))["data"], None) in outcomes


def _mutations(seed: int, n: int):
    """Seeded odd samples: a value swapped for another type, a key dropped or added, the bytes cut
    short or garbled."""
    rnd = random.Random(seed)
    odd = [None, True, -1, 0, 2.5, -0.0, 2**63, 10**20, 1e300, "12", "nan", [], [1], {}, {"x": 1}, "ACTIVE"]
    port_keys = list(_port())
    for _ in range(n):
        ports = [_port(f"mlx5_{i}", roce=i % 2 == 1) for i in range(rnd.randint(0, 3))]
        for p in ports:
            for _ in range(rnd.randint(0, 2)):
                op = rnd.random()
                counters = p.get(rnd.choice(("rates", "deltas")))
                if op < 0.4 and type(counters) is dict and counters:
                    counters[rnd.choice(list(counters))] = rnd.choice(odd)
                elif op < 0.7:
                    p[rnd.choice(port_keys)] = rnd.choice(odd)
                elif op < 0.85:
                    p.pop(rnd.choice(port_keys), None)
                else:
                    p[f"x_{rnd.choice(port_keys)}"] = rnd.choice(odd)
        yield damaged(_message(ports), rnd)


def test_odd_samples_get_the_same_outcome_either_way():
    typed = 0
    for raw in _mutations(seed=13, n=500):
        outcome = _outcome(decode_net_message, raw)
        assert outcome == _outcome(decode, raw), raw
        typed += outcome[0] == "ok" and type(outcome[4].get("ports")) is CheckedPorts
    assert typed >= 50  # the mutations left plain samples too, which the typed read took
