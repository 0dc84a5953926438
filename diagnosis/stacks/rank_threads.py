"""Read every thread of one rank's dump, not only the training thread, and read waits the name table misses.

Two things the frame-name table of :mod:`diagnosis.stacks.wait_primitives` cannot see (issue 38):

* a trainer's own pipeline helpers (``_communicate``, ``send_forward`` in its own file) post
  ``isend``/``irecv`` and block in ``Work.wait()``, which is C++: py-spy shows the helper's line,
  idle, and no torch.distributed frame. An idle thread whose innermost frames are named as a
  send / receive / exchange, in none of the suspect contexts (data loading, checkpoint, I/O,
  lock), is read as waiting in point-to-point; its direction comes from the names;
* a rank whose main thread waits on a Future or lock while another thread of its own runs
  (an optimizer offload thread in a runaway step): the main thread is no culprit by itself,
  the active worker is what the rank is doing.

py-spy's thread state (``idle`` / ``active``) is the evidence that a thread is blocked or
running; faulthandler has none, and then only the names decide.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from faultlens.diagnosis.stacks.stack_dump import ThreadStack, parse_dump, training_thread
from faultlens.diagnosis.stacks.wait_primitives import (
    COLLECTIVE,
    RECV,
    SEND,
    SENDRECV,
    Primitive,
    RankActivity,
    direction_hint,
    read_activity,
)
from faultlens.events.topology import AXES, Topology

_P2P_NAME = re.compile(r"(?:^|_)(?:i?send|i?recv|communicate|p2p|sendrecv|exchange)(?:_|$)", re.I)
_RECV_SIDE = re.compile(r"recv_(forward|backward)", re.I)
_SEND_SIDE = re.compile(r"send_(forward|backward)", re.I)
_INNERMOST = 3  # frames from the top of the stack in which a p2p helper's name counts
_IGNORED = re.compile(r"listener|heartbeat|faultlens|watchdog|pt_elastic|monitor|dump", re.I)


@dataclass(frozen=True, slots=True)
class RankReading:
    """What one rank is doing, read from all its threads."""

    activity: RankActivity | None  # the training thread's, with project p2p waits read in
    main_status: str | None  # py-spy's state of the training thread
    busy_threads: tuple[str, ...] = ()  # other threads running (py-spy "active"): "optimizer-offload_0: _spin (f.py:9)"

    @property
    def waiting(self) -> bool:
        return self.activity is not None and self.activity.waiting

    def describe(self) -> str:
        if self.activity is None:
            return "no usable stack"
        text = self.activity.activity + f" in {self.activity.frame}"
        if self.busy_threads and not self.waiting:
            text += "; running meanwhile: " + ", ".join(self.busy_threads[:2])
        return text


def read_rank(text: str) -> RankReading:
    """One dump's text → :class:`RankReading` (no usable thread: an activity of None)."""
    threads = parse_dump(text)
    main = training_thread(threads)
    if main is None or main.truncated:
        return RankReading(None, None)
    act = read_thread(main)
    busy = tuple(
        f"{t.name or t.thread_id}: {t.frames[0]}" for t in threads
        if t is not main and t.frames and _running(t) and not (t.name and _IGNORED.search(t.name))
    )
    if act is not None and not act.waiting and act.activity in ("lock", "compute") and busy and not _running(main):
        # The main thread waits on its own worker (Future.result, a lock): the worker is the activity.
        act = RankActivity(False, None, act.frame, f"{act.activity} while thread {busy[0]} runs")
    return RankReading(act, main.status, busy)


def read_thread(thread: ThreadStack) -> RankActivity | None:
    """:func:`read_activity` of one thread, with a blocked trainer-own p2p helper read as waiting."""
    act = read_activity(thread.frames)
    if act is not None and not act.waiting and act.activity == "compute" and not _running(thread):
        return _project_p2p(thread) or act
    return act


def shared_blocked_calls(threads: Mapping[int, ThreadStack], activities: Mapping[int, RankActivity],
                         topology: Topology) -> dict[int, RankActivity]:
    """Ranks blocked at the same line of their own code as a peer of one of their groups: waiting.

    A thread idle in a frame no table knows (the trainer's own ``finish_grad_sync`` blocked in
    ``Work.wait()``) is blocked in C. One such rank alone may be the culprit (a read that never
    returns), and so may the ranks of one machine blocked together (its TP group in one hung
    read); ranks on several machines blocked at the same line, each with a group peer there, are
    at a synchronisation point, waiting on someone else. Returns the new activities of those ranks (a collective of
    unknown group: the wait chains look for stragglers on every axis).
    """
    blocked: dict[tuple, list[int]] = {}
    for rank, act in activities.items():
        thread = threads.get(rank)
        if thread is None or act.waiting or act.activity != "compute" or not thread.frames:
            continue
        if thread.tool != "py-spy" or not thread.status or "idle" not in thread.status:
            continue  # no thread state, or running: nothing says it is blocked
        top = thread.frames[0]
        blocked.setdefault((top.function, top.file, top.line), []).append(rank)
    out: dict[int, RankActivity] = {}
    for (function, _file, _line), ranks in blocked.items():
        at = set(ranks)
        if len({topology.by_rank[r].node for r in at}) < 2:
            # Ranks of one machine blocked together (its TP group in one hung read) are where a
            # machine stopped, not a synchronisation point: they stay suspects.
            continue
        for rank in ranks:
            peers = {m for axis in AXES for m in topology.group_ranks(axis, topology.group_id(rank, axis))} - {rank}
            if not peers & at:
                continue
            frames = threads[rank].frames
            name = function.rsplit(".", 1)[-1]
            prim = Primitive(COLLECTIVE, name, "trainer")
            out[rank] = RankActivity(True, prim, activities[rank].frame,
                                     f"waiting in {name} (blocked where group peers are blocked)",
                                     None, None, tuple(f.key for f in frames[:4]))
    return out


def _running(thread: ThreadStack) -> bool:
    return thread.status is not None and "active" in thread.status


def _project_p2p(thread: ThreadStack) -> RankActivity | None:
    """A blocked thread in a helper named as point-to-point: waiting, kind and side from the names."""
    if thread.tool == "py-spy" and (thread.status is None or "idle" not in thread.status):
        return None  # py-spy saw it run, or could not tell: no wait by name alone
    frames = thread.frames
    for i, frame in enumerate(frames[:_INNERMOST]):
        name = frame.function.rsplit(".", 1)[-1]
        if not _P2P_NAME.search(name):
            continue
        kind, direction = SENDRECV, None
        for caller in frames[i:i + _INNERMOST + 1]:
            cname = caller.function.rsplit(".", 1)[-1]
            recv, send = _RECV_SIDE.search(cname), _SEND_SIDE.search(cname)
            side = recv or send
            if side is not None:
                # send_forward_recv_backward waits on its receiving half, as wait_chain reads SENDRECV.
                kind = SENDRECV if recv and send else (RECV if recv else SEND)
                direction = side.group(1).lower()
                break
        if direction is None:
            direction = direction_hint(frames[i + 1:])
        where = f"{frame.function} ({frame.file}{'' if frame.line is None else f':{frame.line}'})"
        prim = Primitive(kind, name, "trainer", direction, "pp")
        site = tuple(f.key for f in frames[i:i + 4])
        return RankActivity(True, prim, where, f"waiting in {name} (the trainer's own p2p, blocked)", "pp", direction, site)
    return None


__all__ = ["RankReading", "read_rank", "read_thread", "shared_blocked_calls"]
