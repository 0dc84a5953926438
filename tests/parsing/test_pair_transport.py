"""A collective library's pair transport that failed to connect two ranks (gloo's, parsing.errors' _PAIR_TRANSPORT):
each form on a line written here, beside the healthy look-alike its guard is for."""

from __future__ import annotations

import pytest

from faultlens.parsing.errors import PAIR_TRANSPORT
from faultlens.parsing.registry import parser_for


def _events(line: str) -> list[tuple[str, str, str | None]]:
    parser = parser_for("nccl")
    events = list(parser.feed(line)) + parser.flush()
    return [(e.data.get("fault"), e.data.get("action"), e.data.get("error")) for e in events]


def _pair_alerts(line: str) -> list[tuple[str, str, str | None]]:
    return [e for e in _events(line) if (e[2] or "").startswith(PAIR_TRANSPORT)]


@pytest.mark.parametrize(
    ("line", "look_alike"),
    [
        # the process group's full mesh that failed, as c10d logs it; not the mesh's count of connected peers
        (
            "[rank3]:[E1201 10:00:00.000000000 ProcessGroupGloo.cpp:143] Gloo connectFullMesh failed with [/src/third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
            "[Gloo] Rank 3 is connected to 7 peer ranks. Expected number of connected peer ranks is : 7",
        ),
        # the same failure as the exception torch raises; not a process group set up with a connect timeout
        (
            "RuntimeError: Gloo connectFullMesh failed with [/src/third_party/gloo/gloo/transport/tcp/pair.h:301] Connect timeout [none]",
            "[I1201 10:00:00 ProcessGroupGloo.cpp:710] Gloo full mesh of 8 ranks set up, connect timeout 1800 s",
        ),
        # the transport's connect refused, in a C++ abort; not the same file saying its connect succeeded
        (
            "  what():  [/src/third_party/gloo/gloo/transport/tcp/pair.cc:724] connect [10.1.2.3]:29500: Connection refused",
            "[I1201 10:00:00 /src/third_party/gloo/gloo/transport/tcp/pair.cc:700] connect [10.1.2.3]:29500: connected",
        ),
    ],
)
def test_a_pair_transport_that_failed_is_an_nccl_alert_and_its_look_alike_is_not(line: str, look_alike: str) -> None:
    found = _pair_alerts(line)
    assert found and all(e[:2] == ("nccl_error", "alert") for e in found)
    assert not _pair_alerts(look_alike)
    assert not [e for e in _events(look_alike) if e[1] not in (None, "record_only")]


def test_a_pairs_later_read_keeps_its_own_reading() -> None:
    """A peer that closed an established pair is read as before (the socket's words, a reattempt), not as a connect."""
    line = "RuntimeError: [/src/third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.1.2.3]:29500"
    assert ("nccl_error", "reattempt", "connection closed by peer") in _events(line)
    assert not _pair_alerts(line)
