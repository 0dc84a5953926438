"""Which rank of a divergent branch to look at first (issue 50).

When held ranks wait on each other in a loop, each inside a collective another never entered,
the trainer entered its collectives in different orders (diagnosis/hang/recorder.py: an alert,
nobody evicted). Every rank on the loop waits, so naming them all leaves the engineer to find the
odd one out. A process group whose members' recorder sequences split with a strict majority on
one side says which: the minority is the rank whose sequence disagrees with its peers (its step
counter ran ahead, it took a branch the others did not).

* ahead: a minority inside a collective the majority of its group never entered (it alone
  called it). This is the divergence itself, and it outranks
* behind: a minority that never entered the collective the majority of its group is inside.

A group split evenly (two ranks of a pipeline pair, one in each state) says nothing: either side
may be the odd one. Pure: a :class:`CollectiveState` and the stack texts in, findings out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from faultlens.diagnosis.stacks.collective_match import CollectiveState
from faultlens.diagnosis.stacks.outliers import rank_list
from faultlens.diagnosis.stacks.stack_dump import parse_dump, training_thread

_FRAMES_QUOTED = 4


@dataclass(frozen=True, slots=True)
class OddRank:
    """One rank whose recorder sequence disagrees with the majority of one of its groups."""

    rank: int
    pg: str
    op: str
    seq: int
    ahead: bool  # inside #seq that the majority never entered (else: never entered the majority's #seq)
    agree: int  # members of the group, with a dump, on the majority's side
    members: int  # members of the group with a dump
    minority: int = 1  # ranks on its side, itself included

    def describe(self) -> str:
        if self.ahead:
            alone = "alone" if self.minority == 1 else f"(one of {self.minority})"
            return (f"rank {self.rank} {alone} is in {self.op} #{self.seq} of pg {self.pg}, which {self.agree} of its "
                    f"{self.members} members never entered")
        return (f"rank {self.rank} never entered {self.op} #{self.seq} of pg {self.pg}, which {self.agree} of its "
                f"{self.members} members are in")


def odd_ranks(state: CollectiveState, among: Iterable[int]) -> tuple[OddRank, ...]:
    """The ranks of ``among`` on the minority side of a group's split, ahead before behind.

    Each rank appears once, for the group where most members disagree with it."""
    among = set(among)
    found: dict[int, OddRank] = {}
    for wait in state.waits:
        members = len(wait.joined) + len(wait.never_joined)
        if 2 * len(wait.joined) < members:
            minority, agree, ahead = wait.joined, len(wait.never_joined), True
        elif 2 * len(wait.never_joined) < members:
            minority, agree, ahead = wait.never_joined, len(wait.joined), False
        else:
            continue  # an even split names nobody
        for rank in minority:
            if rank not in among:
                continue
            odd = OddRank(rank, wait.pg, wait.op, wait.seq, ahead, agree, members, len(minority))
            best = found.get(rank)
            if best is None or (odd.ahead, odd.agree) > (best.ahead, best.agree):
                found[rank] = odd
    if any(o.ahead for o in found.values()):
        found = {r: o for r, o in found.items() if o.ahead}
    return tuple(sorted(found.values(), key=lambda o: (-o.agree, o.rank)))


def quote_stack(text: str | None) -> str:
    """The innermost frames of a rank's training thread, for a person to read in the detail."""
    if not text:
        return "no stack dump"
    thread = training_thread(parse_dump(text))
    if thread is None or not thread.frames:
        return "no usable stack"
    frames = thread.frames[:_FRAMES_QUOTED]
    more = " < ..." if len(thread.frames) > _FRAMES_QUOTED else ""
    return " < ".join(f"{f.function} ({f.file}{':' + str(f.line) if f.line else ''})" for f in frames) + more


def odd_lines(odd: tuple[OddRank, ...], stacks: Mapping[int, str], loop: tuple[int, ...]) -> list[str]:
    """The detail's lines: who diverges, how many agree, and each odd rank's stack."""
    if not odd:
        return [f"no group's majority singles out a rank of [{rank_list(loop)}]: each split is even"]
    lines = [f"divergent rank(s) [{rank_list(tuple(o.rank for o in odd))}]: " + "; ".join(o.describe() for o in odd[:4])]
    lines += [f"stack of rank {o.rank}: {quote_stack(stacks.get(o.rank))}" for o in odd[:4]]
    return lines


__all__ = ["OddRank", "odd_ranks", "odd_lines", "quote_stack"]
