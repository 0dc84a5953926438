"""The job's parallel groups as its training framework knows them, published by the callbacks so
that a hang is localised to the right group (docs/integrations.md, "Parallel groups").

`faultlens run` publishes the rendezvous' placement at every start: pure data parallelism, every
rank its own tensor and pipeline group. A framework that lays its ranks out on a device mesh
(Lightning's ModelParallelStrategy, Accelerate's ParallelismConfig, a model sharded at load time)
knows better; the Lightning and Hugging Face callbacks read that mesh (trainer_hooks/lightning.py,
trainer_hooks/hf.py) and publish it from rank 0 through TrainerHook.publish_topology, which
replaces the launcher's. A framework that names no groups (plain DDP, FSDP, DeepSpeed ZeRO: every
rank holds a share of one data-parallel group) is published as data parallel only, and says so.

A mesh has any number of named dimensions; the topology has three axes (events/topology.py). Each
dimension goes to the axis its ranks communicate like: tensor, context and sequence parallel
split one sample's work (``tp``), pipeline stages pass activations (``pp``), everything else
(replicate, shard, expert, data) splits the batch (``dp``). Two dimensions on one axis are
combined in mesh order, the last fastest (HSDP's replicate × shard is one data-parallel axis).

No framework is imported here; torch only by :func:`rank_nodes`, when a process group exists.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from faultlens.events.topology import AXES, RankPlace, Topology

log = logging.getLogger(__name__)

_TP_DIMS = ("tp", "tensor", "cp", "context", "sp", "sequence")
_PP_DIMS = ("pp", "pipe")


def axis_of(dim: str) -> str:
    """The topology axis a mesh dimension's name goes to (module doc)."""
    name = dim.lower()
    if name.startswith(_PP_DIMS):
        return "pp"
    if name.startswith(_TP_DIMS):
        return "tp"
    return "dp"


@dataclass(frozen=True)
class Layout:
    """Where a framework puts each global rank: ``mesh``, a nested list of ranks (a device mesh's
    ``mesh.tolist()``) whose dimensions are named by ``dims``; ``said``: where that came from, in words."""

    mesh: Any
    dims: tuple[str, ...]
    said: str

    @classmethod
    def of_mesh(cls, mesh: Any, whose: str) -> "Layout | None":
        """A torch DeviceMesh's layout; None without a mesh, or when its dimensions have no names."""
        dims = tuple(getattr(mesh, "mesh_dim_names", None) or ())
        if mesh is None or not dims:
            return None
        sizes = ", ".join(f"{d}={n}" for d, n in zip(dims, mesh.mesh.shape, strict=True))
        return cls(mesh.mesh.tolist(), dims, f"{whose} device mesh ({sizes})")

    @classmethod
    def data_parallel(cls, world: int, said: str) -> "Layout":
        return cls(list(range(world)), ("dp",), said)

    @classmethod
    def ordered(cls, world: int, dims: Sequence[tuple[str, int]], said: str) -> "Layout":
        """Consecutive ranks along the last dimension first (Megatron's order, torch's init_device_mesh)."""
        sizes = [size for _, size in dims]
        if math.prod(sizes) != world:
            raise ValueError(f"{' x '.join(f'{n}={s}' for n, s in dims)} != world size {world}")
        flat: Any = list(range(world))
        for size in reversed(sizes[1:]):
            flat = [flat[i:i + size] for i in range(0, len(flat), size)]
        return cls(flat, tuple(name for name, _ in dims), said)


def _shape(mesh: Any, depth: int) -> tuple[int, ...]:
    shape = []
    level = mesh
    for _ in range(depth):
        if not isinstance(level, (list, tuple)) or not level:
            raise ValueError(f"a mesh of {depth} dimensions must nest {depth} non-empty lists")
        shape.append(len(level))
        level = level[0]
    return tuple(shape)


def layout_topology(layout: Layout, nodes: Sequence[str]) -> Topology:
    """The topology of ``layout``; ``nodes[r]``: the node rank r runs on. Every rank of the world
    must be on the mesh once (ValueError otherwise)."""
    shape = _shape(layout.mesh, len(layout.dims))
    if math.prod(shape) != len(nodes):
        raise ValueError(f"the mesh {dict(zip(layout.dims, shape, strict=True))} holds {math.prod(shape)} ranks, "
                         f"the world {len(nodes)}")
    axes = [axis_of(d) for d in layout.dims]
    size = {axis: math.prod(s for a, s in zip(axes, shape, strict=True) if a == axis) for axis in AXES}
    places = []
    for index in itertools.product(*(range(s) for s in shape)):
        rank: Any = layout.mesh
        for i in index:
            rank = rank[i]
        coord = dict.fromkeys(AXES, 0)
        for axis, i, s in zip(axes, index, shape, strict=True):
            coord[axis] = coord[axis] * s + i  # mixed radix, the later dimension fastest
        if not isinstance(rank, int) or not 0 <= rank < len(nodes):
            raise ValueError(f"mesh position {index} holds {rank!r}, not a rank of the world ({len(nodes)})")
        places.append(RankPlace(rank, nodes[rank], coord["tp"], coord["pp"], coord["dp"]))
    per_node = {nodes.count(n) for n in set(nodes)}
    extra = {"gpus_per_node": per_node.pop()} if len(per_node) == 1 else None
    return Topology(size["tp"], size["pp"], size["dp"], tuple(sorted(places, key=lambda p: p.rank)), extra)


def rank_nodes(node: str) -> list[str]:
    """Every rank's node name, gathered once from every rank (each knows its own: the hook's), so
    any placement of ranks on machines is told as it is. One collective: every rank must call it."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [node]
    nodes: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(nodes, node)
    return [str(n) for n in nodes]


def publish_layout(hook: Any, layout: Layout, rank: int) -> Topology | None:
    """Gather the ranks' nodes (every rank calls this) and publish ``layout`` from rank 0 through
    ``hook.publish_topology``; the topology published (None on other ranks, or when the layout does
    not fit the world: then the launcher's placement stands, and a warning says why)."""
    nodes = rank_nodes(hook.node)
    if rank != 0:
        return None
    try:
        topology = layout_topology(layout, nodes)
    except ValueError as exc:
        log.warning("faultlens: %s: %s; the launcher's data-parallel placement stands", layout.said, exc)
        return None
    hook.publish_topology(topology)
    # Once per start, on the trainer's stderr (as the resume choice is): which groups a hang is localised by.
    log.warning("faultlens: parallel groups from %s: tp=%d pp=%d dp=%d over %d node(s)", layout.said, topology.tp,
                topology.pp, topology.dp, len(topology.nodes))
    return topology
