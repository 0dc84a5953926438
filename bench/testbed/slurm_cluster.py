"""A real, one-machine Slurm cluster for tests and benches: munged + slurmctld (+ slurmd) in a temp dir.

Debian's `slurm-wlm` and `munge` (``apt-get install -y slurm-wlm munge``). The config defines
``fl-node1`` (this host, served by a slurmd started here, so jobs really run) and ``fl-node[2-4]``,
defined with ports nothing listens on, so they never register: the state a real cluster shows for
machines that are down. Everything (key, sockets, state, logs, ports) is private to the temp
dir, so it never touches /etc/slurm or a system munged, and two test runs do not collide.

Tests that use it have ``slurm`` in their names (docs/design.md §9); their pytest fixtures are
tests/remediation/slurm_fixture.py; bench/bench_slurm_actuator.py starts one by hand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from faultlens.streams.local_port import free_port

BINARIES = ("munged", "slurmctld", "slurmd", "scontrol", "scancel", "sbatch", "squeue")
REAL_NODE = "fl-node1"
GHOST_NODES = ("fl-node2", "fl-node3", "fl-node4")


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def skip_reason() -> str | None:
    """Why the Slurm tests cannot run here, or None."""
    missing = missing_binaries()
    if missing:
        return (f"Slurm/munge not installed (missing {', '.join(missing)}): "
                "`apt-get install -y slurm-wlm munge` (Debian/Ubuntu) to run the real-slurmctld tests")
    if os.geteuid() != 0:
        return "the Slurm test cluster runs slurmd, which needs root"
    return None


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


# One CPU and 256 MB per node: a machine with less than the config says would register as
# INVALID and be drained by slurmctld itself, so ask for what any test machine has.
SLURM_CONF = """\
ClusterName=faultlens-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
JobRequeue=1
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=2
PlugStackConfig={d}/plugstack.conf
NodeName={real} NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=1 RealMemory=256 State=UNKNOWN
NodeName={ghost_spec} NodeHostname=localhost NodeAddr=127.0.0.1 Port={ghost_port} CPUs=1 RealMemory=256 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class SlurmStartError(RuntimeError):
    pass


@dataclass
class SlurmCluster:
    """Started by :meth:`start`, stopped by :meth:`stop`; ``env`` is what Slurm clients need."""

    root: Path
    with_slurmd: bool = True
    conf: Path = field(init=False)
    env: dict[str, str] = field(init=False)
    started_in_s: float = 0.0
    _procs: list[subprocess.Popen] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.conf = self.root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    # --- setup ----------------------------------------------------------------------------------
    def _write(self) -> None:
        d = self.root
        for sub in ("state", "spool", "munge"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d / "munge", 0o700)
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        (d / "plugstack.conf").write_text("")
        ctld, slurmd, ghost = _free_ports(3)
        self.munge_socket = d / "munge" / "munge.socket"
        self.conf.write_text(SLURM_CONF.format(
            d=d, ctld_port=ctld, slurmd_port=slurmd, ghost_port=ghost, munge_socket=self.munge_socket,
            real=REAL_NODE, ghost_spec=f"fl-node[{GHOST_NODES[0][-1]}-{GHOST_NODES[-1][-1]}]"))

    def _spawn(self, argv: list[str], log_name: str) -> subprocess.Popen:
        log = open(self.root / log_name, "ab")
        p = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        log.close()
        self._procs.append(p)
        return p

    def start(self, timeout_s: float = 30.0) -> "SlurmCluster":
        t0 = time.monotonic()
        self._write()
        d = self.root / "munge"
        self._spawn([_binary("munged"), "--foreground", "--force", f"--socket={self.munge_socket}",
                     f"--key-file={d / 'munge.key'}", f"--pid-file={d / 'munged.pid'}",
                     f"--log-file={d / 'munged.log'}", f"--seed-file={d / 'munged.seed'}"], "munged.out")
        self._wait(lambda: self.munge_socket.exists(), timeout_s, "munged socket")
        # -c: a cold start (no saved state); -i: ignore state files a crash may have left.
        self._spawn([_binary("slurmctld"), "-D", "-c", "-i", "-f", str(self.conf)], "slurmctld.out")
        self._wait(self._controller_up, timeout_s, "slurmctld answering `scontrol ping`")
        if self.with_slurmd:
            self._spawn([_binary("slurmd"), "-D", "-N", REAL_NODE, "-f", str(self.conf)], "slurmd.out")
            self._wait(lambda: self.node_state(REAL_NODE).split("+")[0] in ("IDLE", "MIXED", "ALLOCATED"),
                       timeout_s, f"{REAL_NODE} registering as IDLE")
        self.started_in_s = time.monotonic() - t0
        return self

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [p for p in self._procs if p.poll() is not None]
            if dead:
                raise SlurmStartError(f"{dead[0].args[0]} exited with {dead[0].returncode} waiting for {what}\n"
                                      + self.logs())
            try:
                if ready():
                    return
            except (OSError, subprocess.SubprocessError):
                pass
            time.sleep(0.2)
        raise SlurmStartError(f"timed out after {timeout_s:.0f}s waiting for {what}\n" + self.logs())

    def logs(self) -> str:
        out = []
        for name in ("munged.out", "munge/munged.log", "slurmctld.out", "slurmctld.log", f"slurmd-{REAL_NODE}.log",
                     "slurmd.out"):
            p = self.root / name
            if p.exists():
                out.append(f"--- {name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-20:]))
        return "\n".join(out)

    def _controller_up(self) -> bool:
        r = self.run(["scontrol", "ping"], check=False)
        return r.returncode == 0 and "UP" in r.stdout

    # --- clients --------------------------------------------------------------------------------
    def run(self, argv: list[str], check: bool = True, timeout: float = 10.0) -> subprocess.CompletedProcess:
        return subprocess.run([shutil.which(argv[0]) or argv[0], *argv[1:]], env=self.env, capture_output=True,
                              text=True, timeout=timeout, check=check)

    def node_state(self, node: str) -> str:
        r = self.run(["scontrol", "show", "node", "-o", node], check=False)
        for tok in r.stdout.split():
            if tok.startswith("State="):
                return tok[len("State="):]
        return ""

    def submit(self, script: str, *extra: str) -> str:
        """Submit a batch job to the real node; returns its id."""
        r = self.run(["sbatch", "--parsable", f"--nodelist={REAL_NODE}", "-N1", "-n1",
                      f"--chdir={self.root}", f"--output={self.root}/job-%j.out", *extra, "--wrap", script])
        return r.stdout.strip().split(";")[0]

    def job_field(self, job_id: str, name: str) -> str:
        r = self.run(["scontrol", "show", "job", "-o", job_id], check=False)
        for tok in r.stdout.split():
            if tok.startswith(f"{name}="):
                return tok[len(name) + 1:]
        return ""

    def wait_for(self, ready, timeout_s: float = 15.0, what: str = "condition") -> None:
        self._wait(ready, timeout_s, what)

    def _stray_pids(self) -> list[int]:
        """slurmstepd and job processes of this cluster: slurmd forks them off, so they are no
        children of ours; they carry this cluster's SLURM_CONF in their environment."""
        mark = f"SLURM_CONF={self.conf}".encode()
        own = {p.pid for p in self._procs}
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) in own or int(proc.name) == os.getpid():
                continue
            try:
                if mark in (proc / "environ").read_bytes().split(b"\0"):
                    pids.append(int(proc.name))
            except OSError:
                continue
        return pids

    def stop(self) -> None:
        if self._procs:
            # Cancel this cluster's jobs while slurmd can still clean them up.
            self.run(["scancel", "--user=root", "--full"], check=False)
            try:
                self._wait(lambda: not self.run(["squeue", "--noheader"], check=False).stdout.strip(), 5.0,
                           "jobs to end")
            except SlurmStartError:
                pass
        for p in reversed(self._procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self._procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        self._procs.clear()
        for pid in self._stray_pids():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
