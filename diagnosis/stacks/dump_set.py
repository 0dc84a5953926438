"""`stack`/`stack_dump` events → one dump per rank, as the hang and fail-slow detectors collect them.

One capture request can give a rank two dumps: the node agent's py-spy dump and the trainer
hook's faulthandler dump. py-spy names its threads, so it is kept when both arrive.

A node agent that finds no training process on its node still answers a capture, with no rank
(``rank: null, pid: null, ok: false``, collectors.command_listener): that is a
:class:`NoTrainerAnswer` for the whole node, read by :func:`read_stack_answer`, not a bad dump.
An agent that found a process but could not read its rank (``rank: null`` with a ``pid``: its
``--rank-env`` names a variable the trainer does not set) sends an :class:`UnrankedDump`: real
stacks from that node, which answer for it, but which no detector can place in a parallel group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import RecorderDump
from faultlens.events.payloads_job import StackDump as StackDumpPayload

PREFERRED_TOOL = "py-spy"
RECORDER_KIND = "recorder_dump"


@dataclass(frozen=True, slots=True)
class RecorderDumpEvent:
    """One rank's torch Flight Recorder dump (the JSON text of ``_dump_fr_trace_json``), sent by the
    trainer hook beside its stack dump (issue 38); read by :mod:`diagnosis.hang.recorder`."""

    rank: int
    dump: str
    event_id: str
    ts: float
    request_id: str | None = None


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


@dataclass(frozen=True, slots=True)
class UnrankedDump:
    """A node's dump of a training process whose rank its agent could not read (``rank_env`` is
    the variable it looked in, when the agent says). It answers the capture for that node, but a
    stack that cannot be placed in the topology is never evidence against any rank or machine."""

    node: str
    pid: int
    dump: str
    ok: bool
    event_id: str
    ts: float
    request_id: str | None = None
    rank_env: str | None = None


NodeAnswer = NoTrainerAnswer | UnrankedDump  # an answer for a node's ranks that names none of them


def is_stack_dump(event: Envelope) -> bool:
    return event.source == "stack" and event.kind == "stack_dump"


def _request_id(request: object) -> str | None:
    return str(request) if request not in (None, "") else None


def read_stack_answer(event: Envelope) -> StackDump | NoTrainerAnswer | UnrankedDump:
    """A stack_dump event as what it is: one rank's dump, a node's "no training process here", or
    a node's dump of a process whose rank its agent could not read.

    Only the exact shapes the agent sends for the latter two (``rank`` null; ``pid`` null, ``ok:
    false`` and the reason as ``dump`` text, or an integer ``pid`` and the dump) are read so; any
    other payload goes through :func:`read_stack_dump` and its dead letters.
    """
    payload = typed(event, StackDumpPayload)
    # A null rank, not an absent one (the Struct reads both as None): an absent rank is a bad dump.
    if payload.rank is None and "rank" in event.data:
        if payload.pid is not None:
            return _read_unranked(event, payload, payload.pid)
        if payload.ok is not False:
            raise InvalidEvent("data.rank", "stack_dump with a null rank and no pid is a node's \"no training "
                                            f"process\" answer and must say ok: false, got ok={payload.ok!r}")
        return NoTrainerAnswer(node=event.node, reason=_dump_text(payload.dump), event_id=event.id, ts=event.ts,
                               request_id=_request_id(payload.request_id))
    return read_stack_dump(event)


def _dump_text(dump: str | None) -> str:
    if dump is None:
        raise InvalidEvent("data.dump", "stack_dump needs the dump text, got NoneType")
    return dump


def _read_unranked(event: Envelope, payload: StackDumpPayload, pid: int) -> UnrankedDump:
    # rank_env is no field of the payload Struct (the agent adds it; docs/events.md lists it not)
    rank_env = event.data.get("rank_env")
    return UnrankedDump(node=event.node, pid=pid, dump=_dump_text(payload.dump), ok=payload.ok is not False,
                        event_id=event.id, ts=event.ts, request_id=_request_id(payload.request_id),
                        rank_env=rank_env if isinstance(rank_env, str) else None)


def is_recorder_dump(event: Envelope) -> bool:
    return event.source == "stack" and event.kind == RECORDER_KIND


def read_recorder_dump(event: Envelope) -> RecorderDumpEvent:
    """The payload of a recorder_dump event; InvalidEvent (a dead letter) names what is missing.
    The dump text itself is read later, by the verdict: a garbled one is reported there, not lost."""
    payload = typed(event, RecorderDump)
    if payload.rank is None:
        raise InvalidEvent("data.rank", "recorder_dump needs an integer rank, got None")
    if payload.dump is None:
        raise InvalidEvent("data.dump", "recorder_dump needs the dump text, got NoneType")
    return RecorderDumpEvent(payload.rank, payload.dump, event.id, event.ts, _request_id(payload.request_id))


def read_stack_dump(event: Envelope) -> StackDump:
    """The payload of one rank's stack_dump event; InvalidEvent (a dead letter) names what is missing.
    A node's null-rank answer is an InvalidEvent here: read it with :func:`read_stack_answer`."""
    payload = typed(event, StackDumpPayload)
    if payload.rank is None:
        raise InvalidEvent("data.rank", "stack_dump needs an integer rank, got None")
    tool = payload.tool
    return StackDump(
        rank=payload.rank,
        dump=_dump_text(payload.dump),
        tool=tool if isinstance(tool, str) else PREFERRED_TOOL,
        event_id=event.id,
        ts=event.ts,
        node=event.node,
        request_id=_request_id(payload.request_id),
    )


class DumpSet:
    """The dumps of one capture (one hang, one fail-slow round): one per rank, py-spy preferred."""

    def __init__(self) -> None:
        self._by_rank: dict[int, StackDump] = {}
        self._no_trainer: dict[str, NoTrainerAnswer] = {}
        self._unranked: dict[str, dict[int, UnrankedDump]] = {}  # node → pid → its dump
        self._recorders: dict[int, RecorderDumpEvent] = {}  # rank → its Flight Recorder dump, the latest
        self.first_ts: float | None = None
        self.last_ts: float | None = None

    def _seen(self, ts: float) -> None:
        self.first_ts = ts if self.first_ts is None else min(self.first_ts, ts)
        self.last_ts = ts if self.last_ts is None else max(self.last_ts, ts)

    def add(self, dump: StackDump) -> bool:
        """Keep ``dump`` unless the rank already has one at least as good; True when kept."""
        old = self._by_rank.get(dump.rank)
        self._seen(dump.ts)
        if old is not None and (old.tool == PREFERRED_TOOL or dump.tool != PREFERRED_TOOL):
            return False
        self._by_rank[dump.rank] = dump
        return True

    def add_recorder(self, dump: RecorderDumpEvent) -> None:
        """Keep a rank's recorder dump (the latest: a later one holds everything an earlier one did).
        It answers no capture by itself: the stack dumps decide when a capture is complete."""
        old = self._recorders.get(dump.rank)
        if old is None or dump.ts >= old.ts:
            self._recorders[dump.rank] = dump

    def recorders(self, known: Iterable[int] | None = None) -> dict[int, str]:
        """rank → recorder dump text, only for ``known`` ranks when given (a topology's)."""
        keep = None if known is None else set(known)
        return {r: d.dump for r, d in self._recorders.items() if keep is None or r in keep}

    def add_no_trainer(self, answer: NoTrainerAnswer) -> bool:
        """Note that ``answer.node`` has no training process; the first answer of a node is kept."""
        self._seen(answer.ts)
        if answer.node in self._no_trainer:
            return False
        self._no_trainer[answer.node] = answer
        return True

    def add_unranked(self, dump: UnrankedDump) -> bool:
        """Keep the first dump of each process whose rank its agent could not read; True when kept."""
        self._seen(dump.ts)
        kept = self._unranked.setdefault(dump.node, {})
        if dump.pid in kept:
            return False
        kept[dump.pid] = dump
        return True

    def add_answer(self, answer: NodeAnswer) -> bool:
        """A node's answer that names no rank, whichever it is."""
        if isinstance(answer, UnrankedDump):
            return self.add_unranked(answer)
        return self.add_no_trainer(answer)

    def no_trainer(self) -> dict[str, NoTrainerAnswer]:
        """node → its "no training process" answer."""
        return dict(self._no_trainer)

    def unranked(self) -> dict[str, tuple[UnrankedDump, ...]]:
        """node → the dumps of its processes whose rank could not be read, in pid order."""
        return {node: tuple(d for _, d in sorted(by_pid.items())) for node, by_pid in self._unranked.items()}

    def answered(self, ranks_by_node: Mapping[str, Iterable[int]]) -> set[int]:
        """The ranks that answered: those with a dump, every rank of a node without a trainer, and
        every rank of a node whose dumps, placed or not, are as many as the ranks it holds (its
        agent dumps every process it finds in one capture, so the count tells when it is done)."""
        out = set(self._by_rank)
        for node in self._no_trainer:
            out.update(ranks_by_node.get(node, ()))
        for node, by_pid in self._unranked.items():
            ranks = set(ranks_by_node.get(node, ()))
            if len(by_pid) + len(ranks & out) >= len(ranks):
                out |= ranks
        return out

    def unplaced(self, ranks_by_node: Mapping[str, Iterable[int]]) -> dict[str, tuple[int, ...]]:
        """node → its ranks without a dump of their own, on nodes that sent dumps whose rank could
        not be read: any of those dumps may be any of these ranks, so none of them may be blamed
        for sending nothing. Nodes outside ``ranks_by_node`` are left out."""
        out = {}
        for node in self._unranked:
            ranks = tuple(sorted(r for r in ranks_by_node.get(node, ()) if r not in self._by_rank))
            if ranks:
                out[node] = ranks
        return out

    def gone(self, ranks_by_node: Mapping[str, Iterable[int]]) -> dict[str, tuple[int, ...]]:
        """node → its ranks that have no process (the node said so) and sent no dump either;
        nodes outside ``ranks_by_node`` (not in the job's topology) are left out, and so is a node
        that also dumped a process it could not rank (it has one, then)."""
        out = {}
        for node in self._no_trainer:
            if node in self._unranked:
                continue
            ranks = tuple(sorted(r for r in ranks_by_node.get(node, ()) if r not in self._by_rank))
            if ranks:
                out[node] = ranks
        return out

    def __len__(self) -> int:
        """The number of ranks with a dump (node answers that name no rank are not counted)."""
        return len(self._by_rank)

    def is_empty(self) -> bool:
        """Nothing at all: no rank's dump and no node's answer."""
        return not (self._by_rank or self._no_trainer or self._unranked or self._recorders)

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
        lead += [self._recorders[r].event_id for r in first if r in self._recorders]
        taken = set(lead)
        rest = [d.event_id for _, d in sorted(self._by_rank.items()) if d.event_id not in taken]
        return tuple((lead + rest)[:limit])
