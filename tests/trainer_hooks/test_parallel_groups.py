"""trainer_hooks/parallel_groups.py and the callbacks' readers of a framework's layout: a device mesh
(as Lightning's ModelParallelStrategy and Accelerate's ParallelismConfig build it) becomes the
topology a hang is localised by; a framework that names no groups is data parallel only."""

from __future__ import annotations

import importlib.util
import logging
from types import SimpleNamespace

import pytest

from faultlens.trainer_hooks.parallel_groups import Layout, axis_of, layout_topology, publish_layout


def members(topology, axis):
    """Every group along ``axis``, as sorted tuples of ranks."""
    return sorted(topology.group_ranks(axis, g) for g in topology.groups(axis))


@pytest.mark.parametrize(("dim", "axis"), [
    ("tp", "tp"), ("tensor_parallel", "tp"), ("cp", "tp"), ("sp", "tp"), ("pp", "pp"), ("pipeline_parallel", "pp"),
    ("dp", "dp"), ("data_parallel", "dp"), ("dp_replicate", "dp"), ("dp_shard", "dp"), ("ep", "dp"), ("replicate", "dp"),
])
def test_each_mesh_dimension_goes_to_the_axis_its_ranks_communicate_like(dim, axis):
    assert axis_of(dim) == axis


def test_a_data_parallel_by_tensor_parallel_mesh_keeps_each_tensor_group_on_its_node():
    # Lightning ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=2) on two nodes of two.
    layout = Layout([[0, 1], [2, 3]], ("data_parallel", "tensor_parallel"), "test")
    topology = layout_topology(layout, ["a", "a", "b", "b"])
    assert (topology.tp, topology.pp, topology.dp) == (2, 1, 2)
    assert members(topology, "tp") == [(0, 1), (2, 3)]
    assert members(topology, "dp") == [(0, 2), (1, 3)]
    assert topology.group_nodes("tp", topology.group_id(3, "tp")) == ("b",)
    assert topology.extra == {"gpus_per_node": 2}


def test_megatron_order_puts_tensor_fastest_and_pipeline_slowest():
    layout = Layout.ordered(8, (("pp", 2), ("dp", 2), ("tp", 2)), "test")
    topology = layout_topology(layout, ["n0"] * 4 + ["n1"] * 4)
    assert (topology.tp, topology.pp, topology.dp) == (2, 2, 2)
    assert members(topology, "tp") == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert members(topology, "dp") == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert members(topology, "pp") == [(0, 4), (1, 5), (2, 6), (3, 7)]  # each pipeline spans both nodes
    with pytest.raises(ValueError, match="world size 6"):
        Layout.ordered(6, (("dp", 2), ("tp", 2)), "test")


def test_data_parallel_only_is_every_rank_one_replica():
    topology = layout_topology(Layout.data_parallel(3, "test"), ["a", "b", "b"])
    assert (topology.tp, topology.pp, topology.dp) == (1, 1, 3)
    assert members(topology, "tp") == [(0,), (1,), (2,)] and members(topology, "dp") == [(0, 1, 2)]
    assert topology.extra is None  # two nodes with different rank counts: no gpus_per_node to claim


def test_a_mesh_that_does_not_fit_the_world_is_refused():
    with pytest.raises(ValueError, match="holds 4 ranks, the world 2"):
        layout_topology(Layout([[0, 1], [2, 3]], ("dp", "tp"), "test"), ["a", "a"])
    with pytest.raises(ValueError, match="not a rank of the world"):
        layout_topology(Layout([[0, 7]], ("dp", "tp"), "test"), ["a", "a"])


class Hook:
    """What publish_layout uses of a TrainerHook (its node, publish_topology), without a broker."""

    def __init__(self):
        self.node, self.published = "n000", []

    def publish_topology(self, topology):
        self.published.append(topology)


def test_publish_layout_sends_from_rank_0_and_says_which_groups(caplog):
    hook = Hook()
    with caplog.at_level(logging.WARNING):
        assert publish_layout(hook, Layout.data_parallel(1, "X names no groups: data parallel only"), rank=0)
    assert [(t.tp, t.pp, t.dp, t.nodes) for t in hook.published] == [(1, 1, 1, ("n000",))]
    assert "parallel groups from X names no groups: data parallel only: tp=1 pp=1 dp=1" in caplog.text
    assert publish_layout(Hook(), Layout([[0, 1]], ("dp", "tp"), "a 2-rank mesh"), rank=0) is None  # a world of one
    assert "the launcher's data-parallel placement stands" in caplog.text


@pytest.fixture
def fake_world():
    """A world of 8 ranks in this one process (torch's fake process group: collectives do nothing),
    so that Accelerate builds its real device mesh; destroyed after the test."""
    dist = pytest.importorskip("torch.distributed")
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    try:
        yield 8
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None or importlib.util.find_spec("accelerate") is None,
                    reason="transformers / accelerate are not installed (pip install 'faultlens[hf]')")
def test_accelerate_parallelism_config_mesh_is_read_as_the_job_lays_it_out(fake_world):
    from accelerate import ParallelismConfig

    from faultlens.trainer_hooks.hf import accelerate_layout

    # HSDP (2 replicas x 2 shards) x TP 2: accelerate's own mesh, dims dp_replicate, dp_shard, tp.
    mesh = ParallelismConfig(dp_replicate_size=2, dp_shard_size=2, tp_size=2).build_device_mesh("cpu")
    layout = accelerate_layout(SimpleNamespace(device_mesh=mesh), fake_world)
    assert layout.said == "Accelerate's device mesh (dp_replicate=2, dp_shard=2, tp=2)"
    topology = layout_topology(layout, [f"n{r // 4}" for r in range(fake_world)])
    assert (topology.tp, topology.pp, topology.dp) == (2, 1, 4)
    assert members(topology, "tp") == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert members(topology, "dp") == [(0, 2, 4, 6), (1, 3, 5, 7)]  # replicate and shard: one data-parallel axis

    megatron = accelerate_layout(SimpleNamespace(device_mesh=None, megatron_lm_plugin=SimpleNamespace(
        tp_degree=2, pp_degree=2)), fake_world)
    assert megatron.said == "the Megatron-LM plugin (tp_degree=2, pp_degree=2)"
    assert members(layout_topology(megatron, ["n"] * 8), "pp") == [(0, 4), (1, 5), (2, 6), (3, 7)]

    # Groups it cannot read are not guessed: the launcher's placement stands.
    assert accelerate_layout(SimpleNamespace(device_mesh=None, megatron_lm_plugin=SimpleNamespace(
        tp_degree=3, pp_degree=1)), fake_world) is None
    autotp = SimpleNamespace(hf_ds_config=SimpleNamespace(config={"tensor_parallel": {"autotp_size": 2}}))
    assert accelerate_layout(SimpleNamespace(device_mesh=None, deepspeed_plugin=autotp), fake_world) is None

    plain = accelerate_layout(SimpleNamespace(device_mesh=None, distributed_type=SimpleNamespace(value="MULTI_GPU")), 8)
    assert plain.said == "Accelerate MULTI_GPU names no tensor or pipeline groups: data parallel only"
    assert layout_topology(plain, ["n"] * 8).dp == 8
