import json

import pytest

from faultlens.remediation.safety import CircuitBreaker, Safety, SafetyConfig


def safety(tmp_path=None, **kw):
    return Safety(SafetyConfig(**kw), CircuitBreaker(tmp_path / "b.json" if tmp_path else None))


def test_window_cap_counts_nodes_over_all_jobs_and_expires():
    s = safety(max_evictions=2, max_job_share=1.0, breaker_share=1.0, window_s=600)
    s.job_nodes.update({"a": 10, "b": 10})
    assert s.check_eviction("a", ("n1",), 0).allowed
    s.record_eviction("a", ("n1",), 0)
    s.record_eviction("b", ("m1",), 10)
    verdict = s.check_eviction("a", ("n2",), 20)
    assert not verdict.allowed and "cap" in verdict.reason
    assert s.check_eviction("a", ("n2",), 601).allowed  # n1 left the window


def test_job_share_cap_allows_at_least_one_node():
    s = safety(max_job_share=0.1, breaker_share=1.0)
    s.job_nodes["small"] = 4
    assert s.check_eviction("small", ("n1",), 0).allowed
    assert not s.check_eviction("small", ("n1", "n2"), 0).allowed
    s.job_nodes["big"] = 100
    assert s.check_eviction("big", tuple(f"n{i}" for i in range(8)), 0).allowed
    assert not s.check_eviction("big", tuple(f"n{i}" for i in range(11)), 0).allowed


def test_dedup_by_node_fault_action_within_window():
    s = safety(dedup_s=300)
    s.remember("j", ("n1",), "gpu_lost", "evict", 100)
    assert s.is_duplicate("j", ("n1",), "gpu_lost", "evict", 200)
    assert not s.is_duplicate("j", ("n1", "n2"), "gpu_lost", "evict", 200)  # n2 is new
    assert not s.is_duplicate("j", ("n1",), "nic", "evict", 200)
    assert not s.is_duplicate("j", ("n1",), "gpu_lost", "evict", 401)


def test_breaker_trips_persists_across_restart_and_resets(tmp_path):
    s = safety(tmp_path, max_job_share=1.0, breaker_share=0.2, max_evictions=100)
    s.job_nodes["j"] = 10
    s.record_eviction("j", ("n1", "n2"), 0)
    assert not s.breaker.open  # 20 % is not more than 20 %
    s.record_eviction("j", ("n3",), 1)
    assert s.breaker.open
    assert not s.check_eviction("j", ("n4",), 2).allowed
    assert json.loads((tmp_path / "b.json").read_text())["open"] is True

    reborn = safety(tmp_path, breaker_share=0.2)  # a new process: the window is empty, the breaker is not
    reborn.job_nodes["j"] = 10
    verdict = reborn.check_eviction("j", ("n4",), 10_000)
    assert not verdict.allowed and "breaker" in verdict.reason

    reborn.breaker.reset()
    assert safety(tmp_path).check_eviction("j", ("n4",), 10_000).allowed


def test_unreadable_breaker_state_blocks_evictions(tmp_path):
    (tmp_path / "b.json").write_text("{not json")
    assert CircuitBreaker(tmp_path / "b.json").open


def test_bad_config_is_refused():
    with pytest.raises(ValueError):
        SafetyConfig(max_job_share=0)
    with pytest.raises(ValueError):
        SafetyConfig(window_s=-1)
