"""NIC lines of the kernel log (parsing.kernel_log hands them here): transmit-queue timeouts,
link and port state, cable module events and mlx5 health, as ``nic_error`` / ``link_down`` /
``link_up`` events (docs/events.md).

Apart from parsing.kernel_log because the network drivers' lines are a family of their own, with
their own patterns; the parser's folding of echoes comes in as ``seen`` (parsing.kernel_echoes.Echoes.seen).
"""

from __future__ import annotations

import re
from typing import Any, Callable

from faultlens.parsing.line import any_of, common

Found = list[tuple[str, dict[str, Any]]] | None  # events of one line; [] folded; None not ours
Seen = Callable[[tuple[str, Any]], bool]  # True when the key fired just before (an echo)

_MLX = re.compile(r"(?P<drv>mlx[45]_(?:core|ib)|ib_core|infiniband) (?P<pci>[\w:.]+)(?: (?P<netdev>[\w.\-]+))?: (?P<msg>.*)")
# Any NIC driver's "<driver> <bus address> <netdev>: ..." (e1000e, ixgbe, i40e, bnxt_en, ice, mlx5_core, ...
# on PCI; r8152, ax88179, cdc_ether on a USB interface "2-1.1:1.0").
# On a device-tree machine the address is the platform device's: its unit address and node name
# ("mtk_soc_eth 15100000.ethernet eth1:", stmmac's "ff540000.ethernet").
_NETDRV = re.compile(r"(?:^|\] |kernel: )(?P<drv>[a-z][\w\-]*) (?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]|\d+-[\d.]+:\d+\.\d+"
                     r"|[0-9a-f]{4,16}\.[a-z][\w\-]*) "
                     r"(?P<netdev>[\w.\-]+): (?P<msg>.*)")
# The qdisc watchdog: a transmit queue that made no progress (a hung NIC or a dead link partner).
_NETDEV_WATCHDOG = re.compile(
    r"NETDEV WATCHDOG: (?P<netdev>[\w.\-]+) \((?P<drv>[\w\-]+)\): transmit queue (?P<queue>\d+) timed out(?: (?P<ms>\d+) ms)?"
)
# phylib's "Link is Down" (drivers/net/phy/phy.c phy_print_status, netdev_info: r8169, stmmac, ...) and a
# driver's own "link down" name the netdev before them; FreeBSD's if_link_state_change logs "igb1: link state
# changed to DOWN" (sys/net/if.c, LOG_NOTICE).
_LINK_STATE = re.compile(
    r"(?:(?P<netdev>[\w.\-]+): )?(?:NIC )?[Ll]ink (?:is |becomes |state changed to )?(?P<state>down|up|inactive|ready|Down|Up|DOWN|UP)\b"
)
# The carrier a driver reports on its own netdev (netif_info(..., link, ..., "carrier off"): r8152,
# ax88179, usbnet drivers): the same link state as another driver's "NIC Link is Down".
# A name before "link is down" that is a PCIe host controller's or port's (dw-pcie, tegra-pcie, pcieport).
_PCIE_LINK = re.compile(r"pcie|\bpci\b", re.IGNORECASE)
_CARRIER = re.compile(r"^carrier (?P<state>off|on)\b")
_PORT_STATE = re.compile(r"[Pp]ort (?P<port>\d+)\b.*?(?:changed state to|state:?|->) ?(?P<state>DOWN|ACTIVE|POLLING|INIT|ARMED)\b")
_BOND = re.compile(r"(?P<bond>bond\w*): link status (?:definitely )?(?P<state>down|up) for interface (?P<netdev>[\w.\-]+)")
_MODULE = re.compile(r"Port module event(?P<err>\[error\])?: module (?P<port>\d+), Cable (?P<what>plugged|unplugged|error)(?:, (?P<why>.*))?")
_MLX_HEALTH = re.compile(r"health|syndrome|\bsynd\b|[Ff]atal|internal error|crdump|error state|firmware error|FW error")
_PORT_NUM = re.compile(r"\bport (\d+)\b", re.IGNORECASE)
# A firmware command the driver sent and the device answered with a refusal ("QUERY_HCA_CAP(0x100)
# op_mod(0x40) failed, status bad parameter(0x3), syndrome (0x5add95)"): the device is alive and
# the syndrome is the command's, not a health syndrome (parsing/rules.toml nic.mlx5_cmd_refused).
_CMD_ANSWERED = re.compile(r"\bop_mod\(0x[0-9a-fA-F]+\) failed, status ")

# A line of none of the mlx/IB drivers is only ours with one of these (the literals of _MODULE,
# _BOND, _PORT_STATE's states and _LINK_STATE): "link"/"port" alone (nvlink, docker0's ports) is not.
_STATE_WORDS = any_of(("ink is ", "ink becomes ", "ink down", "ink up", "ink inactive", "ink ready", "ink Down", "ink Up", "ink state changed to ",
                       "link status", "Port module event", "DOWN", "ACTIVE", "POLLING", "carrier o"))

# Lowered, one of these is on every line nic_events or netdev_watchdog_events takes: the words of
# _STATE_WORDS, _MODULE and _BOND, the mlx health words (an mlx line is read only for those or a
# state) and the watchdog's. The kernel parser's pre-filter holds these rather than "mlx", "link"
# or "port", which fill a healthy log (nvlink, docker0's ports, firmware versions).
LITERALS = ("ink is ", "ink becomes ", "ink down", "ink up", "ink inactive", "ink ready", "ink state changed to ", "link status", "port module event",
            "down", "active", "polling", "health", "synd", "fatal", "internal error", "crdump", "error state",
            "firmware error", "fw error", "netdev watchdog", "carrier o")

# "link is not ready" is an interface coming up at boot, not a link going down: not matched at all.
_DOWN = {"down", "inactive", "polling", "unplugged"}
_UP = {"up", "ready", "active", "plugged"}


def netdev_watchdog_events(msg: str, raw: str, seen: Seen) -> Found:
    """A transmit-queue timeout: one ``nic_error`` per hang, however many queues report it."""
    m = _NETDEV_WATCHDOG.search(msg)
    if not m:
        return None
    netdev = m.group("netdev")
    if seen(("netdev_watchdog", netdev)):
        return []  # the same hang reported for another queue, or its WARNING backtrace
    return [("nic_error", common(raw, "nic", "evict", "error", device=netdev, driver=m.group("drv"),
                                 queue=int(m.group("queue")), text=m.group(0)))]


def nic_events(msg: str, raw: str, seen: Seen) -> Found:
    """A NIC driver's line (mlx5, e1000e, bonding, ...): link and port state, cable module, health."""
    if "mlx" not in msg and "ib_core" not in msg and "infiniband" not in msg and not _STATE_WORDS.search(msg):
        return None  # no health reading without an mlx/IB driver, and no state word: nothing below can match
    mlx = _MLX.search(msg)
    drv = _NETDRV.search(msg) if mlx is None else None
    body = mlx.group("msg") if mlx else drv.group("msg") if drv else msg
    device = (mlx.group("netdev") or mlx.group("pci")) if mlx else drv.group("netdev") if drv else None
    driver = mlx.group("drv") if mlx else drv.group("drv") if drv else None
    found = _nic_body(body, raw, mlx, device, seen)
    if found and driver:
        for _, data in found:
            data["driver"] = driver
    return found


def _nic_body(body: str, raw: str, mlx: re.Match[str] | None, device: str | None, seen: Seen) -> Found:
    m = _MODULE.search(body)
    if m:
        port = int(m.group("port"))
        if m.group("what") == "error":
            return [("nic_error", common(raw, "nic", "evict", "error", device=device, port=port, text=body))]
        return [_link(raw, device, port, m.group("what"))]
    m = _BOND.search(body)
    if m:
        return [_link(raw, m.group("netdev"), None, m.group("state"), bond=m.group("bond"))]
    m = _PORT_STATE.search(body)
    if m and m.group("state") not in ("INIT", "ARMED"):  # INIT/ARMED: on the way up
        return [_link(raw, device, int(m.group("port")), m.group("state"))]
    m = _CARRIER.match(body)
    if m and device:
        return [_link(raw, device, None, "down" if m.group("state") == "off" else "up")]
    m = _LINK_STATE.search(body)
    if m and not device and _PCIE_LINK.search(m.group("netdev") or ""):
        return None  # a PCIe controller's link to its devices ("spacemit-pcie: link is down"), not a network's
    if m and (mlx or m.group("netdev") or device or "NIC Link" in body):
        pm = _PORT_NUM.search(body)
        return [_link(raw, m.group("netdev") or device, int(pm.group(1)) if pm else None, m.group("state"))]
    if mlx and _MLX_HEALTH.search(body) and not _CMD_ANSWERED.search(body):
        if seen(("nic_error", device)):
            return []
        return [("nic_error", common(raw, "nic", "evict", "error", device=device, text=body))]
    return None


def _link(raw: str, device: str | None, port: int | None, state: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    state = state.lower()
    if state in _DOWN:
        return "link_down", common(raw, "nic", "evict", "error", device=device, port=port, state=state, **extra)
    return "link_up", common(raw, "nic", "none", "info", device=device, port=port, state=state, **extra)
