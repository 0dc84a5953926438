"""`stack`/`stack_dump` events → one dump per rank, as the hang and fail-slow detectors collect them.

One capture request can give a rank two dumps: the node agent's py-spy dump and the trainer
hook's faulthandler dump. py-spy names its threads, so it is kept when both arrive.

A node agent that finds no training process on its node still answers a capture, with no rank
(``rank: null, pid: null, ok: false``, collectors.command_listener): that is a
:class:`NoTrainerAnswer` for the whole node, read by :func:`read_stack_answer`, not a bad dump.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from streams.events import Envelope, InvalidEvent

PREFERRED_TOOL = "py-spy"


@dataclass(frozen=True, slots=True)
class StackDump:
    rank: int
    dump: str
    tool: str
    event_id: str
    ts: float
    node: str
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class NoTrainerAnswer:
    """A node's answer to a capture: its agent found no training process there (``reason`` is the
    agent's text, which says how it looked). Every rank the node holds has answered, with nothing."""

    node: str
    reason: str
    event_id: str
    ts: float
    request_id: str | None = None


def is_stack_dump(event: Envelope) -> bool:
    return event.source == "stack" and event.kind == "stack_dump"


def _request_id(data) -> str | None:
    request = data.get("request_id")
    return str(request) if request not in (None, "") else None


def read_stack_answer(event: Envelope) -> StackDump | NoTrainerAnswer:
    """A stack_dump event as what it is: one rank's dump, or a node's "no training process here".

    Only the exact shape the agent sends for the latter (``rank`` and ``pid`` null, ``ok: false``,
    the reason as ``dump`` text) is read so; any other payload goes through
    :func:`read_stack_dump` and its dead letters.
    """
    data = event.data
    if "rank" in data and data["rank"] is None:
        if data.get("pid") is not None:
            # A process was found but its rank could not be read (the agent's --rank-env): its
            # dump cannot be placed in the topology, so it is no use to any detector.
            raise InvalidEvent("data.rank", f"stack_dump of pid {data.get('pid')!r} has a null rank: the agent "
                                            f"could not read the process's rank, the dump cannot be placed")
        if data.get("ok") is not False:
            raise InvalidEvent("data.rank", "stack_dump with a null rank and no pid is a node's \"no training "
                                            f"process\" answer and must say ok: false, got ok={data.get('ok')!r}")
        reason = data.get("dump")
        if not isinstance(reason, str):
            raise InvalidEvent("data.dump", f"stack_dump needs the dump text, got {type(reason).__name__}")
        return NoTrainerAnswer(node=event.node, reason=reason, event_id=event.id, ts=event.ts,
                               request_id=_request_id(data))
    return read_stack_dump(event)


def read_stack_dump(event: Envelope) -> StackDump:
    """The payload of one rank's stack_dump event; InvalidEvent (a dead letter) names what is missing.
    A node's null-rank answer is an InvalidEvent here: read it with :func:`read_stack_answer`."""
    data = event.data
    rank = data.get("rank")
    if isinstance(rank, bool) or not isinstance(rank, int):
        if isinstance(rank, str) and rank.strip().isdigit():
            rank = int(rank)
        else:
            raise InvalidEvent("data.rank", f"stack_dump needs an integer rank, got {rank!r}")
    dump = data.get("dump")
    if not isinstance(dump, str):
        raise InvalidEvent("data.dump", f"stack_dump needs the dump text, got {type(dump).__name__}")
    tool = data.get("tool")
    return StackDump(
        rank=rank,
        dump=dump,
        tool=tool if isinstance(tool, str) else PREFERRED_TOOL,
        event_id=event.id,
        ts=event.ts,
        node=event.node,
        request_id=_request_id(data),
    )


class DumpSet:
    """The dumps of one capture (one hang, one fail-slow round): one per rank, py-spy preferred."""

    def __init__(self) -> None:
        self._by_rank: dict[int, StackDump] = {}
        self._no_trainer: dict[str, NoTrainerAnswer] = {}
        self.first_ts: float | None = None
        self.last_ts: float | None = None

    def add(self, dump: StackDump) -> bool:
        """Keep ``dump`` unless the rank already has one at least as good; True when kept."""
        old = self._by_rank.get(dump.rank)
        self.first_ts = dump.ts if self.first_ts is None else min(self.first_ts, dump.ts)
        self.last_ts = dump.ts if self.last_ts is None else max(self.last_ts, dump.ts)
        if old is not None and (old.tool == PREFERRED_TOOL or dump.tool != PREFERRED_TOOL):
            return False
        self._by_rank[dump.rank] = dump
        return True

    def add_no_trainer(self, answer: NoTrainerAnswer) -> bool:
        """Note that ``answer.node`` has no training process; the first answer of a node is kept."""
        if answer.node in self._no_trainer:
            return False
        self._no_trainer[answer.node] = answer
        return True

    def no_trainer(self) -> dict[str, NoTrainerAnswer]:
        """node → its "no training process" answer."""
        return dict(self._no_trainer)

    def answered(self, ranks_by_node: Mapping[str, Iterable[int]]) -> set[int]:
        """The ranks that answered: those with a dump and every rank of a node without a trainer."""
        out = set(self._by_rank)
        for node in self._no_trainer:
            out.update(ranks_by_node.get(node, ()))
        return out

    def gone(self, ranks_by_node: Mapping[str, Iterable[int]]) -> dict[str, tuple[int, ...]]:
        """node → its ranks that have no process (the node said so) and sent no dump either;
        nodes outside ``ranks_by_node`` (not in the job's topology) are left out."""
        out = {}
        for node in self._no_trainer:
            ranks = tuple(sorted(r for r in ranks_by_node.get(node, ()) if r not in self._by_rank))
            if ranks:
                out[node] = ranks
        return out

    def __len__(self) -> int:
        return len(self._by_rank)

    def all_preferred(self) -> bool:
        return all(d.tool == PREFERRED_TOOL for d in self._by_rank.values())

    def ranks(self) -> set[int]:
        return set(self._by_rank)

    def texts(self, known: Iterable[int] | None = None) -> dict[int, str]:
        """rank → dump text, only for ``known`` ranks when given (a topology's)."""
        keep = None if known is None else set(known)
        return {r: d.dump for r, d in self._by_rank.items() if keep is None or r in keep}

    def evidence(self, first: Iterable[int] = (), limit: int = 256) -> tuple[str, ...]:
        """Event ids of the dumps, those of ``first`` ranks first, at most ``limit``."""
        lead = [self._by_rank[r].event_id for r in first if r in self._by_rank]
        taken = set(lead)
        rest = [d.event_id for _, d in sorted(self._by_rank.items()) if d.event_id not in taken]
        return tuple((lead + rest)[:limit])
