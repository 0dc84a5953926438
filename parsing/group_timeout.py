"""A barrier or collective among a job's tasks or ranks that did not complete in time (issue 54).

Every distributed runtime waits for all its tasks at a barrier (JAX's coordination service: ``DEADLINE_EXCEEDED:
Barrier timed out. Barrier_id: PjRT_Client_Connect``), a collective (TensorFlow's ``BaseCollectiveExecutor::StartAbort
DEADLINE_EXCEEDED``, UCC's ``timeout ... has expired on task ..., team id 1 size 4 rank 2: Bcast``) or a rendezvous,
and says so in its own words when one of them never arrived. A person reads the collective's failure as torch's
watchdog timeout is read (parsing/nccl_lines.py): ``nccl_error``. The line states that the wait ended late (timed out,
deadline exceeded, a timeout that has expired), not a product's name; a line that only names a timeout (a setting,
``barrier_timeout=300``) or a broadcast outside a group of ranks (DHCP, ARP) is not it. An alert at most: which task
was late, and why, is in other lines (docs/design.md §1: a line read by its words is evidence, never an eviction).

Pure function of one line; the trainer parser (parsing/trainer_log.py) asks it after its catalogue and the watchdog.
"""

from __future__ import annotations

import re
from typing import Any

from faultlens.parsing.line import common

# What waited: a barrier, a rendezvous or a collective (also inside a runtime's identifier: BaseCollectiveExecutor)...
_GROUP_WAIT = re.compile(r"(?i)barrier|rendezvous|collective")
# ...or a collective operation by its name, where the line also names the tasks or ranks it was among.
_OP_NAME = re.compile(r"(?i)\b(?:all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|bcast|broadcast)\b")
_MEMBERS = re.compile(r"(?i)\b(?:rank|task|team)s?\b")
# The wait ended late: said as done, not as a setting (timeout=, timeout set to) or a possibility.
_LATE = re.compile(r"(?i)\btimed[ _-]?out\b|\bdeadline[ _]exceeded\b|\btime ?out\b[^;]{0,40}?\bha(?:s|ve) expired\b")
# The same words denied or conditional: no fault was seen.
_NOT_LATE = re.compile(r"(?i)\b(?:not|never|no|if|unless|without)\b\W+(?:\w+\W+){0,2}?(?:timed[ _-]?out|deadline)")


def late_group(msg: str) -> bool:
    """Whether the line says a barrier, rendezvous or collective among tasks/ranks did not complete in time."""
    if not _LATE.search(msg) or _NOT_LATE.search(msg):
        return False
    return bool(_GROUP_WAIT.search(msg) or (_OP_NAME.search(msg) and _MEMBERS.search(msg)))


def group_timeout(msg: str, raw: str, rank: int | None, extra: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The ``nccl_error`` alert of a line whose barrier or collective among tasks/ranks timed out, or None."""
    if not late_group(msg):
        return None
    return "nccl_error", common(
        raw, "nccl_error", "alert", "error", rank=rank, error="group_timeout", text=msg.strip()[:512], **extra
    )
