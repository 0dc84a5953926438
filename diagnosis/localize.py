"""Outlier ranks → the one parallel group (PP, TP or DP) they share, and its machines.

ByteRobust over-evicts the whole group the outliers share rather than guessing the single bad
machine: a hang's culprit and its sympathetic victims usually sit in one pipeline or one
tensor-parallel group. Among the groups that hold all (or, under noise, ``cover_share`` of) the
outliers the smallest one wins, and on a tie PP goes first, as in the paper.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from streams.topology import Topology

# Tie-break order among groups of equal size (the paper blames the pipeline first).
AXIS_PREFERENCE = ("pp", "tp", "dp")


@dataclass(frozen=True, slots=True)
class Localization:
    axis: str
    group_id: int
    ranks: tuple[int, ...]  # every rank of the group
    nodes: tuple[str, ...]  # the group's machines, the eviction set
    covered: int  # outliers inside the group
    outliers: int  # outliers given (those the topology knows)

    @property
    def group(self) -> str:
        return f"{self.axis}:{self.group_id}"

    @property
    def coverage(self) -> float:
        return self.covered / self.outliers if self.outliers else 0.0


def localize(ranks: Iterable[int], topology: Topology, *, cover_share: float = 0.75) -> Localization | None:
    """The smallest group holding at least ``cover_share`` of ``ranks`` (else the one holding most).

    Ranks the topology does not know are ignored; ``None`` when none is left.
    """
    known = sorted({r for r in ranks if r in topology.by_rank})
    if not known:
        return None
    candidates: list[tuple[str, int, int, int]] = []  # axis, group id, covered, group size
    for axis in AXIS_PREFERENCE:
        counts = Counter(topology.group_id(r, axis) for r in known)
        for gid, covered in counts.items():
            candidates.append((axis, gid, covered, len(topology.group_ranks(axis, gid))))
    order = {a: i for i, a in enumerate(AXIS_PREFERENCE)}
    need = cover_share * len(known)
    enough = [c for c in candidates if c[2] >= need]
    if enough:
        axis, gid, covered, _ = min(enough, key=lambda c: (c[3], -c[2], order[c[0]], c[1]))
    else:
        axis, gid, covered, _ = min(candidates, key=lambda c: (-c[2], c[3], order[c[0]], c[1]))
    return Localization(
        axis=axis,
        group_id=gid,
        ranks=topology.group_ranks(axis, gid),
        nodes=topology.group_nodes(axis, gid),
        covered=covered,
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
