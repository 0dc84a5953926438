"""A network link's state printed as a field whose value says it is down (parsing.state_field), read by the state
grammar for a line no rule took: each form on a line written here, each beside the healthy look-alike its guard is for."""

from __future__ import annotations

import pytest

from faultlens.parsing.registry import parser_for
from faultlens.parsing.state_grammar import read_state


def _read(line: str, source: str = "kernel") -> tuple[str, str, str] | None:
    got = read_state(line, line, source)
    return None if got is None else (got.fault, got.state, got.rule if got.quiet is None else f"{got.rule} (recorded)")


@pytest.mark.parametrize(
    ("line", "state", "look_alike"),
    [
        # a CamelCase key and a dotted leader (a NIC vendor's port report); not the same field up
        ("LinkState:.......................Down", "down", "LinkState:.......................Up"),
        ("PhysLinkState:...................Polling", "polling", "PhysLinkState:...................LinkUp"),
        # rdma link's snake_case key; not a port that is active
        (
            "link irdma0/1 state ACTIVE physical_state DISABLED netdev ens5f1",
            "disabled",
            "link irdma0/1 state ACTIVE physical_state LINK_UP netdev ens5f1",
        ),
        # a bare state on a line that names an HCA, after another field's 0 (not a count of none); not ACTIVE
        (
            "link mlx5_3/1 subnet_prefix fe80:0000:0000:0000 lid 12 sm_lid 1 lmc 0 state DOWN physical_state POLLING",
            "down",
            "link mlx5_3/1 subnet_prefix fe80:0000:0000:0000 lid 12 sm_lid 1 lmc 0 state ACTIVE physical_state LINK_UP",
        ),
        # the sysfs port state's enumerated value, by a bare key; not the port's active state
        ("\tstate:\t\t 1: DOWN", "down", "\tstate:\t\t 4: ACTIVE"),
        ("\tphys state:\t 2: Polling", "polling", "\tphys state:\t 5: LinkUp"),
        # ip link: an interface brought up whose state is down; not one nobody brought up (no UP flag, qdisc noop)
        (
            "4: enp65s0f0: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 9000 qdisc mq state DOWN group default qlen 1000",
            "down",
            "4: enp65s0f1: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN group default qlen 1000",
        ),
    ],
)
def test_each_form_is_read_and_its_look_alike_is_not(line: str, state: str, look_alike: str) -> None:
    assert _read(line) == ("nic", state, "state_field")
    assert _read(look_alike) is None


def test_a_container_bridge_down_is_no_link_fault() -> None:
    # docker0 is down whenever no container is attached to it
    assert _read("5: docker0: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 1500 qdisc noqueue state DOWN group default") is None


def test_a_bare_state_of_no_network_device_is_not_a_link() -> None:
    # a service's or a job's state is not a network link's
    assert _read("keepalived: VRRP instance VI_1 state: DOWN") is None
    assert _read("job 4711 status: disabled") is None


def test_an_administrators_setting_is_not_read() -> None:
    assert _read("Port 2 Admin state: Down  Oper state: Down") is None


def test_a_hedged_field_is_not_read() -> None:
    assert _read("if LinkState: Down, reseat the cable") is None


def test_an_nvlink_field_is_nvlinks() -> None:
    assert _read("GPU 0 NVLink 2 PhysLinkState: Polling") == ("nvlink", "polling", "state_field")
    assert _read("nvlink2: link_state=DOWN") == ("nvlink", "down", "state_field")


def test_a_line_is_an_alert_at_most() -> None:
    parser = parser_for("kernel")
    [event] = parser.feed("PhysLinkState:...................Disabled") + parser.flush()
    assert (event.kind, event.data["fault"], event.data["action"], event.data["rule"]) == (
        "suspect_line",
        "nic",
        "alert",
        "state_field",
    )
