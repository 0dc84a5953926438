"""A NIC that decays slowly: its error counters climb while its share of the node's traffic falls.

The counter rules (diagnosis/rules/net_counters.py) judge bursts: so many symbol or receive
errors within a minute. A link that degrades over an hour stays under every burst threshold for
most of that hour, and its traffic does not stop (NCCL moves part of it to the node's other
rails), so the rail-drop rule (diagnosis/peers/net_traffic.py) does not see it either. Together, over
tens of minutes, the two are plain: a port that used to be clean now logs errors every minute,
and carries a smaller share of its node's traffic than it did.

Per port and one-minute bucket: the physical-layer error increments (the counters of
``BURST_THRESHOLDS``) and the port's median share of its node's traffic (bytes/s over the median
of the node's ports, in samples where the node moves traffic). Per port, against its own first
``BASELINE`` minutes and against every port of the job:

* errors: the count over the last ``RECENT`` minutes, as a Poisson z-score against what the
  port's own baseline and the job's median port would make (a healthy HDR link shows a symbol
  error an hour);
* share: the fall of the recent share from the port's baseline, as a robust z-score against the
  same fall of every port of the job.

A port whose errors climb *and* whose share falls, for ``PERSIST`` minutes, is a suspect. Its
finding is an ``alert`` (fault ``nic``) naming the port and the numbers: a person inspects the
link. It never convicts; a burst that crosses the rule's thresholds does that.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping

from faultlens.diagnosis.peers.drift_features import BASELINE, BUCKET_S, RECENT
from faultlens.diagnosis.rules.base import Finding
from faultlens.diagnosis.rules.net_counters import BURST_THRESHOLDS, counts_sum, port_entries, port_maps, port_name
from faultlens.events.envelope import Envelope

ERRORS_Z = 5.0  # Poisson z of the recent error count
MIN_ERRORS = 10  # ... and at least this many errors over the recent minutes
SHARE_Z = 3.0  # the fall of the share against every port's
MIN_SHARE_FALL = 0.02  # ... and at least 2 points of the node's median port
PERSIST = 3
MIN_PORTS = 8
BUSY_BYTES_S = 50e6  # a node moving less (a pause, a stop) says nothing about shares
SHARE_FLOOR = 0.004
REFIRE_S = 3600.0
CONFIDENCE = 0.55


@dataclass(slots=True)
class _Port:
    buckets: deque[tuple[int, float | None]] = field(default_factory=lambda: deque(maxlen=RECENT))  # (errors, share)
    first: list[tuple[int, float | None]] = field(default_factory=list)
    base_errors: float | None = None  # per bucket
    base_share: float | None = None
    errors: int = 0
    shares: list[float] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    streak: int = 0
    since: float = 0.0
    fired_at: float | None = None
    seen: bool = False  # reported in the bucket being filled


@dataclass(frozen=True, slots=True)
class PortDrift:
    node: str
    port: str
    errors: int  # over the last RECENT buckets
    base_rate: float  # errors per bucket in its baseline
    share: float | None  # recent median share
    fall: float | None  # baseline share minus recent share


class NetDriftJudge:
    """One job's ports, bucketed by minute; :meth:`observe` takes the job's `net`/`sample` events in
    event-time order and returns the findings of the minute that closed, if any."""

    def __init__(self, bucket_s: float = BUCKET_S) -> None:
        self.bucket_s = bucket_s
        self._ports: dict[tuple[str, str], _Port] = {}
        self._bucket: float | None = None

    def observe(self, event: Envelope) -> list[Finding]:
        bucket = math.floor(event.ts / self.bucket_s) * self.bucket_s
        out: list[Finding] = []
        if self._bucket is not None and bucket > self._bucket:
            out = self._judge(event.job, self._bucket + self.bucket_s, self._close())
        if self._bucket is None or bucket > self._bucket:
            self._bucket = bucket
        elif bucket < self._bucket:
            return out  # a sample of a minute already closed
        ports = port_entries(event)
        names = [port_name(p) for p in ports]
        rates = {name: _bytes_s(port_maps(p)[0]) for name, p in zip(names, ports, strict=True)}
        known = [r for r in rates.values() if r is not None]
        median = statistics.median(known) if len(known) >= 2 else None
        for name, p in zip(names, ports, strict=True):
            st = self._ports.get((event.node, name))
            if st is None:
                st = self._ports[(event.node, name)] = _Port()
            st.seen = True
            st.errors += counts_sum(port_maps(p)[1], BURST_THRESHOLDS)
            rate = rates[name]
            if median is not None and median >= BUSY_BYTES_S and rate is not None:
                st.shares.append(rate / median)
            if len(st.evidence) < 4 or st.errors:
                st.evidence = (st.evidence + [event.id])[-4:]
        return out

    def _close(self) -> list[PortDrift]:
        out = []
        for (node, port), st in list(self._ports.items()):
            if not st.seen:
                del self._ports[(node, port)]  # the node left the job (or its agent stopped): start afresh
                continue
            st.seen = False
            share = statistics.median(st.shares) if st.shares else None
            st.buckets.append((st.errors, share))
            st.errors, st.shares = 0, []
            if st.base_errors is None:
                st.first.append(st.buckets[-1])
                if len(st.first) >= BASELINE:
                    st.base_errors = sum(e for e, _ in st.first) / len(st.first)
                    shares = [s for _, s in st.first if s is not None]
                    st.base_share = statistics.median(shares) if shares else None
                    st.first = []
                continue
            if len(st.buckets) < RECENT:
                continue
            shares = [s for _, s in st.buckets if s is not None]
            recent = statistics.median(shares) if len(shares) >= RECENT // 2 else None
            fall = st.base_share - recent if recent is not None and st.base_share is not None else None
            out.append(PortDrift(node, port, sum(e for e, _ in st.buckets), st.base_errors, recent, fall))
        return out

    def _judge(self, job: str, t: float, ports: list[PortDrift]) -> list[Finding]:
        if len(ports) < MIN_PORTS:
            return []
        falls = [p.fall for p in ports if p.fall is not None]
        med = statistics.median(falls) if falls else 0.0
        sigma = max(1.4826 * statistics.median(abs(f - med) for f in falls), SHARE_FLOOR) if falls else SHARE_FLOOR
        fleet = statistics.median(p.errors for p in ports) / RECENT  # errors per bucket of the median port
        out = []
        for p in ports:
            st = self._ports[(p.node, p.port)]
            expected = RECENT * max(p.base_rate, fleet)
            z_err = (p.errors - expected) / math.sqrt(expected + 1.0)
            # No recent share (the node moved too little traffic to tell): no fall to hold against it.
            if p.fall is None or p.share is None:
                st.streak = 0
                continue
            z_share = (p.fall - med) / sigma
            if not (p.errors >= MIN_ERRORS and z_err >= ERRORS_Z and z_share >= SHARE_Z and p.fall >= MIN_SHARE_FALL):
                st.streak = 0
                continue
            if st.streak == 0:
                st.since = t
            st.streak += 1
            if st.streak >= PERSIST and (st.fired_at is None or t - st.fired_at >= REFIRE_S):
                st.fired_at = t
                out.append(Finding(
                    job=job, ts=t, onset=st.since, fault="nic", action="alert", nodes=(p.node,), entity=f"drift:{p.port}",
                    confidence=CONFIDENCE, evidence=tuple(st.evidence),
                    detail=(f"{p.node} {p.port} decays: {p.errors} physical-layer errors in the last {RECENT} min "
                            f"(its baseline {p.base_rate * RECENT:.1f}, {z_err:.1f} Poisson sigmas) while its share of "
                            f"the node's traffic fell from {(p.share + p.fall):.2f} to {p.share:.2f} of the median port "
                            f"({z_share:.1f} robust sigmas beyond the job's ports), for {st.streak} min; under every "
                            f"burst threshold: inspect the link (the model alerts, it never evicts)")))
        return out


def _bytes_s(rates: Mapping[str, Any]) -> float | None:
    rx, tx = rates.get("rx_bytes"), rates.get("tx_bytes")
    if not isinstance(rx, (int, float)) or not isinstance(tx, (int, float)):
        return None
    return float(rx) + float(tx)
