"""The network source of the node agent: one `net`/`sample` per interval with every RDMA port's rates.

The reading and the arithmetic are :mod:`collectors.net_counters` (pure); this is the loop, the
clock and ``ethtool -S`` as a subprocess. A node without RDMA devices raises
:class:`NetUnavailable` at start (the agent shows the source as off and carries on); a device
that disappears later is reported with ``null`` values, never as an error of the source.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from faultlens.collectors.net_counters import (
    NetSnapshot,
    parse_ethtool_stats,
    rdma_root,
    read_snapshot,
    sample_data,
    with_missing,
)
from faultlens.events.envelope import Envelope

log = logging.getLogger(__name__)


class NetUnavailable(RuntimeError):
    """No RDMA device on this node (no /sys/class/infiniband)."""


class Ethtool:
    """``ethtool -S <netdev>`` → {stat: value}; None when the tool is absent or fails (never raises)."""

    def __init__(self, binary: str | None = "ethtool", timeout_s: float = 2.0):
        self.path = shutil.which(binary) if binary else None
        self.timeout_s = timeout_s
        self._warned: set[str] = set()
        if binary and self.path is None:
            log.info("ethtool not found: Ethernet (RoCE) ports get sysfs counters only")

    def __call__(self, netdev: str) -> Mapping[str, int] | None:
        if self.path is None:
            return None
        try:
            out = subprocess.run([self.path, "-S", netdev], capture_output=True, text=True, timeout=self.timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self._warn(netdev, str(exc))
            return None
        if out.returncode != 0:
            self._warn(netdev, out.stderr.strip()[:200])
            return None
        return parse_ethtool_stats(out.stdout)

    def _warn(self, netdev: str, why: str) -> None:
        if netdev not in self._warned:
            self._warned.add(netdev)
            log.warning("ethtool -S %s failed: %s", netdev, why)


class NetSampler:
    """Agent source ``net``."""

    name = "net"

    def __init__(self, *, job: str, node: str, interval_s: float, publish: Callable[[Envelope], Any],
                 sysfs_root: Path | str = "/sys", ethtool: Callable[[str], Mapping[str, int] | None] | None = None,
                 clock: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic):
        self.job = job
        self.node = node
        self.interval_s = interval_s
        self.publish = publish
        self.sysfs_root = Path(sysfs_root)
        self.ethtool = ethtool
        self.clock = clock  # event time of the samples
        self.mono = mono  # intervals between reads: a wall clock that steps must not fake a rate
        self.prev: NetSnapshot | None = None
        self.samples = 0

    def sample_once(self) -> Envelope:
        ts = self.clock()
        snap = with_missing(self.prev, read_snapshot(self.sysfs_root, self.mono(), self.ethtool))
        data = sample_data(self.prev, snap)
        self.prev = snap  # ports that vanished stay listed, as null, until the agent restarts
        self.samples += 1
        return Envelope(ts=ts, job=self.job, node=self.node, source="net", kind="sample", data=data)

    def run(self, stop: threading.Event) -> None:
        root = rdma_root(self.sysfs_root)
        if not root.is_dir() or not any(root.iterdir()):
            raise NetUnavailable(f"no RDMA device under {root}")
        if self.ethtool is None:
            self.ethtool = Ethtool()
        due = time.monotonic()
        while not stop.is_set():
            self.publish(self.sample_once())
            due += self.interval_s
            now = time.monotonic()
            due = max(due, now)
            if stop.wait(due - now):
                break
