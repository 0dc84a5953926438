"""The node agent: every source in its own thread, all publishing through one spooling publisher.

A source is anything with a ``name`` and ``run(stop: threading.Event)``. A source that raises is
reported in the heartbeat's ``sources`` map and restarted with a growing back-off, unless it
raised :class:`SourceUnavailable` (NVML on a node with no GPU: retrying will not help). One
source that hangs or dies never silences the others: each has its own thread, and publishing
never blocks on Kafka.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from faultlens.collectors.agent_health import blind_spots
from faultlens.collectors.checks.source import ChecksSource
from faultlens.collectors.checks.suite import ChecksConfig
from faultlens.collectors.command_listener import StackCaptureSource
from faultlens.collectors.file_follower import FileFollower
from faultlens.collectors.file_mark import FileMarks, mark_path
from faultlens.collectors.heartbeat import HeartbeatSource
from faultlens.collectors.kernel_follower import open_kernel_reader
from faultlens.collectors.kernel_mark import BOOT_ID_FILE, MARK_FILE, KernelMark, read_boot_id
from faultlens.collectors.log_source import LogSource, keyed
from faultlens.collectors.net_sampler import NetSampler, NetUnavailable
from faultlens.collectors.nvml_sampler import DEADLINE_S, NvmlSampler, NvmlUnavailable
from faultlens.collectors.publisher import Publisher
from faultlens.collectors.spool import Spool
from faultlens.collectors.stack_capture import TrainingProcess, find_training_processes
from faultlens.events.command_memory import CommandMemory
from faultlens.events.signing import VerifyKeys
from faultlens.streams.config import KafkaSettings

log = logging.getLogger(__name__)

# Errors that retrying will not fix: the source stays down and says why.
SourceUnavailable = (NvmlUnavailable, NetUnavailable)


class Source(Protocol):
    name: str

    def run(self, stop: threading.Event) -> None: ...


@dataclass
class AgentConfig:
    job: str
    node: str
    interval_s: float = 1.0
    heartbeat_interval_s: float = 5.0
    kernel: bool = True
    kernel_log: str | None = None
    kernel_from_start: bool = False
    trainer_logs: list[str] = field(default_factory=list)
    trainer_from_start: bool = False
    # NVIDIA fabric manager's log (NVSwitch errors, topology aborts): followed like a trainer log,
    # read by the kernel parser's catalogue (parsing/rules.toml, rules fm.*); None: not followed.
    fabric_manager_log: str | None = None
    # The log-line catalogue the parsers use (parsing.rules.load); None: the shipped one.
    line_rules: tuple | None = None
    nvml: bool = True
    nvml_deadline_s: float = DEADLINE_S  # an NVML call past this is a `gpu`/`unresponsive` event
    nvml_init_deadline_s: float | None = None  # nvmlInit's own (None: max(3 × deadline, 30 s))
    launcher_pid: int | None = None
    proc_pattern: str | None = None
    rank_env: str = "RANK"
    verify_keys: VerifyKeys | None = None  # public key(s) commands must be signed with
    verify_keys_error: str | None = None  # why there are none (shown as the stacks source's status)
    command_memory_file: Path | None = None  # command ids handled, kept across restarts (None: in memory only)
    spool_dir: Path = Path(".")
    spool_max_mb: float = 256.0
    create_topics: bool = True
    dump_timeout_s: float = 10.0
    send_timeout_s: float = 10.0  # how long a batch may wait for the broker before it is spooled
    checks: ChecksConfig = field(default_factory=ChecksConfig)  # stop-time checks run on `run_checks`
    net: bool = True  # RDMA port counters (collectors/net_sampler.py)
    net_interval_s: float = 5.0
    sysfs_root: str = "/sys"
    boot_id_file: str = BOOT_ID_FILE  # tells a restart in this boot from a new boot (collectors/kernel_mark.py)


class _Runner:
    """One source's thread: runs it, records its status, restarts it after a transient failure."""

    # A source that failed within this many seconds still reports the failure, even while it runs
    # again: a source that crashes every minute must not look healthy between crashes.
    ERROR_MEMORY_S = 60.0

    def __init__(self, source: Source, stop: threading.Event, backoff_s: float = 2.0, backoff_max_s: float = 60.0):
        self.source = source
        self.stop = stop
        self.state = "starting"
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.failures = 0
        self.last_error: str | None = None
        self.last_error_at = 0.0
        self.thread = threading.Thread(target=self._loop, name=f"source-{source.name}", daemon=True)

    @property
    def status(self) -> str:
        if self.state == "running":
            if self.last_error and time.monotonic() - self.last_error_at < self.ERROR_MEMORY_S:
                return f"error: {self.last_error} ({self.failures} failure(s), restarted)"
            return "ok"
        return self.state

    def _loop(self) -> None:
        delay = self.backoff_s
        while not self.stop.is_set():
            self.state = "running"
            log.info("source %s started", self.source.name)
            try:
                self.source.run(self.stop)
            except SourceUnavailable as exc:
                self.state = f"unavailable: {exc}"
                log.warning("source %s is off: %s", self.source.name, exc)
                return
            except Exception as exc:
                self.failures += 1
                self.last_error, self.last_error_at = f"{type(exc).__name__}: {exc}", time.monotonic()
                self.state = f"error: {self.last_error}"
                log.error("source %s failed (%s); restarting in %.0fs", self.source.name, exc, delay, exc_info=True)
                if self.stop.wait(delay):
                    break
                delay = min(delay * 2, self.backoff_max_s)
                continue
            if not self.stop.is_set():
                self.state = "exited"
                log.warning("source %s returned; not restarting", self.source.name)
                return
        self.state = "stopped"


class Agent:
    def __init__(self, config: AgentConfig, settings: KafkaSettings, *,
                 parser_factories: dict[str, Callable[[], Any]] | None = None,
                 extra_sources: list[Source] | None = None, nvml_module: Any = None,
                 kernel_reader: Callable[[bool], Any] | None = None):
        self.config = config
        self.settings = settings
        self.spool = Spool(config.spool_dir, int(config.spool_max_mb * 1024 * 1024))
        self.publisher = Publisher(settings, self.spool, create_topics=config.create_topics,
                                   send_timeout_s=config.send_timeout_s)
        self.stop_event = threading.Event()
        self.unavailable: dict[str, str] = {}  # sources not started at all, and why
        self.parser_factories = parser_factories or {}
        # The agent's start on the kernel's clock (printk stamps count from boot as CLOCK_MONOTONIC
        # does): kernel lines stamped before it are boot or history a previous agent reported, and
        # are recorded, not acted on (parsing/kernel_quiet.py), unless an agent before this one in
        # the same boot left a mark of how far it read: then the lines after its mark act, even those
        # logged while no agent ran (collectors/kernel_mark.py).
        self.started_uptime = time.monotonic()
        self.kernel_mark = KernelMark(Path(config.spool_dir) / MARK_FILE, boot_id=read_boot_id(config.boot_id_file),
                                      started_uptime=self.started_uptime)
        # Where each followed file was left by the agent before this one (collectors/file_mark.py).
        self.file_marks = {name: FileMarks(mark_path(config.spool_dir, name))
                           for name in ("kernel", "fabric_manager", "trainer")}
        # Opens the kernel reader given ``from_start`` (a fake ring in tests); None: open_kernel_reader.
        self._kernel_reader = kernel_reader or self._open_kernel_reader
        self.nvml_module = nvml_module  # a fake NVML for tests; None: pynvml
        self._blind: tuple[str, ...] = ()
        self.sources: list[Source] = self._build_sources() + list(extra_sources or [])
        self._runners = [_Runner(s, self.stop_event) for s in self.sources]
        self._started = False

    # --- sources -------------------------------------------------------------------------------
    def _parser_factory(self, kind: str) -> Callable[[], Any]:
        if kind in self.parser_factories:
            return self.parser_factories[kind]
        from faultlens.parsing.kernel_quiet import BOOT_UPTIME_S
        from faultlens.parsing.registry import parser_for

        rules = self.config.line_rules
        if kind == "kernel":
            # Never earlier than the boot window: an agent started with the machine still boots with it.
            live_from = self.kernel_mark.live_from(BOOT_UPTIME_S) if self.kernel_mark.resume_from is not None \
                else max(self.started_uptime, BOOT_UPTIME_S)
            return lambda: parser_for(kind, rules, live_from=live_from)
        return lambda: parser_for(kind, rules)

    def _open_kernel_reader(self, from_start: bool) -> Any:
        marks = self.file_marks["kernel"]
        # A kern.log read on across a reboot would hand the old boot's last lines (the Xid that
        # crashed it, stamped with that boot's uptimes) to a parser that takes them for this one's:
        # read on only within the boot the kernel mark vouches for, or after this agent's own failure.
        same_boot = self.kernel_mark.resume_from is not None or marks.following
        reader = open_kernel_reader(self.config.kernel_log, from_start, resume=marks.latest() if same_boot else None)
        return marks.follow(reader) if self.config.kernel_log else reader

    def _followed(self, name: str, patterns: list[str], from_start: bool) -> FileFollower:
        """A follower of ``patterns`` that reads on from where the last agent's left each file."""
        marks = self.file_marks[name]
        return marks.follow(FileFollower(patterns, from_start=from_start, resume=marks.latest()))

    def _build_sources(self) -> list[Source]:
        c, publish = self.config, self.publisher.publish
        sources: list[Source] = []
        if c.nvml:
            sources.append(NvmlSampler(job=c.job, node=c.node, interval_s=c.interval_s, publish=publish,
                                       nvml=self.nvml_module, deadline_s=c.nvml_deadline_s,
                                       init_deadline_s=c.nvml_init_deadline_s))
        if c.net:
            sources.append(NetSampler(job=c.job, node=c.node, interval_s=c.net_interval_s, publish=publish,
                                      sysfs_root=c.sysfs_root))
        if c.kernel:
            mark, file_mark = self.kernel_mark, self.file_marks["kernel"]

            def kernel_fed(published: bool, *, final: bool = False) -> None:
                mark.fed(published, final=final)
                file_mark.fed(published, final=final)

            sources.append(LogSource(
                "kernel",
                lambda: keyed(mark.open(self._kernel_reader, from_start=c.kernel_from_start,
                                        resumable=not c.kernel_log), "kernel"),
                self._parser_factory("kernel"), job=c.job, node=c.node, publish=publish, on_fed=kernel_fed))
        fabric_log = c.fabric_manager_log
        if fabric_log:
            # Its events go out as source `kernel`: a host daemon's word about the NVSwitch fabric,
            # judged by the same rules as the driver's SXid lines.
            sources.append(LogSource(
                "fabric_manager", lambda: self._followed("fabric_manager", [fabric_log], False),
                self._parser_factory("kernel"), job=c.job, node=c.node, publish=publish,
                on_fed=self.file_marks["fabric_manager"].fed))
        if c.trainer_logs:
            sources.append(LogSource(
                "trainer", lambda: self._followed("trainer", c.trainer_logs, c.trainer_from_start),
                self._parser_factory("nccl"), job=c.job, node=c.node, publish=publish,
                on_fed=self.file_marks["trainer"].fed))
        if c.verify_keys is not None:
            sources.append(StackCaptureSource(
                self.settings, keys=c.verify_keys, job=c.job, node=c.node, publish=publish,
                launcher_pid=c.launcher_pid, proc_pattern=c.proc_pattern, rank_env=c.rank_env,
                dump_timeout_s=c.dump_timeout_s, memory=CommandMemory(c.command_memory_file)))
            # Its own command memory file: two listeners rewriting one file would drop each other's ids.
            checks_memory = c.command_memory_file.with_name(f"{c.command_memory_file.stem}-checks{c.command_memory_file.suffix}") \
                if c.command_memory_file else None
            sources.append(ChecksSource(self.settings, keys=c.verify_keys, job=c.job, node=c.node, publish=publish,
                                        config=c.checks, memory=CommandMemory(checks_memory)))
        else:
            self.unavailable["stacks"] = c.verify_keys_error or "no command verify key"
            self.unavailable["checks"] = c.verify_keys_error or "no command verify key"
        sources.append(HeartbeatSource(job=c.job, node=c.node, interval_s=c.heartbeat_interval_s, publish=publish,
                                       statuses=self.statuses, processes=self.training_processes,
                                       health=self.health))
        return sources

    def health(self) -> dict[str, Any]:
        """The agent's own health (the heartbeat's ``health``, docs/agent.md): read from counters the
        sources keep, so it never waits on NVML, py-spy, Kafka or the disk."""
        out: dict[str, Any] = {}
        for s in self.sources:
            if isinstance(s, NvmlSampler):
                out["nvml"] = s.health()
        out["followers"] = {s.name: s.health() for s in self.sources if isinstance(s, LogSource)}
        out["spool"] = self.spool.health()
        out["publisher"] = self.publisher.health()
        spots = blind_spots(out, self.statuses(), interval_s=self.config.interval_s)
        out["blind"] = [b.to_dict() for b in spots]
        names = tuple(b.what for b in spots)
        if names != self._blind and not self.stop_event.is_set():  # stopping: its sources stop, no blindness
            if spots:
                log.error("the agent cannot see: %s", "; ".join(f"{b.what}: {b.why}" for b in spots))
            else:
                log.warning("the agent sees again (was blind to %s)", ", ".join(self._blind))
            self._blind = names
        return out

    def training_processes(self) -> list[TrainingProcess]:
        c = self.config
        if c.launcher_pid is None and not c.proc_pattern:
            return []
        return find_training_processes(launcher_pid=c.launcher_pid, proc_pattern=c.proc_pattern, rank_env=c.rank_env)

    def training_pids(self) -> list[int]:
        return [p.pid for p in self.training_processes()]

    def source(self, name: str) -> Source:
        return next(s for s in self.sources if s.name == name)

    def statuses(self) -> dict[str, str]:
        out = {r.source.name: r.status for r in self._runners}
        out.update({name: f"off: {why}" for name, why in self.unavailable.items()})
        out["publisher"] = self.publisher.status()
        return out

    # --- life ----------------------------------------------------------------------------------
    def start(self) -> "Agent":
        self._started = True
        self.publisher.start()
        for runner in self._runners:
            runner.thread.start()
        for name, why in self.unavailable.items():
            log.warning("source %s is off: %s", name, why)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every source, say so in a last beat, then let the publisher send (or spool) what
        they produced."""
        self.stop_event.set()
        deadline = time.monotonic() + timeout
        for runner in self._runners:
            runner.thread.join(max(0.1, deadline - time.monotonic()))
            if runner.thread.is_alive():
                log.warning("source %s did not stop in time; leaving it", runner.source.name)
        self._last_beat()
        self.publisher.stop(timeout=max(5.0, deadline - time.monotonic()))

    def _last_beat(self) -> None:
        """``stopping``: the node's silence from now on is this stop, not the machine (a job's
        agents are stopped one node at a time when it ends; the first must not be judged dead)."""
        if not self._started:
            return  # never started: it said nothing, and has nothing to take back
        heartbeat = self.source("heartbeat")
        assert isinstance(heartbeat, HeartbeatSource)  # _build_sources always adds it
        try:
            heartbeat.beat(stopping=True)
        except Exception:  # noqa: BLE001 - the stop goes on; the silence is then judged as any other
            log.exception("the last beat failed")

    def __enter__(self) -> "Agent":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
