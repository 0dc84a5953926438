"""Outlier ranks → the one parallel group (PP, TP or DP) they share, and its machines.

ByteRobust over-evicts the whole group the outliers share rather than guessing the single bad
machine: a hang's culprit and its sympathetic victims usually sit in one pipeline or one
tensor-parallel group. Among the machine sets that hold all (or, under noise, ``cover_share`` of)
the outliers the smallest one wins, and on a tie PP goes first, as in the paper.

A group that spans most of the job's machines is no localisation: in a pure data-parallel job
(tp = pp = 1) the DP group is the whole job, so two stuck ranks on two machines would evict every
machine. There the outliers' own machines are the set, as many as they sit on.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from faultlens.events.topology import Topology

# Tie-break order among groups of equal size (the paper blames the pipeline first).
AXIS_PREFERENCE = ("pp", "tp", "dp")


@dataclass(frozen=True, slots=True)
class Localization:
    axis: str
    group_id: int  # the group holding most outliers; ``ranks``/``nodes`` span all touched ones
    ranks: tuple[int, ...]  # every rank of the touched groups along ``axis`` on those machines
    nodes: tuple[str, ...]  # the group's machines, the eviction set
    covered: int  # outliers inside the group
    outliers: int  # outliers given (those the topology knows)

    @property
    def group(self) -> str:
        return f"{self.axis}:{self.group_id}"

    @property
    def coverage(self) -> float:
        return self.covered / self.outliers if self.outliers else 0.0


_Candidate = tuple[str, tuple[str, ...], Counter[int]]  # (axis, machines, touched group ids with their outlier counts)


def localize(ranks: Iterable[int], topology: Topology, *, cover_share: float = 0.75) -> Localization | None:
    """The fewest machines whose parallel group(s) hold at least ``cover_share`` of ``ranks``.

    Candidates are formed per axis at the machine level: outliers whose groups along an axis sit
    on the same set of machines count together. With TP inside a node, a stuck machine's whole
    TP group and their pipeline peers are outliers spread over several PP groups (one per TP
    index) that all span the same machines — that machine set is the one pipeline to evict.
    Fewest machines win, then fewest ranks, then PP before TP before DP (the paper's order).
    Ranks the topology does not know are ignored; ``None`` when none is left.
    """
    known = sorted({r for r in ranks if r in topology.by_rank})
    if not known:
        return None
    order = {a: i for i, a in enumerate(AXIS_PREFERENCE)}
    candidates: list[_Candidate] = []
    for axis in AXIS_PREFERENCE:
        by_machines: dict[tuple[str, ...], Counter[int]] = {}
        for r in known:
            gid = topology.group_id(r, axis)
            machines = tuple(sorted(topology.group_nodes(axis, gid)))
            by_machines.setdefault(machines, Counter())[gid] += 1
        for machines, gids in by_machines.items():
            candidates.append((axis, machines, gids))

    def size(c: _Candidate) -> tuple[int, int]:
        axis, machines, gids = c
        return len(machines), sum(len(topology.group_ranks(axis, g)) for g in gids)

    need = cover_share * len(known)
    enough = [c for c in candidates if sum(c[2].values()) >= need]
    if enough:
        best = min(enough, key=lambda c: (*size(c), order[c[0]], min(c[2])))
    else:
        best = min(candidates, key=lambda c: (-sum(c[2].values()), *size(c), order[c[0]], min(c[2])))
    axis, _, gids = best
    gid = min(gids, key=lambda g: (-gids[g], g))  # the group holding most outliers names the set
    touched = sorted({r for g in gids for r in topology.group_ranks(axis, g)})
    nodes = tuple(dict.fromkeys(topology.by_rank[r].node for r in touched))
    own = first_ranks_nodes(known, topology)
    if len(nodes) * 2 > len(topology.nodes) and len(own) < len(nodes):
        touched = sorted(r for r in topology.by_rank if topology.by_rank[r].node in own)
        nodes = tuple(n for n in nodes if n in own)
    return Localization(
        axis=axis,
        group_id=gid,
        ranks=tuple(touched),
        nodes=nodes,
        covered=sum(gids.values()),
        outliers=len(known),
    )


def group_counts(ranks: Iterable[int], topology: Topology) -> dict[str, int]:
    """Outliers per group, every axis: ``{"pp:3": 4, "tp:1": 1, ...}`` (for fail-slow rounds)."""
    out: Counter[str] = Counter()
    for r in ranks:
        if r in topology.by_rank:
            for axis in AXIS_PREFERENCE:
                out[f"{axis}:{topology.group_id(r, axis)}"] += 1
    return dict(out)


def first_ranks_nodes(ranks: Iterable[int], topology: Topology) -> tuple[str, ...]:
    """The machines of ``ranks`` in rank order (the fallback blame when nothing can be grouped)."""
    return tuple(dict.fromkeys(topology.by_rank[r].node for r in sorted(ranks) if r in topology.by_rank))
