"""Match every rank's Flight Recorder dump per process group: who waits in which collective, who never came.

A collective completes only when every member of its group has entered it. So when members of
a group hold collective #S in flight, the members whose last entered number is below S *never
joined* it and are what the others wait on; when every member holds #S in flight, they all
*joined but are stuck* (the hang is in the transport, or one member is stuck inside the call).
Following "waits on" from rank to rank (a rank that never joined #S may itself be held in
another group's collective) ends at ranks held in no recorded collective: the suspects. Names
of frames play no part here; the stacks say later what the suspects were doing instead.

A group's members come from the dump's ``pg_config`` when it lists them (NCCL), else from the
ranks whose dumps name the group (the default group: every rank), widened to the topology group (TP, PP, DP or the job) that
holds them when its other members are exactly ranks without a dump. A rank with a dump that
never names the group is not taken for a member: nothing says it is one.

Pure: dumps and a topology in, :class:`CollectiveState` out.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Mapping

from faultlens.diagnosis.stacks.flight_recorder import RecorderDump
from faultlens.diagnosis.stacks.outliers import rank_list
from faultlens.diagnosis.stacks.wait_chain import chain_to
from faultlens.events.topology import AXES, Topology


@dataclass(frozen=True, slots=True)
class GroupWait:
    """One process group held in collective #seq."""

    pg: str
    seq: int
    op: str
    members: tuple[int, ...]
    joined: tuple[int, ...]  # hold #seq in flight
    never_joined: tuple[int, ...]  # last entered number below seq
    no_dump: tuple[int, ...]  # members without a usable recorder dump
    mismatched: tuple[int, ...] = ()  # joined, but their #seq is another op or size (a mismatched call)

    @property
    def stuck(self) -> bool:
        """Every member with a dump joined, and no member is without one: nobody in the group is behind."""
        return not self.never_joined and not self.no_dump

    def describe(self) -> str:
        text = f"ranks {rank_list(self.joined)} of pg {self.pg} wait in {self.op} #{self.seq}"
        if self.never_joined:
            text += f"; rank(s) {rank_list(self.never_joined)} never entered it"
        if self.no_dump:
            text += f"; rank(s) {rank_list(self.no_dump)} have no recorder dump"
        if self.mismatched:
            text += f"; rank(s) {rank_list(self.mismatched)} entered another op or size as #{self.seq}"
        if self.stuck:
            text += "; every member entered it (joined but stuck)"
        return text


@dataclass(frozen=True)
class CollectiveState:
    waits: tuple[GroupWait, ...]  # every group held in a collective, lowest pg name first
    edges: Mapping[int, tuple[int, ...]]  # held rank → members of its groups that never joined
    held: Mapping[int, tuple[GroupWait, ...]]  # rank → the group waits it is part of
    ends: tuple[int, ...]  # reached by edges, held in no recorded collective (never joined, not waiting)
    no_dump_ends: tuple[int, ...]  # reached by edges, no recorder dump at all
    members: Mapping[str, tuple[int, ...]]
    dumped: tuple[int, ...]  # ranks with a usable recorder dump
    crossed: tuple[int, ...] = ()  # held ranks that wait on each other in a loop: collectives entered in different orders

    @property
    def stuck(self) -> tuple[GroupWait, ...]:
        return tuple(w for w in self.waits if w.stuck)


def group_members(dumps: Mapping[int, RecorderDump], topology: Topology) -> dict[str, tuple[int, ...]]:
    """Each group name → its member ranks (see the module's note)."""
    seen: dict[str, set[int]] = {}
    told: dict[str, tuple[int, ...]] = {}
    everyone = tuple(sorted(topology.by_rank))
    for rank, dump in dumps.items():
        for pg in dump.world:
            told[pg] = everyone
        for pg in dump.last_enqueued:
            seen.setdefault(pg, set()).add(rank)
        for pg, listed in dump.members.items():
            told.setdefault(pg, listed)
    no_dump = set(topology.by_rank) - set(dumps)
    out: dict[str, tuple[int, ...]] = {}
    for pg, ranks in seen.items():
        if pg in told:
            out[pg] = told[pg]
            continue
        out[pg] = tuple(sorted(ranks))
        if not no_dump:
            continue
        some = next(iter(ranks))
        if some not in topology.by_rank:
            continue
        candidates = [set(topology.group_ranks(a, topology.group_id(some, a))) for a in AXES]
        candidates.append(set(topology.by_rank))
        for group in sorted(candidates, key=len):
            if ranks <= group and (group - ranks) <= no_dump:
                out[pg] = tuple(sorted(group))
                break
    return out


def match_collectives(dumps: Mapping[int, RecorderDump], topology: Topology) -> CollectiveState:
    """Per group, the collective its members are held in and who never joined it; chains to their ends."""
    members = group_members(dumps, topology)
    # What any member saw complete completed for all: an older call a member still shows in flight
    # is no wait (nvidia-resiliency-ext's GPU_ERROR dumps: the faulted ranks' recorders stop
    # retiring, their peers retired seven more all_to_alls).
    done: dict[str, int] = {}
    for dump in dumps.values():
        for pg, n in dump.last_completed.items():
            done[pg] = max(done.get(pg, -1), n)
    pending = {r: d.pending(done) for r, d in dumps.items()}
    waits: list[GroupWait] = []
    for pg in sorted(members, key=_pg_order):
        held = [(r, pending[r][pg]) for r in members[pg] if r in pending and pg in pending[r]]
        if not held:
            continue
        seq = min(c.seq for _, c in held)  # the oldest call in flight is what holds the group
        first = min((c for _, c in held if c.seq == seq), key=lambda c: c.record_id)
        joined, never, no_dump, odd = [], [], [], []
        for r in members[pg]:
            d = dumps.get(r)
            if d is None:
                no_dump.append(r)
                continue
            mine = d.at(pg, seq)
            if d.last_enqueued.get(pg, 0) < seq:
                never.append(r)
            elif mine is not None and not mine.retired:
                joined.append(r)
                if mine.op != first.op or (mine.sizes != first.sizes and not _sized_per_rank(mine.op)):
                    odd.append(r)
        waits.append(GroupWait(pg, seq, first.op, members[pg], tuple(joined), tuple(never), tuple(no_dump),
                               tuple(odd)))
    edges: dict[int, set[int]] = {}
    held_by: dict[int, list[GroupWait]] = {}
    for w in waits:
        for r in w.joined:
            held_by.setdefault(r, []).append(w)
            edges.setdefault(r, set()).update(m for m in (*w.never_joined, *w.no_dump) if m != r)
    reached: set[int] = set()
    queue = deque(r for r, ts in edges.items() if ts)
    seen = set(queue)
    while queue:
        for t in edges.get(queue.popleft(), ()):
            reached.add(t)
            if t not in seen:
                seen.add(t)
                queue.append(t)
    ends = tuple(sorted(r for r in reached if r in dumps and r not in held_by))
    crossed = _on_loops({r: {t for t in ts if t in held_by} for r, ts in edges.items()})
    no_dump_ends = tuple(sorted(r for r in reached if r not in dumps))
    return CollectiveState(
        waits=tuple(waits), edges={r: tuple(sorted(ts)) for r, ts in edges.items()},
        held={r: tuple(ws) for r, ws in held_by.items()}, ends=ends, no_dump_ends=no_dump_ends,
        members=members, dumped=tuple(sorted(dumps)), crossed=crossed,
    )


def _on_loops(edges: Mapping[int, set[int]]) -> tuple[int, ...]:
    """Ranks on wait-for loops: peel ranks that wait on nobody left, then ranks nobody left waits on.

    A loop among held ranks is rank A inside a collective B never entered while B is inside one A
    never entered: they entered their groups' collectives in different orders (a divergent branch
    in the trainer). A machine that stops makes chains that end; only software makes them close.
    """
    out_deg = {r: len(ts) for r, ts in edges.items()}
    back: dict[int, set[int]] = {}
    for r, ts in edges.items():
        for t in ts:
            back.setdefault(t, set()).add(r)
            out_deg.setdefault(t, 0)
    alive = set(out_deg)
    queue = deque(r for r, n in out_deg.items() if n == 0)
    while queue:
        r = queue.popleft()
        if r not in alive:
            continue
        alive.discard(r)
        for src in back.get(r, ()):
            if src in alive:
                out_deg[src] -= 1
                if out_deg[src] == 0:
                    queue.append(src)
    in_deg = {r: sum(1 for s in back.get(r, ()) if s in alive) for r in alive}
    queue = deque(r for r, n in in_deg.items() if n == 0)
    while queue:
        r = queue.popleft()
        if r not in alive:
            continue
        alive.discard(r)
        for t in edges.get(r, ()):
            if t in alive:
                in_deg[t] -= 1
                if in_deg[t] == 0:
                    queue.append(t)
    return tuple(sorted(alive))


def _sized_per_rank(op: str) -> bool:
    """A call whose members pass tensors of their own sizes by design: an all-to-all (a MoE layer's
    token dispatch sends each expert what was routed to it: 4027, 4007 and 4251 rows on three ranks of
    one call in nvidia-resiliency-ext's dumps) or a scatter's root and receivers."""
    return op.startswith(("all_to_all", "alltoall")) or op == "scatter"


def _pg_order(name: str) -> tuple[int, int | str]:
    return (0, int(name)) if name.isdigit() else (1, name)


__all__ = ["GroupWait", "CollectiveState", "chain_to", "group_members", "match_collectives"]
