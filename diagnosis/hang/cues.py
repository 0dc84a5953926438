"""Cues that localise a hang when no stack arrives (pure): GPUs idle while their peers spin, and
the ProcessGroupNCCL watchdog's sequence numbers. diagnosis.hang.detector weighs them."""

from __future__ import annotations

import statistics
from typing import Iterable, Mapping, Sequence

from faultlens.diagnosis.peers.features import NodeWindow
from faultlens.events.topology import Topology

Cue = tuple[tuple, str, tuple[str, ...]]  # (nodes or ranks, why, evidence event ids)

# Every rank's watchdog fires one timeout after it enqueued the stuck collective (within a step of
# each other), and the lines reach us at their nodes' log-shipping pace: a rank whose report has
# not come is "never reported" only once this long has passed since the first one (the NCCL
# incident's own collection window, diagnosis/rules/comms.py). Read earlier, the last ranks to
# ship their line, a NIC-down job's tp-3 ranks, were named for a hang they only waited in.
WATCHDOG_SETTLE_S = 30.0


def idle_nodes(windows: Iterable[NodeWindow], onset: float, idle_share: float, busy_util: float) -> Cue:
    """Nodes whose least busy GPU sits idle (at most ``idle_share`` of the peers' median) while the
    peers spin (median at least ``busy_util``), judged on the windows of the stall only. A minority
    (at most a quarter of the nodes) or nothing: when many idle, the contrast names nobody."""
    during = [w for w in windows if w.start >= onset]
    util = {w.node: w.features["util_min"] for w in during if "util_min" in w.features}
    if len(util) < 4:
        return (), "", ()
    median = statistics.median(util.values())
    if median < busy_util:
        return (), "", ()  # the peers are not spinning either: no GPU-side contrast
    idle = tuple(sorted(n for n, u in util.items() if u <= idle_share * median))
    if not idle or len(idle) * 4 > len(util):
        return (), "", ()
    power = {w.node: w.features.get("power_ratio") for w in during}
    shown = ", ".join(f"{n} util {util[n]:.0f}%" + (f" power {power[n]:.0%}" if power.get(n) is not None else "")
                      for n in idle[:4])
    evidence = tuple(e for w in during if w.node in idle for e in w.evidence[:2])
    return idle, f"GPUs idle on {shown} while the peers spin (median least-busy GPU {median:.0f}%)", evidence


def ranks_behind(progress: Mapping[int, tuple[int, str]], topology: Topology | None, settled: bool = True) -> Cue:
    """Ranks the NCCL watchdog shows behind the rest (``progress``: rank → (last completed
    collective, event id)): the lowest one held by a minority of the reporters, or, when nearly
    every rank reported the same one and the reports have ``settled`` (WATCHDOG_SETTLE_S), the few
    ranks whose watchdog never fired (a rank that never enqueued the collective has nothing to time
    out: it is the last rank to log)."""
    known = {r: v for r, v in progress.items() if topology is None or r in topology.by_rank}
    if len(known) < 2:
        return (), "", ()
    low = min(done for done, _ in known.values())
    ahead = max(done for done, _ in known.values())
    behind = tuple(sorted(r for r, (done, _) in known.items() if done == low))
    if len(behind) * 2 < len(known):
        return (behind, f"NCCL watchdog: rank(s) [{short(behind)}] completed collective {low}, the rest up to {ahead}",
                tuple(known[r][1] for r in behind[:16]))
    if topology is not None and low == ahead and settled:
        quiet = tuple(sorted(set(topology.by_rank) - set(known)))
        if quiet and len(quiet) * 4 <= len(topology.by_rank):
            return (quiet, f"NCCL watchdog fired on {len(known)} rank(s), all at collective {low}; rank(s) "
                           f"[{short(quiet)}] never reported (last to log)", tuple(v[1] for v in list(known.values())[:16]))
    return (), "", ()


def short(items: Sequence[int | str], limit: int = 8) -> str:
    """Ranks (or node names) as a short list: the first ``limit`` and how many more."""
    shown = ", ".join(map(str, items[:limit]))
    return shown + (f" ... (+{len(items) - limit})" if len(items) > limit else "")
