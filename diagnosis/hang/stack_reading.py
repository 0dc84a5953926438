"""Read a hung job's stack dumps the way an engineer does: victims wait, the culprit does not.

Dumps are taken minutes after a stall, when the hang has spread through the pipeline: ranks sit
in all_reduce, send, recv and one (or a few) somewhere else. Majority voting finds no dominant
"healthy" stack there, so the hang is read in two rules, and the verdict says which one named
the suspects (``StackVerdict.rule``):

1. ``wait-chain``: every rank's innermost frames are classified (:mod:`diagnosis.stacks.wait_primitives`)
   and the wait-for chains followed through the topology (:mod:`diagnosis.stacks.wait_chain`); when most
   ranks wait and the chains end at a few ranks outside any communication call, those are the
   suspects and :func:`diagnosis.stacks.localize.localize` names their group. When every rank waits in
   the same call and every member of its groups has arrived, nobody is behind: *no suspect*, and
   nothing may be evicted (the hang is in the network or the collective library).
2. ``outlier-clustering`` (:mod:`diagnosis.stacks.outliers`) otherwise: a rank stuck inside a collective
   (Fig. 7 of the paper) is told apart by its stack, not by where it waits.

``faultlens stacks`` and the streaming hang detector both call :func:`read_hang_stacks`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Mapping

from faultlens.diagnosis.stacks.localize import localize
from faultlens.diagnosis.stacks.outliers import (
    RULE_OUTLIER,
    RULE_WAIT_CHAIN,
    RankStacks,
    StackConfig,
    StackVerdict,
    cluster_rank_stacks,
    rank_list,
    read_rank_stacks,
)
from faultlens.diagnosis.stacks.rank_threads import read_thread, shared_blocked_calls
from faultlens.diagnosis.stacks.wait_chain import WaitChains, follow_waits
from faultlens.diagnosis.stacks.wait_primitives import RankActivity
from faultlens.events.topology import Topology

_MAX_HOPS = 8  # a chain longer than this is shown with its middle elided


def read_activities(stacks: RankStacks, topology: Topology | None = None) -> dict[int, RankActivity]:
    """Each usable rank's activity; identical dumps share a thread object and are read once.

    With the topology, ranks blocked at the same line of their own code as a group peer wait
    (:func:`diagnosis.stacks.rank_threads.shared_blocked_calls`)."""
    by_thread: dict[int, RankActivity | None] = {}
    out: dict[int, RankActivity] = {}
    for rank, thread in stacks.threads.items():
        key = id(thread)
        if key not in by_thread:
            by_thread[key] = read_thread(thread)
        act = by_thread[key]
        if act is not None:
            out[rank] = act
    if topology is not None:
        out.update(shared_blocked_calls(stacks.threads, out, topology))
    return out


def read_hang_stacks(dumps: Mapping[int, str], topology: Topology, config: StackConfig = StackConfig()) -> StackVerdict:
    """The suspects of a hang and the group to evict, by wait chains first, else by outlier stacks.

    Raises :class:`diagnosis.stacks.outliers.NotInTopology` when a dump names a rank the topology lacks.
    """
    stacks = read_rank_stacks(dumps, topology)
    activities = read_activities(stacks, topology)
    chains = follow_waits(activities, topology)
    usable = len(activities)
    if usable:
        verdict = _by_wait_chain(stacks, activities, chains, topology, config)
        if verdict is not None:
            return replace(verdict, waited_on=chains.unknown_ends)
    clustered = cluster_rank_stacks(stacks, topology, config)
    why = _why_not_wait_chain(activities, chains, config) if usable else "no usable dump"
    detail = f"{clustered.detail}; wait chains name no suspect: {why}"
    rule = clustered.rule if clustered.localized else None
    return replace(clustered, rule=rule, detail=detail, waited_on=chains.unknown_ends)


def _by_wait_chain(stacks: RankStacks, activities: Mapping[int, RankActivity], chains: WaitChains,
                   topology: Topology, config: StackConfig) -> StackVerdict | None:
    usable = len(activities)
    waiting = len(chains.waiting)
    if waiting < config.min_waiting_share * usable:
        return None
    seen_share = usable / stacks.expected if stacks.expected else 0.0
    # What both verdicts of this rule say alike; each fills in whom it names.
    base = StackVerdict(outlier_ranks=(), healthy_signatures=(), groups=_activity_groups(activities), axis=None,
                        group_id=None, group=None, nodes=(), confidence=0.0, detail="", bad_ranks=stacks.bad,
                        missing_ranks=stacks.missing, rule=RULE_WAIT_CHAIN)
    tail = _tail_lines(stacks, activities, chains, config)
    if not chains.suspects:
        if waiting == usable and not chains.unknown_ends and len(chains.dead_ends) == waiting and not stacks.missing:
            sites = Counter(activities[r].frame.split(" (", 1)[0] for r in chains.waiting)
            calls = ", ".join(f"{n} in {op}" for op, n in sites.most_common(3))
            same = "the same collective call" if len({activities[r].call_site for r in chains.waiting}) == 1 else "collective calls"
            head = (f"rule {RULE_WAIT_CHAIN}: no suspect: every rank waits in {same} ({calls}) and "
                    f"every member of its groups has arrived; nobody is behind, the hang is inside the "
                    f"communication layer (network, NCCL/gloo): nothing to evict, ask again or alert")
            return replace(base, detail="; ".join([head, *tail]), no_suspect=True)
        return None
    if len(chains.suspects) > max(1, config.max_suspect_share * usable):
        return None
    place = localize(chains.suspects, topology, cover_share=config.cover_share)
    if place is None:
        return None
    reached = len(chains.reach(chains.suspects))
    confidence = 0.95 * place.coverage * (reached / waiting) * min(1.0, seen_share)
    if seen_share < config.min_seen_share:
        confidence *= 0.5
    shown = chains.suspects[: config.max_detail_groups]
    texts = tuple(_chain_text(chains.chain_to(s), activities, chains) for s in shown)
    head = (f"rule {RULE_WAIT_CHAIN}: {len(chains.suspects)} suspect rank(s) [{rank_list(chains.suspects)}] outside "
            f"any communication call at the end of the wait chains of {reached}/{waiting} waiting rank(s); "
            f"{place.covered}/{place.outliers} in {place.group} ({len(place.ranks)} ranks on {len(place.nodes)} node(s))")
    lines = [head]
    lines += [f"suspect {r}: {activities[r].activity} in {activities[r].frame}" for r in shown]
    lines += [f"chain: {t}" for t in texts]
    return replace(
        base, outlier_ranks=chains.suspects, axis=place.axis, group_id=place.group_id, group=place.group,
        nodes=place.nodes, confidence=round(confidence, 4), detail="; ".join(lines + tail), chains=texts,
        outlier_frames={f"rank {r}": (activities[r].frame,) for r in chains.suspects},
    )


def _activity_groups(activities: Mapping[int, RankActivity]) -> dict[str, tuple[int, ...]]:
    groups: dict[str, list[int]] = {}
    for rank, act in activities.items():
        groups.setdefault(act.activity, []).append(rank)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return {name: tuple(sorted(ranks)) for name, ranks in ordered}


def _tail_lines(stacks: RankStacks, activities: Mapping[int, RankActivity], chains: WaitChains,
                config: StackConfig) -> list[str]:
    usable = len(activities)
    groups = _activity_groups(activities)
    lines = [f"{usable}/{stacks.expected} ranks with a usable dump: "
             + ", ".join(f"{len(rs)} {name}" for name, rs in list(groups.items())[: config.max_detail_groups])
             + (f", ... {len(groups) - config.max_detail_groups} more" if len(groups) > config.max_detail_groups else "")]
    if chains.unwaited:
        lines.append(f"outside communication but waited on by nobody: ranks {rank_list(chains.unwaited)}")
    if chains.unknown_ends:
        lines.append(f"chains also end at ranks without a usable dump: {rank_list(chains.unknown_ends)}")
    if stacks.bad:
        lines.append(f"bad dumps (empty, garbled or truncated): ranks {rank_list(stacks.bad)}")
    if stacks.missing:
        lines.append(f"no dump: ranks {rank_list(stacks.missing)}")
    if stacks.expected and usable / stacks.expected < config.min_seen_share:
        lines.append(f"too many ranks missing ({usable}/{stacks.expected} usable): low confidence")
    return lines


def _chain_text(path: tuple[int, ...], activities: Mapping[int, RankActivity], chains: WaitChains) -> str:
    """``15 recv (forward) waits on the previous stage → 11 ... → 6 not waiting: compute in forward (m.py:5)``."""
    hops = [f"{r} {chains.reasons.get(r, '')}".rstrip() for r in path[:-1]]
    if len(hops) > _MAX_HOPS:
        hops = hops[: _MAX_HOPS // 2] + [f"... {len(hops) - _MAX_HOPS} more"] + hops[-_MAX_HOPS // 2:]
    end = path[-1]
    act = activities.get(end)
    last = f"{end} not waiting: {act.activity} in {act.frame}" if act is not None else f"{end} (no usable dump)"
    return " → ".join([*hops, last])


def _why_not_wait_chain(activities: Mapping[int, RankActivity], chains: WaitChains, config: StackConfig) -> str:
    usable = len(activities)
    waiting = len(chains.waiting)
    if waiting < config.min_waiting_share * usable:
        return f"only {waiting}/{usable} ranks wait in a communication call"
    if len(chains.suspects) > max(1, config.max_suspect_share * usable):
        return f"{len(chains.suspects)}/{usable} ranks outside communication are waited on, too many to be the culprit"
    parts = []
    if chains.unknown_ends:
        parts.append(f"chains end at ranks without a usable dump [{rank_list(chains.unknown_ends)}]")
    if chains.dead_ends and len(chains.dead_ends) < waiting:
        ends = chains.dead_ends
        sample = activities[ends[0]]
        parts.append(f"chains end at waiting ranks whose groups have all arrived [{rank_list(ends)}] "
                     f"(e.g. {ends[0]} in {sample.frame})")
    if not parts:
        parts.append(f"all {waiting} waiting ranks wait on each other, none outside communication")
    return "; ".join(parts)


__all__ = ["read_hang_stacks", "read_activities", "RULE_OUTLIER", "RULE_WAIT_CHAIN"]
