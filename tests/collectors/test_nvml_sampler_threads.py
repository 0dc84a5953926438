"""The NVML sampler's threads end with its run, however it ends (collectors/nvml_sampler.py): an
agent's stop() joins the sampler's thread and, through it, these. One stuck in the driver is left
behind, named, and not waited for (unit tests with a fake NVML module)."""

from __future__ import annotations

import logging
import threading

import pytest

from bench.testbed.fake_nvml import LIBRARY_NOT_FOUND, FakeNvml, HangingNvml
from faultlens.collectors.nvml_sampler import NvmlSampler, NvmlUnavailable
from tests.progress import wait_until


def nvml_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("nvml-") and t.is_alive())


def _sampler(nvml, out, **kw):
    return NvmlSampler(job="j", node="n1", interval_s=0.05, publish=out.append, nvml=nvml, deadline_s=0.3, **kw)


def _run(sampler: NvmlSampler, stop: threading.Event) -> threading.Thread:
    thread = threading.Thread(target=sampler.run, args=(stop,), name="test-sampler", daemon=True)
    thread.start()
    return thread


def test_a_node_without_nvml_leaves_no_thread_behind():
    """The worker that asked nvmlInit outlived the agent's stop() (seen in test_agent_e2e)."""
    before = nvml_threads()
    with pytest.raises(NvmlUnavailable):
        _sampler(FakeNvml(init_error=LIBRARY_NOT_FOUND), []).run(threading.Event())
    assert nvml_threads() == before


def test_a_stopped_run_has_joined_its_workers_and_its_xid_watcher():
    before, out, stop = nvml_threads(), [], threading.Event()
    sampler = _sampler(FakeNvml(n=2, xids=[(0, 79)]), out)
    thread = _run(sampler, stop)
    wait_until(
        lambda: any(e.kind == "sample" for e in out) and any(e.kind == "xid" for e in out),
        progress=lambda: len(out),
        stall_s=60,
        what="a sample and the Xid",
    )
    assert {"nvml-0", "nvml-1", "nvml-node", "nvml-xid"} <= set(nvml_threads())
    stop.set()
    thread.join(60)
    assert not thread.is_alive() and nvml_threads() == before


class _FailsOnce(FakeNvml):
    """A read raises what is no NVML error, once, mid-run: the run fails, and the agent runs the
    sampler again."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.reads = 0

    def nvmlDeviceGetUtilizationRates(self, h):
        self.reads += 1
        if self.reads == 3:
            raise RuntimeError("driver went away for a moment")
        return super().nvmlDeviceGetUtilizationRates(h)


def test_a_failed_run_ends_its_xid_watcher():
    """Its watcher ran on beside the restarted sampler's own, and each Xid went out twice."""
    before = nvml_threads()
    with pytest.raises(RuntimeError, match="went away"):
        _sampler(_FailsOnce(n=2), []).run(threading.Event())
    assert nvml_threads() == before


def test_a_call_stuck_at_stop_is_left_behind_and_named(caplog):
    caplog.set_level(logging.WARNING, logger="faultlens.collectors.nvml_sampler")
    nvml, out, stop = HangingNvml(n=2, hang_gpu=1), [], threading.Event()
    before = nvml_threads()
    thread = _run(_sampler(nvml, out, xid_events=False), stop)
    wait_until(
        lambda: any(e.kind == "unresponsive" for e in out), progress=lambda: len(out), stall_s=60, what="GPU 1 unresponsive"
    )
    stop.set()
    thread.join(60)
    try:
        assert not thread.is_alive()  # stop() is not held by the call that never returns
        assert nvml_threads() == sorted([*before, "nvml-1"])
        assert "nvml-1 still in a call at stop; left behind" in caplog.text
    finally:
        nvml.release.set()
    wait_until(
        lambda: nvml_threads() == before, progress=nvml_threads, stall_s=60, what="the stuck worker to end once its call returned"
    )
