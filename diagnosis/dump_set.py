"""`stack`/`stack_dump` events → one dump per rank, as the hang and fail-slow detectors collect them.

One capture request can give a rank two dumps: the node agent's py-spy dump and the trainer
hook's faulthandler dump. py-spy names its threads, so it is kept when both arrive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

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


def is_stack_dump(event: Envelope) -> bool:
    return event.source == "stack" and event.kind == "stack_dump"


def read_stack_dump(event: Envelope) -> StackDump:
    """The payload of a stack_dump event; InvalidEvent (a dead letter) names what is missing."""
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
    request = data.get("request_id")
    return StackDump(
        rank=rank,
        dump=dump,
        tool=tool if isinstance(tool, str) else PREFERRED_TOOL,
        event_id=event.id,
        ts=event.ts,
        node=event.node,
        request_id=str(request) if request not in (None, "") else None,
    )


class DumpSet:
    """The dumps of one capture (one hang, one fail-slow round): one per rank, py-spy preferred."""

    def __init__(self) -> None:
        self._by_rank: dict[int, StackDump] = {}
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
