"""Job-level reading of the NIC port counters: rails compared across the job's nodes, the whole
job's RDMA traffic as hang evidence, congestion as a fail-slow cause.

A rail is a port index (``mlx5_3/1``): in a rail-optimised fabric the same port of every node
hangs off the same leaf switches and carries the same share of NCCL's traffic, so one node's
rail is judged against the same rail of its peers (at least ``min_peers`` of them).

* Rail drop: an ``ACTIVE`` rail whose traffic stays under ``zero_share`` of its peers' median for
  ``hold_s`` while the peers are busy. Alone it is an ``alert`` (a person looks: NCCL may have
  routed around it). With RDMA transport errors on the same port over the same time (retry
  timeouts, discards, sequence errors) it is two independent signals of a black-holing link:
  ``evict``. A port that is down is the node rule's (rules/net_counters.py).
* Job silence: when every node's RDMA traffic is near zero, since when. The hang detector's
  verdicts quote it beside the stalled steps; it never convicts on its own (a checkpoint save
  is silent too).
* Congestion: nodes whose ports wait for credits (``port_xmit_wait``) or see congestion
  notifications (CNPs) far more than their peers, or a fabric where most nodes do; quoted in
  fail-slow diagnoses as a possible cause.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import msgspec

from faultlens.diagnosis.rules.base import Finding
from faultlens.diagnosis.rules.net_counters import counts_sum, port_entries, port_maps, port_name
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope

TRANSPORT_ERRORS = ("local_ack_timeout_err", "port_xmit_discards", "out_of_sequence", "packet_seq_err",
                    "implied_nak_seq_err")
CNP = ("np_cnp_sent", "rp_cnp_handled")


@dataclass(frozen=True, slots=True)
class NetTrafficConfig:
    zero_share: float = 0.05  # a rail under this share of its peers' median carries "nothing"
    busy_bytes_s: float = 50e6  # the peers' median must be at least this for the contrast to mean anything
    hold_s: float = 30.0
    min_peers: int = 2
    fresh_s: float = 30.0  # a peer sample older than this is not compared
    idle_bytes_s: float = 1e6  # a node under this (all rails) moves no RDMA traffic
    history_s: float = 900.0
    congestion_factor: float = 4.0  # a node's wait / CNP rate this many times its peers' median
    wait_floor: float = 1e5  # port_xmit_wait ticks per second worth naming
    cnp_floor: float = 50.0  # CNPs per second worth naming
    evict_confidence: float = 0.75
    alert_confidence: float = 0.5


@dataclass(slots=True)
class _Sample:
    ts: float
    id: str
    rails: dict[str, tuple[float | None, str | None, int]]  # rail → (bytes/s, state, transport errors)
    total: float | None  # bytes/s over every rail (None: no rate known)
    wait: float  # port_xmit_wait per second, summed over rails
    cnp: float  # CNPs per second, summed


@dataclass
class _Job:
    latest: dict[str, _Sample] = field(default_factory=dict)
    history: dict[str, deque[_Sample]] = field(default_factory=dict)  # node → recent samples
    low_since: dict[tuple[str, str], tuple[float, list[str]]] = field(default_factory=dict)
    reported: set[tuple[str, str]] = field(default_factory=set)  # (node, rail) reported while low
    busy_at: dict[str, float] = field(default_factory=dict)  # node → last time it moved RDMA traffic
    medians: dict[str, tuple[float, int, float]] = field(default_factory=dict)  # rail → (at, nodes, median)


def rate_value(v: Any) -> float | None:
    """A rate as a float; None unless a non-negative number."""
    if type(v) is float:
        return v if v >= 0 else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else None


def _sample(event: Envelope) -> _Sample:
    rails: dict[str, tuple[float | None, str | None, int]] = {}
    total, known, wait, cnp = 0.0, False, 0.0, 0.0
    for p in port_entries(event):
        rates, deltas = port_maps(p)
        rx, tx = rate_value(rates.get("rx_bytes")), rate_value(rates.get("tx_bytes"))
        traffic = None if rx is None and tx is None else (rx or 0.0) + (tx or 0.0)
        if traffic is not None:
            total += traffic
            known = True
        rails[port_name(p)] = (traffic, p.get("state"), counts_sum(deltas, TRANSPORT_ERRORS))
        wait += rate_value(rates.get("port_xmit_wait")) or 0.0
        cnp += sum(rate_value(rates.get(c)) or 0.0 for c in CNP)
    return _Sample(event.ts, event.id, rails, total if known else None, wait, cnp)


class NetTraffic:
    def __init__(self, config: NetTrafficConfig = NetTrafficConfig()):
        self.config = config
        self._jobs: dict[str, _Job] = {}

    def observe(self, event: Envelope) -> list[Finding]:
        if event.source != "net" or event.kind != "sample":
            return []
        job = self._jobs.setdefault(event.job, _Job())
        s = _sample(event)
        old = job.latest.get(event.node)
        if old is not None and s.ts < old.ts:
            return []
        job.latest[event.node] = s
        hist = job.history.setdefault(event.node, deque())
        hist.append(s)
        while hist and s.ts - hist[0].ts > self.config.history_s:
            hist.popleft()
        if s.total is not None and s.total >= self.config.idle_bytes_s:
            job.busy_at[event.node] = s.ts
        return self._rails(event, job, s)

    # --- rails ------------------------------------------------------------------------------
    def _rails(self, event: Envelope, job: _Job, s: _Sample) -> list[Finding]:
        c = self.config
        out: list[Finding] = []
        for rail, (traffic, state, _) in s.rails.items():
            key = (event.node, rail)
            n_peers, median = self._peers(job, rail, event.node, s.ts) if state == "ACTIVE" and traffic is not None \
                else (0, 0.0)
            if traffic is None or not (n_peers >= c.min_peers and median >= c.busy_bytes_s
                                       and traffic <= c.zero_share * median):
                job.low_since.pop(key, None)
                job.reported.discard(key)
                continue
            since, ids = job.low_since.setdefault(key, (s.ts, []))
            if len(ids) < 8:
                ids.append(event.id)
            if key in job.reported or s.ts - since < c.hold_s:
                continue
            job.reported.add(key)
            errors = sum(x.rails.get(rail, (None, None, 0))[2] for x in job.history.get(event.node, ()) if x.ts >= since)
            base = (f"rail {rail} of {event.node} has carried {traffic / 1e6:.1f} MB/s for {s.ts - since:.0f}s while "
                    f"the same rail of {n_peers} peer node(s) carries {median / 1e6:.0f} MB/s (median)")
            if errors:
                out.append(Finding(
                    job=event.job, ts=s.ts, onset=since, fault="nic", action="evict", nodes=(event.node,),
                    entity=f"net:rail:{rail}", confidence=c.evict_confidence, evidence=tuple(ids),
                    detail=f"{base}, and its RDMA transport errors rose by {errors} (retry timeouts, discards, "
                           f"sequence errors): a link that black-holes traffic"))
            else:
                out.append(Finding(
                    job=event.job, ts=s.ts, onset=since, fault="nic", action="alert", nodes=(event.node,),
                    entity=f"net:rail-alert:{rail}", confidence=c.alert_confidence, evidence=tuple(ids),
                    detail=f"{base}; the port is ACTIVE and shows no errors, so NCCL may simply avoid it: "
                           f"alert for inspection, no eviction"))
        return out

    def _peers(self, job: _Job, rail: str, node: str, ts: float) -> tuple[int, float]:
        """(peers, their median traffic) on ``rail`` at ``ts``. A big job's median is computed once
        per half interval and includes the node itself (one value of many barely moves it); a
        small job's excludes it exactly."""
        c = self.config
        cached = job.medians.get(rail)
        if cached is not None and 0 <= ts - cached[0] < 2.5 and cached[1] >= 9:
            return cached[1] - 1, cached[2]
        values = {n: v for n, p in job.latest.items()
                  if ts - p.ts <= c.fresh_s and rail in p.rails and (v := p.rails[rail][0]) is not None}
        if len(values) >= 9:
            job.medians[rail] = (ts, len(values), statistics.median(values.values()))
            return len(values) - 1, job.medians[rail][2]
        peers = [v for n, v in values.items() if n != node]
        return len(peers), statistics.median(peers) if peers else 0.0

    # --- job silence (hang evidence) ---------------------------------------------------------
    def job_silence(self, job: str, since: float) -> tuple[float, str, tuple[str, ...]] | None:
        """When every node's RDMA traffic has been near zero since ``since`` or earlier: (quiet
        since, why, evidence). None when some node still moves traffic or the counters say nothing."""
        state = self._jobs.get(job)
        if state is None or len(state.latest) < 2:
            return None
        totals = [s.total for s in state.latest.values() if s.total is not None]
        if len(totals) < len(state.latest) or any(t >= self.config.idle_bytes_s for t in totals):
            return None
        latest = list(state.latest.values())  # every node's total is known
        newest = max(s.ts for s in latest)
        if any(newest - s.ts > self.config.fresh_s for s in latest):
            return None  # some node's counters stopped coming: its silence is not known
        quiet = max((state.busy_at.get(n, float("-inf")) for n in state.latest), default=float("-inf"))
        if quiet > since:
            return None
        when = "before the stall" if quiet == float("-inf") else f"since {quiet:.0f}"
        why = (f"RDMA traffic of the whole job is near zero ({len(latest)} nodes' port counters, "
               f"under {self.config.idle_bytes_s / 1e6:.0f} MB/s each, {when}, last read {newest:.0f})")
        return quiet, why, tuple(s.id for s in latest[:8])

    # --- congestion (fail-slow cause) --------------------------------------------------------
    def congestion(self, job: str, t0: float, t1: float) -> tuple[tuple[str, ...], str, tuple[str, ...]]:
        """Nodes whose ports waited for credits or saw CNPs far above their peers over [t0, t1],
        or fabric-wide congestion; ((), "", ()) when the counters show none."""
        c = self.config
        state = self._jobs.get(job)
        if state is None:
            return (), "", ()
        waits, cnps, ids = {}, {}, {}
        for node, hist in state.history.items():
            window = [s for s in hist if t0 <= s.ts <= t1]
            if window:
                waits[node] = statistics.fmean(s.wait for s in window)
                cnps[node] = statistics.fmean(s.cnp for s in window)
                ids[node] = window[-1].id
        if len(waits) < c.min_peers + 1:
            return (), "", ()
        mw, mc = statistics.median(waits.values()), statistics.median(cnps.values())
        hot = tuple(sorted(n for n in waits if (waits[n] >= c.wait_floor and waits[n] >= c.congestion_factor * max(mw, 1.0))
                           or (cnps[n] >= c.cnp_floor and cnps[n] >= c.congestion_factor * max(mc, 1.0))))
        if hot:
            shown = ", ".join(f"{n} xmit_wait {waits[n]:.0f}/s CNP {cnps[n]:.0f}/s" for n in hot[:4])
            return hot, (f"network congestion on {shown} (peers' median xmit_wait {mw:.0f}/s, CNP {mc:.0f}/s): the "
                         f"slowdown may be the fabric's, not the machine's"), tuple(ids[n] for n in hot[:8])
        if mw >= c.wait_floor or mc >= c.cnp_floor:
            return (), (f"fabric-wide congestion: median xmit_wait {mw:.0f}/s, CNP {mc:.0f}/s over "
                        f"{len(waits)} nodes"), tuple(list(ids.values())[:8])
        return (), "", ()

    def restarted(self, job: str, nodes_out: list[str]) -> None:
        state = self._jobs.get(job)
        if state is None:
            return
        for node in nodes_out:
            state.latest.pop(node, None)
            state.history.pop(node, None)
            state.busy_at.pop(node, None)
        state.low_since = {k: v for k, v in state.low_since.items() if k[0] not in nodes_out}


def annotate(net: NetTraffic, d: Diagnosis) -> Diagnosis:
    """A hang or fail-slow diagnosis with what the port counters say beside it (detail, evidence);
    its action and confidence stay what the stalled steps, stacks and peers decided."""
    if d.fault == "job_hang":
        # Quiet for at least the second half of the stall: the last step's own traffic may trail it.
        found = net.job_silence(d.job, since=d.onset + 0.5 * max(0.0, d.ts - d.onset))
        if found is None:
            return d
        _, why, ids = found
    elif d.fault == "fail_slow" and not (d.action == "capture_stacks" and d.confidence < 0.5):
        _, why, ids = net.congestion(d.job, d.onset - 60.0, d.ts)
        if not why:
            return d
    else:
        return d
    if why in d.detail:
        return d
    evidence = tuple(dict.fromkeys(d.evidence + ids))
    return msgspec.structs.replace(d, detail=f"{d.detail}; network: {why}", evidence=evidence)
