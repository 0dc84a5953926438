"""NIC port counter rules (node-local, `net`/`sample`): link flaps, ports that stay down, error bursts.

The kernel-log rule (rules/nic.py) sees a flap only when mlx5 prints it; the port counters see
every one (``link_downed``, ``link_down_events_phy`` on RoCE, or the port state leaving
``ACTIVE``), and the errors a dying cable makes long before the link drops.

* Flaps: one is tolerated (docs/design.md §3); the second link-down of the node's fabric ports within
  ``window_s`` is the finding, ``evict``, under the kernel rule's entity (one verdict per machine
  whichever sees the flaps). An outage counts once, however many samples see it (:meth:`_outages`).
* A port that was ``ACTIVE`` and stays down (or vanishes) for ``down_s`` is a dead rail: ``evict``.
  A port never seen ``ACTIVE`` since the agent started (an unused port, no cable) says nothing.
* Error bursts: per port, the physical-layer error counters summed over ``burst_window_s``
  against :data:`BURST_THRESHOLDS`. A burst is an ``alert``; a second burst of the same port
  within ``window_s`` (the errors persist), or one ``overwhelming`` times over the threshold,
  is an ``evict``. Background errors (a symbol error an hour on a healthy HDR link) stay far below.

Every finding names the port and the counter values it rests on, with the samples as evidence.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Iterable, Mapping, TypeGuard

from faultlens.diagnosis.rules.base import Finding
from faultlens.diagnosis.rules.nic import FABRIC_ENTITY
from faultlens.events.envelope import Envelope, InvalidEvent

WINDOW_S = 300.0
FLAP_ALERTS = 2
DOWN_S = 60.0
BURST_WINDOW_S = 60.0
OVERWHELMING = 10.0
# Increments within BURST_WINDOW_S that make a burst. Symbol errors are the most sensitive sign of a
# marginal link (a healthy one shows a handful a day); a link error recovery is a retrain.
BURST_THRESHOLDS: Mapping[str, int] = {
    "symbol_error": 100, "port_rcv_errors": 50, "link_error_recovery": 2, "local_link_integrity_errors": 3,
    "excessive_buffer_overrun_errors": 3, "rx_crc_errors_phy": 50, "rx_symbol_err_phy": 100,
    "rx_pcs_symbol_err_phy": 100,
}
LINK_DOWN_COUNTERS = ("link_downed", "link_down_events_phy")


def port_entries(event: Envelope) -> list[Mapping[str, Any]]:
    """The ``ports`` of a `net`/`sample`; a missing list is a dead letter, odd entries are skipped."""
    ports = event.data.get("ports")
    if not isinstance(ports, list):
        raise InvalidEvent("data.ports", f"missing in net/sample event {event.id}")
    return [p for p in ports if isinstance(p, dict) and p.get("device") is not None]


def port_name(p: Mapping[str, Any]) -> str:
    return f"{p.get('device')}/{p.get('port')}"


_NO_MAP: Mapping[str, Any] = {}


def port_maps(p: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """A port's ``rates`` and ``deltas``, each empty where it is not an object: read once per
    port, not once per counter (a sample is 8 ports, read by three detectors)."""
    rates, deltas = p.get("rates"), p.get("deltas")
    return rates if isinstance(rates, dict) else _NO_MAP, deltas if isinstance(deltas, dict) else _NO_MAP


# A counter's increment is a non-negative integer (a bool is no count); anything else counts nothing.
def _count(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def delta(p: Mapping[str, Any], name: str) -> int | None:
    deltas = p.get("deltas")
    value = deltas.get(name) if isinstance(deltas, dict) else None
    return value if _count(value) else None


def counts_sum(deltas: Mapping[str, Any], names: Iterable[str]) -> int:
    """The increments of ``names`` added up (what is not a count adds 0, as :func:`delta` reads it)."""
    values = [deltas.get(n) for n in names]
    if not any(values):  # nearly always: nothing counted
        return 0
    return sum(v for v in values if _count(v))


_device_port = itemgetter("device", "port")
_state_of, _deltas_of = itemgetter("state"), itemgetter("deltas")
_DICT = frozenset({dict})


@dataclass
class _Port:
    state: str | None = None
    was_active: bool = False
    down_since: float | None = None
    down_evidence: list[str] = field(default_factory=list)
    down_reported: bool = False
    # An outage counted by the state alone, whose counter increment is still to come (_outages).
    pending: bool = False
    errors: deque = field(default_factory=deque)  # (ts, {counter: increments}, event id)
    bursts: deque = field(default_factory=deque)  # (ts, event id, text)
    last_burst: float = float("-inf")


@dataclass
class _Node:
    flaps: deque = field(default_factory=deque)  # (ts, event id, text)
    ports: dict[str, _Port] = field(default_factory=dict)
    # (device, port) of every port of the last sample when it left each of them ACTIVE, and their
    # state: a sample of the same ports, all ACTIVE, counting nothing, changes nothing but the
    # error windows' ageing.
    quiet: tuple | None = None
    quiet_ports: tuple = ()


class NetCounterRule:
    sources = frozenset({"net"})

    def __init__(self, window_s: float = WINDOW_S, alerts: int = FLAP_ALERTS, down_s: float = DOWN_S,
                 burst_window_s: float = BURST_WINDOW_S, thresholds: Mapping[str, int] = BURST_THRESHOLDS,
                 overwhelming: float = OVERWHELMING) -> None:
        self.window_s = window_s
        self.alerts = alerts
        self.down_s = down_s
        self.burst_window_s = burst_window_s
        self.thresholds = dict(thresholds)
        self.overwhelming = overwhelming
        self._watched = LINK_DOWN_COUNTERS + tuple(self.thresholds)
        self._nodes: dict[tuple[str, str], _Node] = {}

    def observe(self, event: Envelope) -> list[Finding]:
        if event.kind != "sample":
            return []
        node = self._nodes.get((event.job, event.node))
        if node is None:
            node = self._nodes[(event.job, event.node)] = _Node()
        # Nearly every sample is of healthy ports: seen to change nothing in a few C-level passes
        # instead of every port's bookkeeping (NIC samples are a tenth of a node's messages).
        if node.quiet is not None and self._changes_nothing(node.quiet, event.data.get("ports")):
            for port in node.quiet_ports:
                if port.errors:
                    self._age(port, event.ts)
            return []
        out: list[Finding] = []
        entries = port_entries(event)
        touched: list[_Port] = []
        for p in entries:
            name = port_name(p)
            port = node.ports.get(name)
            if port is None:
                port = node.ports[name] = _Port()
            out += self._link(event, node, port, p, name)
            out += self._errors(event, port, p, name)
            touched.append(port)
        # An ACTIVE port's down-time was cleared by _link (and it is marked as having been up).
        settled = all(port.state == "ACTIVE" for port in touched)
        node.quiet = tuple((p.get("device"), p.get("port")) for p in entries) if settled else None
        node.quiet_ports = tuple(touched) if settled else ()
        return out

    def _changes_nothing(self, quiet: tuple, ports: Any) -> bool:
        """Whether ``ports`` are the ``quiet`` ports, every one ACTIVE, no watched counter moved
        (what :meth:`_link` and :meth:`_errors` would each find, and leave as it was)."""
        if not isinstance(ports, list) or not _DICT.issuperset(map(type, ports)):
            return False
        try:
            if tuple(map(_device_port, ports)) != quiet:
                return False
            states = list(map(_state_of, ports))
            deltas = list(map(_deltas_of, ports))
        except KeyError:
            return False
        if states.count("ACTIVE") != len(states) or not _DICT.issuperset(map(type, deltas)):
            return False
        watched = self._watched
        return not any(any(map(d.get, watched)) for d in deltas)  # a zero or a null is no count

    # --- link state -------------------------------------------------------------------------
    @staticmethod
    def _outages(port: _Port, state: Any, counted: int) -> int:
        """The outages of ``port`` this sample shows, each counted once whoever sees it: the port
        leaving ACTIVE, and the link-down counter's increments, are two views of one outage.

        The counter and the state are read apart, so the increment of an outage whose DOWN the
        last sample already showed can come a sample late (an 18 s flap read by two 10 s samples:
        DOWN +0, then DOWN +1): that increment is the outage already counted, up to the first
        sample that finds the port ACTIVE again; any more than one is a new flap."""
        pending, port.pending = port.pending, False
        if port.state == "ACTIVE":
            if state == "ACTIVE":
                return counted  # down and up again between two reads
            port.pending = not counted
            return counted or 1
        if port.was_active:  # already in an outage (or gone), counted when it began
            port.pending = pending and not counted and state != "ACTIVE"
            return max(counted - pending, 0)
        return counted  # first seen: only a port seen ACTIVE counts (the caller's check)

    def _link(self, event: Envelope, node: _Node, port: _Port, p: Mapping[str, Any], name: str) -> list[Finding]:
        state = p.get("state")
        deltas = p.get("deltas")
        if type(deltas) is dict and not any(map(deltas.get, LINK_DOWN_COUNTERS)):
            counted = 0  # no link-down counted (zeros or nulls)
        else:
            counted = max((delta(p, c) or 0 for c in LINK_DOWN_COUNTERS), default=0)
        downs = self._outages(port, state, counted)
        if state == "ACTIVE":
            port.was_active = True
        port.state = state
        out: list[Finding] = []
        if downs and port.was_active:
            netdev = p.get("netdev")  # the name the kernel's lines give the port (ibp193s0)
            what = f"{name}" + (f" ({netdev})" if isinstance(netdev, str) and netdev else "") + " link down" + (f" (link_downed +{counted})" if counted else f" (state {state or 'gone'})")
            for _ in range(min(downs, 8)):
                node.flaps.append((event.ts, event.id, what))
            while node.flaps and event.ts - node.flaps[0][0] > self.window_s:
                node.flaps.popleft()
            if len(node.flaps) >= self.alerts:
                where = ", ".join(sorted({t for _, _, t in node.flaps}))
                # The entity of the kernel rule's verdict (rules/nic.py): both count the node's fabric
                # link-downs, so the flaps of one port, logged by mlx5 and counted by the port, fold
                # into one diagnosis (dedup keys by entity); ``rule`` still says which rule it is.
                out.append(Finding(
                    job=event.job, ts=event.ts, onset=node.flaps[0][0], fault="nic", action="evict",
                    nodes=(event.node,), entity=FABRIC_ENTITY, rule="net",
                    evidence=tuple(dict.fromkeys(i for _, i, _ in node.flaps))[-16:],
                    detail=f"{len(node.flaps)} link-down events in {self.window_s:.0f}s on the RDMA fabric "
                           f"(port counters): {where}"))
        if state == "ACTIVE" or not port.was_active:
            port.down_since, port.down_evidence, port.down_reported = None, [], False
            return out
        if port.down_since is None:
            port.down_since = event.ts
        if len(port.down_evidence) < 8:
            port.down_evidence.append(event.id)
        if not port.down_reported and event.ts - port.down_since >= self.down_s:
            port.down_reported = True
            phys = p.get("phys_state")
            out.append(Finding(
                job=event.job, ts=event.ts, onset=port.down_since, fault="nic", action="evict", nodes=(event.node,),
                entity=f"net:down:{name}", evidence=tuple(port.down_evidence),
                detail=f"RDMA port {name} was ACTIVE and has been {state or 'gone'}"
                       + (f" ({phys})" if phys else "") + f" for {event.ts - port.down_since:.0f}s"))
        return out

    # --- error bursts -----------------------------------------------------------------------
    def _errors(self, event: Envelope, port: _Port, p: Mapping[str, Any], name: str) -> list[Finding]:
        deltas = p.get("deltas")
        # Nearly every sample counts no error: a zero or null is no count, so look closer only
        # at a counter that is something else.
        if type(deltas) is dict and not any(map(deltas.get, self.thresholds)):
            counts = {}
        else:
            counts = {c: d for c in self.thresholds if (d := delta(p, c))}
        if counts:
            port.errors.append((event.ts, counts, event.id))
        self._age(port, event.ts)
        if not counts:
            return []
        sums: dict[str, int] = {}
        for _, c, _ in port.errors:
            for k, v in c.items():
                sums[k] = sums.get(k, 0) + v
        score = max(v / self.thresholds[k] for k, v in sums.items())
        # An overwhelming count needs no second look (and no waiting out the debounce).
        if score < 1.0 or (event.ts - port.last_burst < self.burst_window_s and score < self.overwhelming):
            return []
        if event.ts - port.last_burst < self.burst_window_s:
            port.bursts.pop()  # this window's burst, now known to be overwhelming: replaced, not counted twice
        port.last_burst = event.ts
        shown = ", ".join(f"{k} +{v}" for k, v in sorted(sums.items(), key=lambda kv: -kv[1] / self.thresholds[kv[0]]))
        text = f"{name}: {shown} in {self.burst_window_s:.0f}s"
        port.bursts.append((event.ts, event.id, text))
        while port.bursts and event.ts - port.bursts[0][0] > self.window_s:
            port.bursts.popleft()
        evidence = tuple(i for _, _, i in port.errors)[-8:] + tuple(i for _, i, _ in port.bursts)
        onset = min(port.bursts[0][0], port.errors[0][0])
        if len(port.bursts) >= 2 or score >= self.overwhelming:
            why = (f"{len(port.bursts)} error bursts within {self.window_s:.0f}s" if len(port.bursts) >= 2
                   else f"an error burst {score:.0f}x over the threshold")
            return [Finding(job=event.job, ts=event.ts, onset=onset, fault="nic", action="evict", nodes=(event.node,),
                            entity=f"net:errors:{name}", evidence=tuple(dict.fromkeys(evidence))[-16:],
                            detail=f"link errors on RDMA port {why}: " + "; ".join(t for _, _, t in port.bursts))]
        # Its own entity: dedup folds by entity, and the eviction that may follow must not fold into it.
        return [Finding(job=event.job, ts=event.ts, onset=onset, fault="nic", action="alert", nodes=(event.node,),
                        entity=f"net:errors-alert:{name}", evidence=tuple(dict.fromkeys(evidence))[-16:],
                        detail=f"link error burst on RDMA port {text} (one burst: watching for a second before "
                               f"evicting)")]

    def _age(self, port: _Port, ts: float) -> None:
        """Forget the error counts that fell out of the burst window at ``ts``."""
        while port.errors and ts - port.errors[0][0] >= self.burst_window_s:
            port.errors.popleft()

    def tick(self, now: float) -> list[Finding]:
        return []
