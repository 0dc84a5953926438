"""Follow who waits on whom through the topology, to the ranks at the ends of the chains.

A rank blocked in ``recv`` waits on the pipeline neighbour that should send (the previous stage
in a forward pass, the next in a backward pass, either when the frames do not say); one blocked
in ``send`` on the neighbour that should receive; one in a collective or barrier on the members
of its group that have not arrived at the same call (its axis named by the callers — grad sync
is DP, Megatron's tensor_parallel is TP — else every axis whose group has a straggler). The
ranks those edges reach that are not waiting themselves are the *suspects*; ranks without a
usable dump that someone waits on are *unknown ends*; waiting ranks whose groups have all
arrived wait on nobody in the job (the hang is in the communication itself).

Pure: rank activities (:mod:`diagnosis.stacks.wait_primitives`) and a topology in, :class:`WaitChains`
out. Group membership is evaluated once per (group, call site), so 16k ranks stay linear.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable, Mapping

from faultlens.diagnosis.stacks.wait_primitives import BARRIER, COLLECTIVE, RECV, SEND, SENDRECV, RankActivity
from faultlens.events.topology import AXES, Topology

CallSite = tuple[tuple[str, str], ...]  # RankActivity.call_site


def chain_to(edges: Mapping[int, Iterable[int]], end: int) -> tuple[int, ...]:
    """The longest of the shortest wait chains that end at ``end``, victim first, over ``edges``
    (rank → the ranks it waits on): read from stacks (WaitGraph) or from the Flight Recorder."""
    back: dict[int, list[int]] = {}
    for src, dsts in edges.items():
        for dst in dsts:
            back.setdefault(dst, []).append(src)
    parent: dict[int, int | None] = {end: None}
    queue, last = deque([end]), end
    while queue:
        last = queue.popleft()
        for src in sorted(back.get(last, ())):
            if src not in parent:
                parent[src] = last
                queue.append(src)
    path = [last]
    while (up := parent[path[-1]]) is not None:
        path.append(up)
    return tuple(path)


@dataclass(frozen=True)
class WaitChains:
    edges: Mapping[int, tuple[int, ...]]  # waiting rank → the ranks it waits on
    reasons: Mapping[int, str]  # waiting rank → why those ("recv (forward) from stage 2", "all_reduce on dp:3")
    suspects: tuple[int, ...]  # not waiting, and someone waits on them
    unknown_ends: tuple[int, ...]  # no usable dump, and someone waits on them
    waiting: tuple[int, ...]
    unwaited: tuple[int, ...]  # not waiting, but nobody waits on them either
    dead_ends: tuple[int, ...]  # waiting on nobody: every member of their group is in the same call

    def chain_to(self, end: int) -> tuple[int, ...]:
        """The longest of the shortest wait chains that end at ``end`` (victim first)."""
        return chain_to(self.edges, end)

    def reach(self, ends: Iterable[int]) -> set[int]:
        """Waiting ranks from which some wait chain leads to one of ``ends``."""
        back: dict[int, list[int]] = {}
        for src, dsts in self.edges.items():
            for dst in dsts:
                back.setdefault(dst, []).append(src)
        seen = set(ends)
        queue = deque(seen)
        while queue:
            for src in back.get(queue.popleft(), ()):
                if src not in seen:
                    seen.add(src)
                    queue.append(src)
        return seen - set(ends)


def follow_waits(activities: Mapping[int, RankActivity], topology: Topology) -> WaitChains:
    """The wait-for graph of ``activities`` (usable ranks only; other topology ranks are unknown)."""
    coords = {(p.tp, p.pp, p.dp): p.rank for p in topology.ranks}
    sites = {r: a.call_site for r, a in activities.items() if a.waiting}
    stragglers: dict[tuple[str, int, CallSite], tuple[int, ...]] = {}
    world_stragglers: dict[CallSite, tuple[int, ...]] = {}  # barriers of unknown scope, by call site

    def not_arrived(axis: str, gid: int, site: CallSite) -> tuple[int, ...]:
        key = (axis, gid, site)
        if key not in stragglers:
            stragglers[key] = tuple(m for m in topology.group_ranks(axis, gid) if sites.get(m) != site)
        return stragglers[key]

    edges: dict[int, tuple[int, ...]] = {}
    reasons: dict[int, str] = {}
    for rank, act in activities.items():
        prim = act.primitive
        if not act.waiting or prim is None:  # a waiting activity always names its primitive
            continue
        kind = prim.kind
        place = topology.by_rank[rank]
        if kind in (SEND, RECV, SENDRECV):
            prev = coords.get((place.tp, place.pp - 1, place.dp))
            nxt = coords.get((place.tp, place.pp + 1, place.dp))
            towards_next = _towards_next(kind, act.direction)
            neighbours: tuple[int | None, ...]
            if towards_next is None:
                neighbours, side = (prev, nxt), "a pipeline neighbour"
            else:
                first, second = (nxt, prev) if towards_next else (prev, nxt)
                # No such stage (a first stage in recv): its only neighbour is the one it waits on.
                chosen = first if first is not None else second
                neighbours, side = (chosen,), "the next stage" if chosen == nxt else "the previous stage"
            edges[rank] = tuple(sorted(t for t in set(neighbours) if t is not None and t != rank))
            reasons[rank] = f"{prim.op}{f' ({act.direction})' if act.direction else ''} waits on {side}"
            continue
        if kind in (COLLECTIVE, BARRIER):
            if act.axis is not None:
                axes = [act.axis]
            elif kind == BARRIER:
                axes = []
            else:
                axes = [a for a in AXES if getattr(topology, a) > 1]
            targets: set[int] = set()
            named: list[str] = []
            if axes:
                for axis in axes:
                    gid = topology.group_id(rank, axis)
                    late = not_arrived(axis, gid, act.call_site)
                    if late:
                        targets.update(late)
                        named.append(f"{axis}:{gid}")
            else:  # a barrier of unknown scope: the whole job
                site = act.call_site
                if site not in world_stragglers:
                    world_stragglers[site] = tuple(r for r in topology.by_rank if sites.get(r) != site)
                targets.update(world_stragglers[site])
                named.append("the job")
            targets.discard(rank)
            edges[rank] = tuple(sorted(targets))
            where = " or ".join(named) if named else (f"{act.axis} group" if act.axis else "any group")
            reasons[rank] = (f"{prim.op} on {where}: {len(targets)} member(s) not in the same call" if targets
                             else f"{prim.op}: every member of its {where} is in the same call")
            continue
        edges[rank] = ()
        reasons[rank] = f"{prim.op}: no rule to follow"

    targets_all = {t for ts in edges.values() for t in ts}
    waiting = tuple(sorted(r for r, a in activities.items() if a.waiting))
    suspects = tuple(sorted(t for t in targets_all if t in activities and not activities[t].waiting))
    unknown = tuple(sorted(t for t in targets_all if t not in activities))
    unwaited = tuple(sorted(r for r, a in activities.items() if not a.waiting and r not in targets_all))
    dead_ends = tuple(r for r in waiting if not edges.get(r))
    return WaitChains(edges, reasons, suspects, unknown, waiting, unwaited, dead_ends)


def _towards_next(kind: str, direction: str | None) -> bool | None:
    """Whether the awaited peer is the next stage: forward sends go to it, backward receives come from it."""
    if direction is None:
        return None
    if kind == SEND:
        return direction == "forward"
    return direction == "backward"  # RECV, and SENDRECV by its receiving half
