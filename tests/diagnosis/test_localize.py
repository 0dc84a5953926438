"""Outlier ranks → the parallel group they share (diagnosis.stacks.localize)."""

from __future__ import annotations

from bench.testbed.stack_samples import grid
from faultlens.diagnosis.stacks.localize import first_ranks_nodes, group_counts, localize
from faultlens.events.topology import RankPlace, Topology


def test_whole_pipeline_is_its_pp_group():
    topo = grid(16, 2, tp=2, pp=4, dp=4)
    members = topo.group_ranks("pp", 5)
    place = localize(members, topo)
    assert (place.axis, place.group_id, place.group) == ("pp", 5, "pp:5")
    assert place.ranks == members and place.covered == 4 and place.coverage == 1.0
    assert place.nodes == topo.group_nodes("pp", 5)


def test_smallest_covering_group_wins():
    topo = grid(16, 2, tp=2, pp=4, dp=4)
    # Two TP peers: their TP group (2 ranks) covers them, so no pipeline or replica is blamed.
    place = localize(topo.group_ranks("tp", 3), topo)
    assert place.group == "tp:3" and len(place.ranks) == 2


def test_pp_goes_first_when_groups_tie_in_machines_and_size():
    topo = grid(8, 1, tp=2, pp=2, dp=2)  # one rank per machine: every group is 2 ranks on 2 machines
    place = localize([5], topo)
    assert place.axis == "pp" and 5 in place.ranks and len(place.nodes) == 2


def test_a_single_stuck_rank_blames_its_own_machine_first():
    topo = grid(16, 4, tp=4, pp=4, dp=4)  # TP inside a node: the TP group is one machine
    place = localize([13], topo)
    assert place.axis == "tp" and place.nodes == (topo.by_rank[13].node,)


def test_stuck_machine_with_its_pipeline_peers_blames_that_pipeline_of_machines():
    # TP=8 inside a node, PP=4 across nodes: a machine's whole TP group is stuck and every one of
    # its ranks' pipeline peers waits in p2p, so the outliers span 8 PP groups on the same 4
    # machines. Those 4 machines are the pipeline to evict; no single rank-level group holds them.
    topo = grid(32, 8, tp=8, pp=4, dp=8)
    culprit = 222
    stuck = topo.group_ranks("tp", topo.group_id(culprit, "tp"))
    outliers = {p for r in stuck for p in topo.group_ranks("pp", topo.group_id(r, "pp"))}
    place = localize(outliers, topo)
    assert place.axis == "pp" and place.coverage == 1.0
    assert set(place.nodes) == set(topo.group_nodes("pp", topo.group_id(culprit, "pp")))
    assert len(place.nodes) == 4 and topo.by_rank[culprit].node in place.nodes


def test_noise_rank_outside_the_group_is_tolerated():
    topo = grid(16, 2, tp=2, pp=4, dp=4)
    members = list(topo.group_ranks("pp", 2))
    noise = next(r for r in range(32) if topo.group_id(r, "pp") != 2 and topo.group_id(r, "dp") not in
                 {topo.group_id(m, "dp") for m in members})
    place = localize(members + [noise], topo)
    assert place.group == "pp:2" and place.covered == 4 and place.coverage == 0.8
    # Below the cover share the group holding the most outliers is still named.
    strict = localize(members + [noise], topo, cover_share=1.0)
    assert strict.group == "pp:2"


def test_unknown_ranks_are_ignored_and_nothing_left_is_none():
    topo = grid(2, 2, tp=2, pp=2, dp=1)
    assert localize([99], topo) is None
    assert localize([], topo) is None
    assert localize([0, 99], topo).outliers == 1


def test_explicit_topology_with_non_grid_placement():
    # Coordinates are explicit in the topology event: no rank-order convention is assumed.
    places = (RankPlace(0, "a", 0, 0, 0), RankPlace(1, "b", 0, 1, 0), RankPlace(2, "a", 0, 0, 1), RankPlace(3, "b", 0, 1, 1))
    topo = Topology(1, 2, 2, places)
    place = localize([1, 3], topo)
    assert place.nodes == ("b",) and place.coverage == 1.0


def test_group_counts_and_fallback_nodes():
    topo = grid(16, 2, tp=2, pp=4, dp=4)
    counts = group_counts(topo.group_ranks("pp", 1), topo)
    assert counts["pp:1"] == 4 and sum(v for k, v in counts.items() if k.startswith("tp:")) == 4
    assert first_ranks_nodes([5, 0, 99], topo) == (topo.by_rank[0].node, topo.by_rank[5].node)
