"""A port chosen for a child to listen on later lies outside the range the kernel hands outgoing
connections (a CI run lost a trainer's rendezvous to a port taken in between)."""

from __future__ import annotations

import random
import socket

import pytest

from faultlens.streams import local_port
from faultlens.streams.local_port import ephemeral_start, free_port


def test_the_port_binds_and_lies_below_the_kernels_ephemeral_range():
    start = ephemeral_start()
    if start is None or start - 10_000 < 64:
        pytest.skip(f"this machine leaves no room below its ephemeral range (starts at {start})")
    ports = {free_port() for _ in range(20)}
    assert all(10_000 <= p < start for p in ports), (sorted(ports), start)
    assert len(ports) > 1  # chosen at random: two launchers at once do not pick the same one
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_taken_by_a_listener_is_never_chosen(monkeypatch, tmp_path):
    # Room for exactly the tries: every pick falls in [10000, 10064), one of them held by a listener.
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        (tmp_path / "range").write_text(f"{taken + 64}\t60999\n")
        monkeypatch.setattr(local_port, "_RANGE_FILE", tmp_path / "range")
        monkeypatch.setattr(local_port, "_LOWEST", taken)
        chosen = [free_port(rng=random.Random(seed)) for seed in range(30)]
        assert taken not in chosen and all(taken < p < taken + 64 for p in chosen), chosen
    finally:
        held.close()


@pytest.mark.parametrize("text", [None, "garbage", "10020\t60999"])
def test_without_room_or_a_readable_range_the_kernel_picks(monkeypatch, tmp_path, text):
    kernels = ephemeral_start()
    path = tmp_path / "range"
    if text is not None:
        path.write_text(text)
    monkeypatch.setattr(local_port, "_RANGE_FILE", path)
    port = free_port()
    assert kernels is None or port >= kernels  # the kernel's own pick, from its range
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
