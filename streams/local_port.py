"""A port on this machine for a child process to listen on later.

A port found free by binding port 0 comes from the kernel's ephemeral range, and between our close
and the child's bind any outgoing connection on the machine (a Kafka client's, a test's) may be
handed it: the child's listen then fails with EADDRINUSE (a CI run lost a trainer's rendezvous,
torch's TCPStore on MASTER_PORT, that way). Ports below that range are never given to outgoing
connections, so a random one that binds now is taken later only by another listener choosing the
same way, one chance in thousands.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000  # below: the well-known and registered services a machine may run
_TRIES = 64


def ephemeral_start(path: Path | None = None) -> int | None:
    """The first port the kernel gives outgoing connections, or None where it cannot be read."""
    try:
        return int((path or _RANGE_FILE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _binds(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1", *, rng: random.Random | None = None) -> int:
    """A port that binds on ``host`` now, below the ephemeral range where the machine leaves room
    for one; else (no room, or every try taken) one the kernel picks."""
    start = ephemeral_start()
    if start is not None and start - _LOWEST >= _TRIES:
        pick = rng or random.SystemRandom()
        for _ in range(_TRIES):
            port = pick.randrange(_LOWEST, start)
            if _binds(host, port):
                return port
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
