"""What a trainer's stream says about its job that one line alone cannot (issue 54, round 47).

A launcher's host label before every line (pdsh's, as DeepSpeed's multi-node launcher runs the job through it:
``localhost: [rank2]:...``) hides the rank's prefix, NCCL's own prefix and c10's stack header from the readings that
look for them at the line's start: it is read off. A ProcessGroupNCCL line names its rank in its own words
(``[PG ID 0 PG GUID 0(default_pg) Rank 2]``), which keys its fold where no prefix does. And a job that ends cleanly
closes its sockets: once a rank's program-exit note comes while nothing has acted, the store client losing the store and
NCCL's socket return codes are the teardown, recorded, for a bounded while (one stream outlives its jobs).
"""

from __future__ import annotations

import re
from typing import Any

from faultlens.parsing.kernel_quiet import record_only

# pdsh's label of every line with the host it came from ("localhost: ", "192.168.205.202: ", "node-3.cluster: "), before
# a rank's prefix, NCCL's own prefix ("192.168.205.202: DGX2-2:1314970:1316911 [0] NCCL INFO ...") or c10's stack header
# ("localhost: Exception raised from run at ..."): the line is read as without it.
_HOST_LABEL = re.compile(
    r"^[A-Za-z0-9][\w\-]*(?:\.[\w\-]+)*: (?=\[(?:rank|default)\d+\]:|[\w.\-]+:\d+:\d+ \[\d+\] NCCL |Exception raised from )")
# ProcessGroupNCCL's log prefix names its rank ("[PG ID 0 PG GUID 0(default_pg) Rank 2] ", older "[PG 0 Rank 1] ",
# "[Rank 0] ").
_PG_RANK = re.compile(r"\[(?:PG (?:ID )?\d+ (?:PG GUID \d+(?:\([\w\-]*\))? )?)?Rank (\d+)\]")
# A rank's note that its program is exiting without tearing its process group down (torch >= 2.4 ProcessGroupNCCL's
# destructor, at W: "WARNING: destroy_process_group() was not called before program exit, which can leak resources."):
# printed by every rank of a job that ends, cleanly or not; clean when nothing acted before it.
_PROGRAM_EXIT = re.compile(r"\bdestroy_process_group\(\) was not called before program exit\b")
# The socket layer's failures a job's teardown shows as its ranks exit one by one: c10d's store client losing the store
# (whose server is rank 0's process: "[c10d] recvValue failed on SocketImpl(...): Connection reset by peer") and NCCL's
# return-code trace through its socket code ("NCCL INFO misc/socket.cc:64 -> 3").
_TEARDOWN_SOCKET = re.compile(r"\[c10d\] (?:recv|send)(?:Value|Bytes) failed on SocketImpl\(|\bNCCL INFO (?:misc/)?socket\.cc:\d+ -> \d+")
# How long a clean exit's teardown may last after the first program-exit note: its ranks' sockets close within seconds
# (the healthy DeepSpeed run of whole_logs/fresh2: 6 s, 170 lines of NCCL INFO between).
TEARDOWN_LINES = 2000
TEARDOWN_S = 120.0


def host_label_off(body: str) -> str:
    """``body`` without a launcher's host label before a prefix this parser reads."""
    if ": " in body[:64] and (host := _HOST_LABEL.match(body)) is not None:
        return body[host.end():]
    return body


def named_rank_key(key: Any, msg: str) -> Any:
    """The fold key of a line: its prefix's, else (no prefix) the rank ProcessGroupNCCL's words name, else None."""
    if key is None and (named := _PG_RANK.search(msg)) is not None:
        return ("rank", int(named.group(1)))
    return key


def _acts(out: list[Any]) -> bool:
    return any(e.data.get("action") not in (None, "none") for e in out)


class CleanExit:
    """Whether the stream's job is exiting cleanly: a program-exit note read while nothing had acted, nothing acted
    since, within TEARDOWN_LINES and TEARDOWN_S of it."""

    def __init__(self) -> None:
        self.failed = False
        self.at: tuple[int, float | None] | None = None  # (line, time) of the first such note

    def tearing_down(self, n: int, t: float | None) -> bool:
        if self.at is None or self.failed:
            return False
        n0, t0 = self.at
        return n - n0 <= TEARDOWN_LINES and (t0 is None or t is None or 0 <= t - t0 <= TEARDOWN_S)

    def read(self, n: int, t: float | None, msg: str, out: list[Any], again: bool = False) -> None:
        """One line's events: its sockets' closing recorded in a clean teardown; the program-exit note and any acting
        event noted. Not a reading again (``again``: parsing/trainer_log.py _realigned decides, then calls kept)."""
        if again:
            return
        if out and self.tearing_down(n, t) and _TEARDOWN_SOCKET.search(msg) is not None:
            record_only([(e.kind, e.data) for e in out if e.data.get("fault") == "nccl_error"],
                        "a socket closing after the job's clean program exit (nothing failed before it): its teardown")
        elif "before program exit" in msg and not self.failed and self.at is None and _PROGRAM_EXIT.search(msg) is not None:
            self.at = (n, t)
        self.failed = self.failed or _acts(out)

    def kept(self, out: list[Any]) -> None:
        """A reading again's events the parser keeps (parsing/trainer_log.py _realigned)."""
        self.failed = self.failed or _acts(out)
