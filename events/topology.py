"""The job topology event (docs/design.md §2): ranks → machines and TP/PP/DP coordinates.

Every localiser reads it to map ranks to machines and to name parallel groups. A *group along
an axis* is the set of ranks that differ only in that axis's coordinate: the PP group of a rank
is its pipeline (same tp and dp, every stage), the TP group its tensor-parallel peers, the DP
group its data-parallel replicas. Groups along an axis are numbered by the remaining
coordinates in (tp, pp, dp) order, so ``pp:3`` with TP=2 names the pipeline tp=1, dp=1.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

from faultlens.events.envelope import Envelope, InvalidEvent, new_id

AXES = ("tp", "pp", "dp")
SOURCE, KIND = "job", "topology"  # the envelope's source and kind of a job's topology event


def is_topology(event: Envelope) -> bool:
    """A job's topology event (not some other source's event that happens to be called topology)."""
    return event.source == SOURCE and event.kind == KIND


@dataclass(frozen=True, slots=True)
class RankPlace:
    rank: int
    node: str
    tp: int
    pp: int
    dp: int

    def coord(self, axis: str) -> int:
        return getattr(self, axis)


@dataclass(frozen=True)
class Topology:
    tp: int
    pp: int
    dp: int
    ranks: tuple[RankPlace, ...]
    extra: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        for axis in AXES:
            size = getattr(self, axis)
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise InvalidEvent(f"data.{axis}", f"must be a positive int, got {size!r}")
        seen: set[int] = set()
        coords: set[tuple[int, int, int]] = set()
        for place in self.ranks:
            if place.rank in seen:
                raise InvalidEvent("data.ranks", f"rank {place.rank} listed twice")
            seen.add(place.rank)
            for axis in AXES:
                c = place.coord(axis)
                if not 0 <= c < getattr(self, axis):
                    raise InvalidEvent("data.ranks", f"rank {place.rank}: {axis}={c} outside 0..{getattr(self, axis) - 1}")
            key = (place.tp, place.pp, place.dp)
            if key in coords:
                raise InvalidEvent("data.ranks", f"rank {place.rank}: coordinates {key} already taken")
            coords.add(key)

    # --- conversion -------------------------------------------------------------------------
    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> "Topology":
        if not isinstance(data, Mapping):
            raise InvalidEvent("data", "topology must be an object")
        for key in ("tp", "pp", "dp", "ranks"):
            if key not in data:
                raise InvalidEvent(f"data.{key}", "missing")
        raw = data["ranks"]
        if not isinstance(raw, list) or not raw:
            raise InvalidEvent("data.ranks", "must be a non-empty list")
        places = []
        for i, r in enumerate(raw):
            if not isinstance(r, Mapping):
                raise InvalidEvent(f"data.ranks[{i}]", "must be an object")
            try:
                places.append(
                    RankPlace(int(r["rank"]), str(r["node"]), int(r["tp"]), int(r["pp"]), int(r["dp"]))
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise InvalidEvent(f"data.ranks[{i}]", f"needs integer rank/tp/pp/dp and a node ({exc})") from None
        extra = {k: v for k, v in data.items() if k not in ("tp", "pp", "dp", "ranks")}
        return cls(int(data["tp"]), int(data["pp"]), int(data["dp"]), tuple(places), extra or None)

    def to_data(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tp": self.tp, "pp": self.pp, "dp": self.dp}
        out.update(self.extra or {})
        out["ranks"] = [
            {"rank": p.rank, "node": p.node, "tp": p.tp, "pp": p.pp, "dp": p.dp} for p in self.ranks
        ]
        return out

    def to_event(self, job: str, ts: float, *, node: str = "-", event_id: str | None = None) -> Envelope:
        return Envelope(ts=ts, job=job, node=node, source=SOURCE, kind=KIND, data=self.to_data(),
                        id=event_id or new_id())

    @classmethod
    def grid(cls, nodes: list[str], gpus_per_node: int, tp: int, pp: int, dp: int) -> "Topology":
        """The usual Megatron layout: rank = ((dp * pp) + pp_stage) * tp + tp_index, TP inside a node."""
        if len(nodes) * gpus_per_node != tp * pp * dp:
            raise ValueError(f"{len(nodes)} nodes × {gpus_per_node} GPUs != tp*pp*dp = {tp * pp * dp}")
        places = []
        for rank in range(tp * pp * dp):
            t = rank % tp
            p = (rank // tp) % pp
            d = rank // (tp * pp)
            places.append(RankPlace(rank, nodes[rank // gpus_per_node], t, p, d))
        return cls(tp, pp, dp, tuple(places), {"gpus_per_node": gpus_per_node})

    # --- lookups ----------------------------------------------------------------------------
    @cached_property
    def by_rank(self) -> dict[int, RankPlace]:
        return {p.rank: p for p in self.ranks}

    @cached_property
    def nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.node for p in self.ranks))

    @cached_property
    def ranks_by_node(self) -> dict[str, tuple[int, ...]]:
        out: dict[str, list[int]] = {}
        for p in self.ranks:
            out.setdefault(p.node, []).append(p.rank)
        return {n: tuple(r) for n, r in out.items()}

    def group_id(self, rank: int, axis: str) -> int:
        """The index of ``rank``'s group along ``axis`` (see the module doc for the numbering)."""
        if axis not in AXES:
            raise ValueError(f"unknown axis {axis!r}")
        p = self.by_rank[rank]
        others = [a for a in AXES if a != axis]
        a, b = others
        return p.coord(b) * getattr(self, a) + p.coord(a)

    @cached_property
    def _members(self) -> dict[tuple[str, int], tuple[int, ...]]:
        out: dict[tuple[str, int], list[int]] = {}
        for axis in AXES:
            for p in self.ranks:
                out.setdefault((axis, self.group_id(p.rank, axis)), []).append(p.rank)
        return {k: tuple(sorted(v)) for k, v in out.items()}

    def group_ranks(self, axis: str, gid: int) -> tuple[int, ...]:
        return self._members.get((axis, gid), ())

    def group_nodes(self, axis: str, gid: int) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.by_rank[r].node for r in self.group_ranks(axis, gid)))

    def groups(self, axis: str) -> list[int]:
        return sorted(g for (a, g) in self._members if a == axis)
