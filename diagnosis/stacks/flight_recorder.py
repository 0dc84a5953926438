"""Read one rank's torch Flight Recorder dump into the collectives it entered, per process group.

torch numbers every collective of a process group (``collective_seq_id``) and keeps the last
``TORCH_FR_BUFFER_SIZE`` of them per process in a ring buffer. A rank's dump is the JSON of
``torch._C._distributed_c10d._dump_fr_trace_json()`` or the pickle that ``_dump_fr_trace()`` /
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` write (the same dict). What this reader relies on, seen on
torch 2.13's gloo recorder (tests/fixtures/stacks/recorder/):

* ``pg_id`` is the rank's own local number of a group; ``process_group`` is ``[name, desc]`` and
  the name is what every member calls the group (torch names groups in creation order), so ranks
  are compared by name;
* ``state`` may stay "scheduled" for ever on gloo; an entry still in flight is ``retired: false``
  (``pg_status``'s last enqueued / completed numbers agree);
* ``pg_config`` may be empty (then a group's members are inferred, :mod:`diagnosis.stacks.collective_match`);
* point-to-point ops may be missing (gloo does not record them) or carry ``is_p2p`` and their own
  ``p2p_seq_id``: they are left out, collective numbering says nothing about them.

Seen on torch 2.11 + NCCL 2.28.9 on an H100 (tests/fixtures/real_gpu/gpu40/, docs/real_gpu.md):
the NCCL recorder (``_dump_nccl_trace_json`` / ``_dump_nccl_trace``, and the file of
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` on a watchdog timeout) names groups "0", "1", ... with an
empty desc (no "default_pg", so ``world`` stays empty and pg_config's ``ranks`` tell the members);
the collective stuck behind the timeout is ``state: "scheduled", retired: false``; JSON gives
pg_status numbers as strings, the pickle as ints. Entries of a group without a name are skipped.

Pure: text or bytes in, :class:`RecorderDump` out, :class:`BadRecorderDump` for anything else.
"""

from __future__ import annotations

import io
import json
import pickle
from dataclasses import dataclass, field
from typing import Any, Mapping


class BadRecorderDump(ValueError):
    """Not a Flight Recorder dump (garbled, truncated, or another file)."""


@dataclass(frozen=True, slots=True)
class RecordedCollective:
    pg: str  # the group's name, the same on every member
    seq: int  # collective_seq_id within the group
    op: str  # "all_reduce" ("gloo:" / "nccl:" prefix dropped)
    retired: bool  # False: still in flight when dumped
    state: str  # scheduled / started / completed
    sizes: tuple  # input sizes, to tell a mismatched call apart
    record_id: int = -1


@dataclass(frozen=True)
class RecorderDump:
    collectives: tuple[RecordedCollective, ...]  # non-p2p entries, oldest first
    last_enqueued: Mapping[str, int]  # group name → highest collective number the rank entered
    members: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # from pg_config, when it says
    version: str = ""
    world: frozenset[str] = frozenset()  # names of the default group (desc "default_pg"): every rank is a member
    last_completed: Mapping[str, int] = field(default_factory=dict)  # group name → highest number it saw complete

    def pending(self, done: Mapping[str, int] | None = None) -> dict[str, RecordedCollective]:
        """Per group, the oldest collective still in flight: the one the rank is held in. With
        ``done`` (group → a number a member saw complete), calls at or below it are left out: a
        collective completes for all its members at once, so a rank showing it in flight only never
        saw it end (its CUDA context died, its watchdog stopped polling)."""
        out: dict[str, RecordedCollective] = {}
        for c in self.collectives:
            if c.retired or (done is not None and c.seq <= done.get(c.pg, -1)):
                continue
            if c.pg not in out or c.seq < out[c.pg].seq:
                out[c.pg] = c
        return out

    def at(self, pg: str, seq: int) -> RecordedCollective | None:
        return self._index().get((pg, seq))

    def _index(self) -> dict[tuple[str, int], RecordedCollective]:
        # Built on first use: matching 16k ranks asks each dump for a few entries, never scans it.
        index = self.__dict__.get("_by_key")
        if index is None:
            index = {(c.pg, c.seq): c for c in self.collectives}
            object.__setattr__(self, "_by_key", index)
        return index


class _PlainUnpickler(pickle.Unpickler):
    """A recorder pickle holds only dicts, lists, strings and numbers: refuse anything that names a class."""

    def find_class(self, module: str, name: str) -> Any:
        raise BadRecorderDump(f"pickle names {module}.{name}: not a recorder dump")


def load_recorder(raw: bytes | str) -> RecorderDump:
    """Parse a dump's bytes (JSON or the recorder's pickle)."""
    if isinstance(raw, bytes) and raw[:1] == b"\x80":
        try:
            obj = _PlainUnpickler(io.BytesIO(raw)).load()
        except BadRecorderDump:
            raise
        except Exception as exc:  # a truncated pickle raises any of half a dozen types
            raise BadRecorderDump(f"unreadable pickle: {exc}") from None
    else:
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRecorderDump(f"not JSON: {exc}") from None
    return read_recorder(obj)


def read_recorder(obj: Any) -> RecorderDump:
    """The dump's dict → :class:`RecorderDump`; entries that lack the fields are skipped, not fatal."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("entries", []), list):
        raise BadRecorderDump("no 'entries' list")
    names: dict[str, str] = {}  # local pg_id → group name
    world: set[str] = set()
    collectives: list[RecordedCollective] = []
    for e in obj.get("entries", []):
        c = _entry(e)
        if c is None:
            continue
        names[str(e.get("pg_id"))] = c.pg
        if tuple(e["process_group"][1:2]) == ("default_pg",):
            world.add(c.pg)
        if not e.get("is_p2p"):
            collectives.append(c)
    last: dict[str, int] = {}
    completed: dict[str, int] = {}
    for c in collectives:
        last[c.pg] = max(last.get(c.pg, 0), c.seq)
        if c.retired or c.state == "completed":
            completed[c.pg] = max(completed.get(c.pg, -1), c.seq)
    status = obj.get("pg_status")
    if isinstance(status, Mapping):
        # pg_status is keyed by the local pg_id: only the ids the entries name can be placed.
        for pg_id, st in status.items():
            name = names.get(str(pg_id))
            if name is None or not isinstance(st, Mapping):
                continue
            n = _int(st.get("last_enqueued_collective"))
            if n is not None and n >= 0:
                last[name] = max(last.get(name, 0), n)
            n = _int(st.get("last_completed_collective"))
            if n is not None and n >= 0:
                completed[name] = max(completed.get(name, -1), n)
    return RecorderDump(tuple(collectives), last, _members(obj.get("pg_config")), str(obj.get("version", "")),
                        frozenset(world), completed)


def _entry(e: Any) -> RecordedCollective | None:
    if not isinstance(e, Mapping):
        return None
    pg = e.get("process_group")
    name = pg[0] if isinstance(pg, (list, tuple)) and pg else None
    seq = _int(e.get("collective_seq_id"))
    # An unnamed group cannot be matched across ranks: torch 2.11's CPU recorder of an NCCL job held
    # only such entries (the gloo helper of TORCH_DISTRIBUTED_DEBUG=DETAIL, process_group ["", ""],
    # two pg_ids under one empty name: tests/fixtures/real_gpu/gpu40/fr_cpu.json).
    if not isinstance(name, str) or not name or seq is None:
        return None
    op = str(e.get("profiling_name", "")).split(":", 1)[-1]
    sizes = e.get("input_sizes")
    return RecordedCollective(
        pg=name, seq=seq, op=op, retired=bool(e.get("retired", True)), state=str(e.get("state", "")),
        sizes=_freeze(sizes), record_id=_int(e.get("record_id")) or -1,
    )


def _members(config: Any) -> dict[str, tuple[int, ...]]:
    """pg_config: {name: {"ranks": "[0, 1]"}} (a string on NCCL); an empty or odd config says nothing."""
    out: dict[str, tuple[int, ...]] = {}
    if not isinstance(config, Mapping):
        return out
    for name, cfg in config.items():
        ranks = cfg.get("ranks") if isinstance(cfg, Mapping) else None
        if isinstance(ranks, str):
            try:
                ranks = json.loads(ranks)
            except ValueError:
                continue
        if name and isinstance(ranks, list) and ranks and all(isinstance(r, int) for r in ranks):
            out[str(name)] = tuple(sorted(ranks))
    return out


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, (list, tuple)) else v


__all__ = ["BadRecorderDump", "RecordedCollective", "RecorderDump", "load_recorder", "read_recorder"]
