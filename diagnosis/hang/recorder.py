"""A hang read from the collectives first: Flight Recorder dumps name who never arrived, stacks say why.

Rule ``flight-recorder`` (docs/design.md §5: collective state is strong evidence, frame names weak):

1. :func:`diagnosis.stacks.collective_match.match_collectives` gives, per process group, the collective
   its members are held in and the members that never entered it; following those edges ends at
   ranks held in no recorded collective.
2. Such an end may still be waiting in what the recorder does not log (gloo logs no isend /
   irecv): its stack is read on every thread (:mod:`diagnosis.stacks.rank_threads`); a pipeline p2p wait
   adds edges to the stage it waits on (:mod:`diagnosis.stacks.wait_chain`'s rule) and the walk goes on.
3. The ends that are not waiting are the suspects, and so is a rank someone waits on that the
   recorder shows inside an (async) collective while py-spy sees its training thread run outside
   communication; an end whose stack has no usable dump is a
   suspect on the recorder's word alone (lower confidence).

Disagreements are alerts, never evictions: an end whose stack waits in a collective the recorder
does not show in flight; the stacks' wait chains ending on other machines than the recorder's
suspects; the stacks naming (when the recorder names nobody) a rank the recorder shows inside a
collective, waiting on peers that never entered it, and not running.

Held ranks that wait on each other in a loop (each inside a collective the other never entered)
entered their collectives in different orders: a divergent branch in the trainer, an alert that
names the rank(s) whose sequence disagrees with their group's majority (diagnosis/stacks/divergent_rank.py).
So are members of a group that entered different ops or sizes under one collective number (a
mismatched collective): the stacks would single out the rank on the other branch as an outlier.

When every group held in a collective has all its members in it (*joined but stuck*) or nothing
is in flight, the recorder names nobody and the stacks decide (:func:`read_hang_stacks`), with
what the recorder read quoted in the detail.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from faultlens.diagnosis.hang.stack_reading import read_hang_stacks
from faultlens.diagnosis.stacks.collective_match import CollectiveState, chain_to, match_collectives
from faultlens.diagnosis.stacks.divergent_rank import odd_lines, odd_ranks
from faultlens.diagnosis.stacks.flight_recorder import BadRecorderDump, RecorderDump, load_recorder
from faultlens.diagnosis.stacks.localize import localize
from faultlens.diagnosis.stacks.outliers import RULE_WAIT_CHAIN, NotInTopology, StackConfig, StackVerdict, rank_list
from faultlens.diagnosis.stacks.rank_threads import RankReading, read_rank
from faultlens.diagnosis.stacks.wait_chain import follow_waits
from faultlens.diagnosis.stacks.wait_primitives import BARRIER, COLLECTIVE, RankActivity
from faultlens.events.topology import Topology

RULE_RECORDER = "flight-recorder"
_MAX_WAITS_SHOWN = 4


@dataclass(frozen=True)
class RecorderReading:
    """What the recorder walk found, before it becomes a verdict."""

    state: CollectiveState
    suspects: tuple[int, ...]  # ends not waiting (stack) or without a stack
    unconfirmed: tuple[int, ...]  # suspects with no usable stack: the recorder's word alone
    disagree: tuple[int, ...]  # ends whose stack waits in a collective the recorder does not show
    via_p2p: Mapping[int, tuple[int, ...]]  # ends read as waiting in unrecorded p2p → the stages they wait on
    readings: Mapping[int, RankReading]
    bad: tuple[int, ...]  # recorder dumps that could not be read
    busy_held: tuple[int, ...] = ()  # suspects with a collective in flight whose stack runs outside communication


def read_recorders(raw: Mapping[int, bytes | str]) -> tuple[dict[int, RecorderDump], tuple[int, ...]]:
    """Parse each rank's recorder dump; unreadable ones are listed, never fatal."""
    dumps: dict[int, RecorderDump] = {}
    bad: list[int] = []
    for rank, data in raw.items():
        try:
            dumps[rank] = load_recorder(data)
        except BadRecorderDump:
            bad.append(rank)
    return dumps, tuple(sorted(bad))


def walk_recorder(recorders: Mapping[int, RecorderDump], stacks: Mapping[int, str], topology: Topology,
                  bad: tuple[int, ...] = ()) -> RecorderReading:
    """Follow the recorder's edges, then the unrecorded p2p waits the stacks show, to the suspects."""
    state = match_collectives(recorders, topology)
    readings: dict[int, RankReading] = {}

    def reading(rank: int) -> RankReading | None:
        if rank not in readings and isinstance(stacks.get(rank), str):
            readings[rank] = read_rank(stacks[rank])
        return readings.get(rank)

    def busy(rank: int) -> bool:
        return _runs(reading(rank))

    suspects, unconfirmed, disagree, busy_held = set(), set(), set(), set()
    via_p2p: dict[int, tuple[int, ...]] = {}
    queue = sorted({t for r, ts in state.edges.items() if not busy(r) for t in ts})
    seen = set(queue)
    while queue:
        rank = queue.pop(0)
        if rank in state.held:
            if busy(rank):
                suspects.add(rank)
                busy_held.add(rank)
            continue  # otherwise its own edges are the recorder's, already followed
        look = reading(rank)
        if look is None or look.activity is None:
            suspects.add(rank)
            unconfirmed.add(rank)
            continue
        act = look.activity
        if not act.waiting or act.primitive is None:  # a waiting activity always names its primitive
            suspects.add(rank)
            continue
        if act.primitive.kind in (COLLECTIVE, BARRIER) and rank in recorders:
            disagree.add(rank)
            continue
        targets = follow_waits({rank: act}, topology).edges.get(rank, ())
        via_p2p[rank] = targets
        for t in targets:
            if t not in seen:
                seen.add(t)
                queue.append(t)
    return RecorderReading(state, tuple(sorted(suspects)), tuple(sorted(unconfirmed)), tuple(sorted(disagree)),
                           via_p2p, readings, bad, tuple(sorted(busy_held)))


def _runs(look: RankReading | None) -> bool:
    """In flight on the recorder yet running on the CPU (py-spy "active") outside communication: an
    async collective it launched is not what it waits in. Idle, or no state (faulthandler): the
    recorder's word stands."""
    return bool(look and look.activity and not look.waiting and look.main_status and "active" in look.main_status)


def read_hang(stacks: Mapping[int, str], recorders: Mapping[int, bytes | str], topology: Topology,
              config: StackConfig = StackConfig()) -> StackVerdict:
    """A hang's verdict from recorder dumps and stack dumps; stacks alone when no recorder dump is usable.

    Raises :class:`NotInTopology` when a stack or recorder dump names a rank the topology lacks.
    """
    unknown = sorted(r for r in {*stacks, *recorders} if r not in topology.by_rank)
    if unknown:
        raise NotInTopology(unknown)
    by_stacks = read_hang_stacks(stacks, topology, config) if stacks else None
    dumps, bad = read_recorders(recorders)
    if not dumps:
        note = f"flight recorder: no usable dump ({len(bad)} unreadable)" if bad else ""
        if by_stacks is None:
            return StackVerdict(outlier_ranks=(), healthy_signatures=(), groups={}, axis=None, group_id=None,
                                group=None, nodes=(), confidence=0.0, bad_ranks=bad,
                                detail=f"no stack dump and {note or 'no recorder dump'}",
                                missing_ranks=tuple(sorted(topology.by_rank)))
        return replace(by_stacks, detail="; ".join(filter(None, [by_stacks.detail, note])))
    walk = walk_recorder(dumps, stacks, topology, bad)
    said = _recorder_lines(walk)
    if walk.state.crossed:
        return _crossed(walk, topology, by_stacks, said, stacks)
    if any(w.mismatched for w in walk.state.waits):
        return _mismatched(walk, dumps, topology, by_stacks, said)
    verdict = _verdict(walk, topology, config, by_stacks, said)
    if verdict is not None:
        return verdict
    why = _why_silent(walk)
    vetoed = _held_suspects(walk, by_stacks, stacks)
    if vetoed and by_stacks is not None:  # only the stacks' suspects are vetoed
        return _held_veto(walk, by_stacks, vetoed, topology, said)
    if by_stacks is None:
        return StackVerdict(outlier_ranks=(), healthy_signatures=(), groups={}, axis=None, group_id=None, group=None,
                            nodes=(), confidence=0.0, detail="; ".join([f"rule {RULE_RECORDER}: {why}", *said]),
                            missing_ranks=tuple(sorted(set(topology.by_rank) - set(dumps))))
    return replace(by_stacks, detail="; ".join([by_stacks.detail, f"flight recorder names nobody: {why}", *said]))


def _verdict(walk: RecorderReading, topology: Topology, config: StackConfig, by_stacks: StackVerdict | None,
             said: list[str]) -> StackVerdict | None:
    state = walk.state
    if not walk.suspects and not walk.disagree:
        return None
    usable = max(1, len(state.dumped))
    lines = []
    for r in walk.suspects[: config.max_detail_groups]:
        look = walk.readings.get(r)
        held = f"has {walk.state.held[r][0].op} #{walk.state.held[r][0].seq} of pg {walk.state.held[r][0].pg} in flight " \
               f"but runs: " if r in walk.busy_held else "not waiting: "
        lines.append(f"suspect {r}: " + ("no usable stack, the recorder's word alone" if look is None or look.activity is None
                                         else f"{held}{look.describe()}"))
    lines += [f"chain: {_chain_text(walk, s)}" for s in walk.suspects[:3]]
    stack_view = _stack_view(by_stacks)
    if walk.disagree:
        what = "; ".join(f"rank {r}: stack waits in {op} ({frame}) but the recorder shows no collective of it in flight"
                         for r in walk.disagree[:3] for op, frame in [_waiting_in(walk, r)])
        head = (f"rule {RULE_RECORDER}: stacks and recorder disagree, alert, nothing evicted: {what}"
                + (f"; suspects otherwise [{rank_list(walk.suspects)}]" if walk.suspects else ""))
        in_question = tuple(sorted({*walk.suspects, *walk.disagree}))
        return _alert(walk, topology, in_question, "; ".join([head, *said, *lines, *stack_view]))
    if len(walk.suspects) > max(1, config.max_suspect_share * usable):
        head = (f"rule {RULE_RECORDER}: {len(walk.suspects)} ranks never joined and are not waiting "
                f"[{rank_list(walk.suspects)}], too many to single out: alert, nothing evicted")
        return _alert(walk, topology, walk.suspects, "; ".join([head, *said, *lines, *stack_view]))
    place = localize(walk.suspects, topology, cover_share=config.cover_share)
    if place is None:
        return None
    if by_stacks is not None and by_stacks.rule == RULE_WAIT_CHAIN and by_stacks.localized \
            and not set(by_stacks.nodes) & set(place.nodes):
        # Two readings that each follow who waits on whom end on different machines: one of them
        # misreads a wait, and nothing says which. The majority vote (outlier rule) is too weak to veto.
        head = (f"rule {RULE_RECORDER}: stacks and recorder disagree, alert, nothing evicted: the recorder names "
                f"[{rank_list(walk.suspects)}] on {', '.join(place.nodes)}, the stacks' wait chains "
                f"[{rank_list(by_stacks.outlier_ranks)}] on {', '.join(by_stacks.nodes)}")
        in_question = tuple(sorted({*walk.suspects, *by_stacks.outlier_ranks}))
        return _alert(walk, topology, in_question, "; ".join([head, *said, *lines]))
    confirmed = 1.0 - 0.5 * len(walk.unconfirmed) / len(walk.suspects)
    seen_share = len(state.dumped) / len(topology.by_rank)
    confidence = 0.95 * place.coverage * confirmed * min(1.0, seen_share)
    if seen_share < config.min_seen_share:
        confidence *= 0.5
    head = (f"rule {RULE_RECORDER}: {len(walk.suspects)} suspect rank(s) [{rank_list(walk.suspects)}] never entered "
            f"the collective their group peers wait in and wait in nothing themselves; {place.covered}/{place.outliers} "
            f"in {place.group} ({len(place.ranks)} ranks on {len(place.nodes)} node(s))")
    frames = {r: act.frame for r in walk.suspects if (act := _activity(walk, r)) is not None}
    return replace(
        _alert(walk, topology, walk.suspects, "; ".join([head, *said, *lines, *stack_view])), alert=False,
        axis=place.axis, group_id=place.group_id, group=place.group, nodes=place.nodes, confidence=round(confidence, 4),
        chains=tuple(_chain_text(walk, s) for s in walk.suspects[:3]),
        outlier_frames={f"rank {r}": (frame,) for r, frame in frames.items()},
    )


def _alert(walk: RecorderReading, topology: Topology, ranks: tuple[int, ...], detail: str) -> StackVerdict:
    """The recorder rule's verdict that places nobody: ``ranks`` in question, for a person (a
    localized verdict is this one placed, through ``replace``)."""
    return StackVerdict(outlier_ranks=ranks, healthy_signatures=(), groups={}, axis=None, group_id=None, group=None,
                        nodes=(), confidence=0.0, detail=detail, alert=True, bad_ranks=walk.bad, rule=RULE_RECORDER,
                        missing_ranks=tuple(sorted(set(topology.by_rank) - set(walk.state.dumped))))


def _activity(walk: RecorderReading, rank: int) -> RankActivity | None:
    look = walk.readings.get(rank)
    return look.activity if look is not None else None


def _waiting_in(walk: RecorderReading, rank: int) -> tuple[str, str]:
    """(the call, its frame) ``rank``'s stack waits in. Asked only of ranks the walk read as waiting
    (a disagreement, a p2p wait), which have both; a placeholder keeps the text whole otherwise."""
    act = _activity(walk, rank)
    if act is None or act.primitive is None:
        return "?", "no usable stack"
    return act.primitive.op, act.frame


def _held_suspects(walk: RecorderReading, by_stacks: StackVerdict | None, stacks: Mapping[int, str]) -> tuple[int, ...]:
    """The stacks' suspects that the recorder shows inside a collective, waiting on peers, and that do not run."""
    if by_stacks is None or not by_stacks.localized:
        return ()
    held = walk.state.held
    return tuple(r for r in by_stacks.outlier_ranks if r in held and walk.state.edges.get(r)
                 and not _runs(walk.readings.get(r) or (read_rank(stacks[r]) if r in stacks else None)))


def _held_veto(walk: RecorderReading, by_stacks: StackVerdict, vetoed: tuple[int, ...], topology: Topology,
               said: list[str]) -> StackVerdict:
    state = walk.state
    parts = [f"{r} is inside {state.held[r][0].op} #{state.held[r][0].seq} of pg {state.held[r][0].pg} waiting on "
             f"{rank_list(state.edges[r])}" for r in vetoed[:3]]
    head = (f"rule {RULE_RECORDER}: stacks and recorder disagree, alert, nothing evicted: the stacks ({by_stacks.rule}) "
            f"name [{rank_list(by_stacks.outlier_ranks)}] on {', '.join(by_stacks.nodes)}, but the recorder shows "
            + "; ".join(parts))
    return _alert(walk, topology, by_stacks.outlier_ranks, "; ".join([head, *said]))


def _crossed(walk: RecorderReading, topology: Topology, by_stacks: StackVerdict | None,
             said: list[str], stacks: Mapping[int, str]) -> StackVerdict:
    """Ranks inside collectives the others never entered, waiting on each other: software, not a machine.
    The verdict's ranks are those whose sequence disagrees with their group's majority, when one does
    (diagnosis/stacks/divergent_rank.py), else the whole loop."""
    state = walk.state
    loop = state.crossed
    odd = odd_ranks(state, loop)
    parts = []
    for r in loop[:4]:
        w = state.held[r][0]
        parts.append(f"{r} is in {w.op} #{w.seq} of pg {w.pg}, which {rank_list(state.edges[r])} never entered")
    head = (f"rule {RULE_RECORDER}: ranks [{rank_list(loop)}] wait on each other in collectives entered in different "
            f"orders ({'; '.join(parts)}): a divergent branch in the trainer, not a machine: alert, nothing evicted")
    return _alert(walk, topology, tuple(sorted(o.rank for o in odd)) or loop,
                  "; ".join([head, *odd_lines(odd, stacks, loop), *said, *_stack_view(by_stacks)]))


def _mismatched(walk: RecorderReading, dumps: Mapping[int, RecorderDump], topology: Topology,
                by_stacks: StackVerdict | None, said: list[str]) -> StackVerdict:
    """Members of a group that entered different ops or sizes under one collective number: the call
    can never complete, whichever machine it runs on (a branch the trainer took on some ranks), so
    a machine evicted for it brings the same hang back. The stacks' outlier is then only the rank
    that took the other branch: alert, nothing evicted. The verdict's ranks are those off their
    group's majority call, or every member of a group split evenly."""
    odd: set[int] = set()
    parts = []
    for w in walk.state.waits:
        if not w.mismatched:
            continue
        calls: dict[tuple, list[int]] = {}
        for r in w.joined:
            c = dumps[r].at(w.pg, w.seq)
            if c is not None:
                calls.setdefault((c.op, c.sizes), []).append(r)
        ranked = sorted(calls.values(), key=len, reverse=True)
        if len(ranked) > 1 and len(ranked[0]) > len(ranked[1]):
            odd.update(r for rs in ranked[1:] for r in rs)
        else:
            odd.update(w.joined)
        parts.append(f"pg {w.pg} #{w.seq}: " + ", ".join(
            f"{rank_list(tuple(rs))} in {op} {list(sizes)}" for (op, sizes), rs in calls.items()))
    head = (f"rule {RULE_RECORDER}: a mismatched collective ({'; '.join(parts[:_MAX_WAITS_SHOWN])}): members of one "
            f"group entered different calls under the same number, which no machine completes: the trainer's "
            f"code took another branch on some ranks, not a machine: alert, nothing evicted")
    return _alert(walk, topology, tuple(sorted(odd)), "; ".join([head, *said, *_stack_view(by_stacks)]))


def _recorder_lines(walk: RecorderReading) -> list[str]:
    state = walk.state
    waits = sorted(state.waits, key=lambda w: (-len(w.never_joined), -len(w.joined)))
    lines = [f"recorder: {w.describe()}" for w in waits[:_MAX_WAITS_SHOWN]]
    if len(waits) > _MAX_WAITS_SHOWN:
        lines.append(f"recorder: ... {len(waits) - _MAX_WAITS_SHOWN} more group(s) held")
    for rank, targets in sorted(walk.via_p2p.items())[:_MAX_WAITS_SHOWN]:
        lines.append(f"rank {rank} is in no recorded collective but its stack waits in unrecorded p2p "
                     f"({_waiting_in(walk, rank)[1]}) on rank(s) {rank_list(targets)}")
    if walk.bad:
        lines.append(f"unreadable recorder dumps: ranks {rank_list(walk.bad)}")
    return lines


def _stack_view(by_stacks: StackVerdict | None) -> list[str]:
    if by_stacks is None:
        return []
    if by_stacks.localized:
        return [f"stacks alone ({by_stacks.rule}) would name ranks [{rank_list(by_stacks.outlier_ranks)}] in {by_stacks.group}"]
    return ["stacks alone name no group"]


def _chain_text(walk: RecorderReading, end: int) -> str:
    """Victim first: ``0 all_reduce #7 on pg 5 → 4 p2p → 5``."""
    edges = {r: set(ts) for r, ts in walk.state.edges.items()}
    for r, ts in walk.via_p2p.items():
        edges.setdefault(r, set()).update(ts)
    path = chain_to(edges, end)
    hops = []
    for r in path[:-1]:
        held = walk.state.held.get(r)
        if held:
            w = held[0]
            hops.append(f"{r} in {w.op} #{w.seq} of pg {w.pg}")
        elif r in walk.via_p2p:
            hops.append(f"{r} in p2p {_waiting_in(walk, r)[1].split(' (', 1)[0]}")
        else:
            hops.append(str(r))
    return " → ".join([*hops, f"{end} {'busy' if end in walk.busy_held else 'never joined'}"])


def _why_silent(walk: RecorderReading) -> str:
    state = walk.state
    if not state.waits:
        return "no collective in flight in any dump"
    stuck = state.stuck
    if stuck:
        w = stuck[0]
        return (f"{len(stuck)} group(s) have every member inside the collective they wait in (joined but stuck), "
                f"e.g. pg {w.pg} {w.op} #{w.seq} with ranks {rank_list(w.joined)}")
    return "the ranks that never joined wait in unrecorded p2p in a loop"


__all__ = ["RULE_RECORDER", "RecorderReading", "read_recorders", "walk_recorder", "read_hang"]
