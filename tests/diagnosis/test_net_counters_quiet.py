"""NetCounterRule's quick look at a sample that changes nothing gives the findings, and leaves the
state, that the port-by-port bookkeeping gives: on seeded runs of healthy samples broken by flaps,
ports going down or vanishing, error bursts, nulls and new ports."""

from __future__ import annotations

import random

import orjson

from faultlens.diagnosis.rules.net_counters import NetCounterRule
from faultlens.events.net_reading import CheckedPorts, decode_net_message
from tests.diagnosis.test_rules_net import T0, net, port


class _PortByPort(NetCounterRule):
    """The rule without its quick look."""

    def _changes_nothing(self, quiet, ports) -> bool:
        return False


def _run(seed: int, n: int):
    rnd = random.Random(seed)
    devices = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    for i in range(n):
        r = rnd.random()
        ports = [port(d) for d in devices]
        if r < 0.05:
            ports[rnd.randrange(4)] = port(rnd.choice(devices), state="DOWN", traffic=0)
        elif r < 0.08:
            ports[rnd.randrange(4)] = port(rnd.choice(devices), link_downed=rnd.choice([1, 2]))
        elif r < 0.12:
            ports[rnd.randrange(4)] = port(rnd.choice(devices), symbol_error=rnd.choice([20, 150, 2000]))
        elif r < 0.14:
            ports.pop(rnd.randrange(4))  # a port vanished from the listing
        elif r < 0.16:
            ports.append(port("mlx5_4"))  # a new one
        elif r < 0.18:
            ports[0] = {**ports[0], "deltas": None}
        elif r < 0.20:
            ports[1] = {**ports[1], "state": None}
        elif r < 0.21:
            ports[2] = {**ports[2], "device": None}
        node = "n0" if rnd.random() < 0.8 else "n1"
        # Mostly in order, now and then late (an agent's backlog).
        t = i * 5.0 - (rnd.choice([30.0, 200.0]) if rnd.random() < 0.03 else 0.0)
        yield net(t, node, ports)


def _state(rule: NetCounterRule):
    return {key: (list(node.flaps), {name: (p.state, p.was_active, p.down_since, list(p.down_evidence),
                                            p.down_reported, list(p.errors), list(p.bursts), p.last_burst)
                                     for name, p in node.ports.items()})
            for key, node in rule._nodes.items()}


def test_the_quick_look_finds_and_keeps_what_the_port_by_port_look_does():
    for seed in range(4):
        quick, slow = NetCounterRule(), _PortByPort()
        found_quick, found_slow = [], []
        for event in _run(seed, 600):
            found_quick += quick.observe(event)
            found_slow += slow.observe(event)
        assert found_quick == found_slow
        assert _state(quick) == _state(slow)
        assert found_slow  # the runs held faults, not only healthy samples


def test_the_quick_look_takes_healthy_samples_as_read_by_the_net_decoder():
    rule = NetCounterRule()
    calls = []
    original = rule._changes_nothing
    rule._changes_nothing = lambda quiet, ports: calls.append(original(quiet, ports)) or calls[-1]
    for t in range(0, 50, 5):
        raw = orjson.dumps({"v": 1, "id": f"q{t}", "ts": T0 + t, "job": "j", "node": "n0", "source": "net",
                            "kind": "sample", "data": {"interval_s": 5.0, "ports": [port("mlx5_0"), port("mlx5_1")]}})
        event = decode_net_message(raw)
        assert type(event.data["ports"]) is CheckedPorts
        assert rule.observe(event) == []
    assert calls and all(calls)  # after the first sample, each was seen to change nothing
    # A counted link-down is not quiet, though the port is ACTIVE again.
    assert not original(rule._nodes[("j", "n0")].quiet, [port("mlx5_0", link_downed=1), port("mlx5_1")])
