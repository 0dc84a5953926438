"""A slow rank is evicted only on evidence a person accepts: its GPU's own counters, or the same
machine at separate looks over 20 minutes (diagnosis.peers.slow_evidence; docs/design.md §3).

tests/outside/slow_shapes.py writes four MoE traces (a hot expert that moves between machines, a
GPU held at low clocks and power, a rank slow for half an hour with its counters like its peers',
a hot expert that stays on one rank for 40 minutes, its trainer sending each step's ``work``) and
beside each what a person expects; tests/fixtures/outside/slow/ keeps those expect files as
reviewed. Before this, the first two evicted on the first five stack rounds alike: the hot
expert's healthy machine was evicted 88 s after it got the hot expert; before ``work`` the hot
expert that stays was evicted at the third look (22 min), as the half-hour slow rank is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.outside.modes import assert_expect_files_kept, checked_and_found
from tests.outside.slow_shapes import LOOKS, SCENARIOS, START, write_all

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "outside" / "slow"
EVICTING = ("evict", "evict_reset_gpu")


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("outside-slow")
    write_all(out)
    return out


@pytest.fixture(scope="module")
def checked_found(traces) -> tuple[dict[str, dict], dict[str, list[dict]]]:
    """`faultlens check` over the four traces once, and the diagnoses its engine gave each: the
    tests of one trace read those, not a second engine run of the same trace (~11 of the file's
    ~31 CPU-s)."""
    return checked_and_found(traces / f"{name}.parquet" for name in SCENARIOS)


def test_the_expect_files_kept_are_the_ones_the_writer_writes(traces):
    assert_expect_files_kept(traces, FIXTURES, SCENARIOS)


@pytest.mark.long(18)
def test_every_slow_rank_gives_what_an_sre_expects(checked_found):
    checked, _ = checked_found
    assert sorted(checked) == sorted(SCENARIOS)
    for name, r in checked.items():
        assert r["ok"], (name, r["missing"], r["extra"], r["changed"])
        assert r["healthy_evicted"] == [], name


@pytest.mark.long(6)
def test_a_hot_expert_that_moves_evicts_nobody_and_says_it_moved(checked_found):
    found = checked_found[1]["hot_expert_moves"]
    assert not [d for d in found if d["action"] in EVICTING]
    moved = [d for d in found if d["action"] == "alert" and "the slowness moved from" in d["detail"]]
    assert [d["nodes"] for d in moved] == [["mvs-r3-03"]]


@pytest.mark.long(8)
def test_a_rank_slow_for_half_an_hour_is_evicted_at_the_third_look_not_the_first(checked_found):
    base = START + 2 * 3600.0  # the third trace
    found = checked_found[1]["slow_for_half_an_hour"]
    (evicted,) = [d for d in found if d["action"] in EVICTING]
    assert evicted["ts"] > base + LOOKS[2] and evicted["nodes"] == ["sty-r2-02"]
    assert "3 separate captures" in evicted["detail"]


@pytest.mark.long(8)
def test_a_hot_expert_that_stays_with_its_work_sent_is_an_alert_at_every_look_and_evicts_nobody(checked_found):
    found = checked_found[1]["hot_expert_stays"]
    assert not [d for d in found if d["action"] in EVICTING]
    alerts = [d for d in found if d["action"] == "alert"]
    assert len(alerts) == 4 and {tuple(d["nodes"]) for d in alerts} == {("hot-r2-02",)}
    assert all("rank 37 did 1.4x its peers' work" in d["detail"] for d in alerts)
