import logging

import pytest

from faultlens.remediation.pool import StandbyPool, binomial_quantile, standby_size


def test_bytedance_table5_1024_nodes_at_0_12_percent_a_day_needs_4_spares():
    assert standby_size(1024, 0.0012) == 4


@pytest.mark.parametrize("n,p,q", [(1024, 0.0012, 0.99), (128, 0.01, 0.99), (10_000, 0.0005, 0.999), (16, 0.3, 0.5)])
def test_quantile_matches_scipy(n, p, q):
    from scipy.stats import binom  # here, not at collection: scipy.stats costs every xdist worker ~0.75 CPU-s

    assert binomial_quantile(n, p, q) == int(binom.ppf(q, n, p))


def test_longer_replacement_window_needs_more_spares():
    assert standby_size(1024, 0.0012, window_days=7) > standby_size(1024, 0.0012, window_days=1)


def test_edges_and_bad_input():
    assert standby_size(0) == 0
    assert binomial_quantile(10, 0.0, 0.99) == 0
    assert binomial_quantile(10, 1.0, 0.99) == 10
    with pytest.raises(ValueError):
        binomial_quantile(10, 1.5, 0.99)
    with pytest.raises(ValueError):
        standby_size(10, window_days=0)


def test_pool_hands_out_named_spares_then_reports_the_shortfall():
    pool = StandbyPool.for_job("j", 1024, ["s000", "s001"])
    assert pool.spares[:2] == ["s000", "s001"] and len(pool.spares) == 4
    first = pool.take(3)
    assert first.replacements == ("s000", "s001", "j-standby-002") and first.shortfall == 0
    second = pool.take(3)
    assert second.replacements == ("j-standby-003",) and second.shortfall == 2
    assert second.to_params() == {"replacements": ["j-standby-003"], "standby_shortfall": 2}


def _pool_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.endswith("remediation.pool") and r.levelno >= logging.WARNING]


def test_a_shortage_is_one_warning_while_each_eviction_keeps_its_shortfall(caplog):
    caplog.set_level(logging.DEBUG, logger="faultlens.remediation.pool")
    pool = StandbyPool("j", ["s000"])
    allocations = [pool.take_for(f"d{i}", 1) for i in range(5)]
    assert [a.shortfall for a in allocations] == [0, 1, 1, 1, 1]
    assert [a.to_params()["standby_shortfall"] for a in allocations] == [0, 1, 1, 1, 1]
    warnings = _pool_warnings(caplog)
    assert len(warnings) == 1 and "ran short" in warnings[0]
    assert sum("still short" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG) == 3


def test_the_pool_says_when_it_fills_an_eviction_again_and_warns_again_at_the_next_shortage(caplog):
    caplog.set_level(logging.WARNING, logger="faultlens.remediation.pool")
    pool = StandbyPool("j", ["s000", "lemon"])
    assert pool.take(1, skip={"s000", "lemon"}).shortfall == 1  # both spares are lemons for now
    assert pool.take(1, skip={"s000", "lemon"}).shortfall == 1
    assert pool.take(1, skip={"lemon"}).replacements == ("s000",)  # a person resumed s000
    assert pool.take(1, skip={"lemon"}).shortfall == 1
    assert [m.split(":")[1].strip() for m in _pool_warnings(caplog)] == [
        "standby pool ran short", "standby pool no longer short", "standby pool ran short"]


def test_a_dry_runs_preview_hands_out_nothing_and_warns_once(caplog):
    caplog.set_level(logging.WARNING, logger="faultlens.remediation.pool")
    pool = StandbyPool("j", ["s000"])
    assert [pool.preview(2).shortfall for _ in range(3)] == [1, 1, 1]
    assert pool.spares == ["s000"] and pool.used == [] and len(_pool_warnings(caplog)) == 1
