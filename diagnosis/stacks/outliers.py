"""Stack-trace aggregation (docs/design.md §5): one dump per rank → outlier ranks → the group to evict.

Under a single fault most healthy ranks show the same stack. Each rank's training thread is
reduced to a signature (function + file per frame, no line numbers, ids or addresses), ranks are
grouped by signature, near-identical signatures are merged (same innermost frame and at most
``max_frame_edits`` frame edits apart, so a line number or one extra wrapper frame does not split
healthy ranks), the dominant groups are healthy and the rest are outliers, and
:func:`diagnosis.stacks.localize.localize` names the parallel group the outliers share.

This is the rule of the fail-slow rounds and the fallback of a hang's reading: a hang whose stall
has spread is read by its wait chains first (diagnosis.hang.stack_reading), on the same parsed dumps
(:func:`read_rank_stacks`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping

from faultlens.diagnosis.stacks.localize import localize
from faultlens.diagnosis.stacks.stack_dump import Frame, ThreadStack, parse_dump, training_thread
from faultlens.events.topology import Topology

Signature = tuple[tuple[str, str], ...]  # (function, file) per frame, innermost first
_MAX_FUZZY_REPS = 64

# Pids, thread ids and addresses differ between otherwise byte-identical healthy dumps; masking
# them lets one parse serve thousands of ranks. Three single-prefix passes run ~4x faster than
# one alternation; none of the masked numbers reaches a signature (Frame.key drops addresses).
_VOLATILE = tuple(re.compile(p) for p in (r"Thread \d+", r"Process \d+", r"0x[0-9a-fA-F]+"))

__all__ = [
    "Frame", "ThreadStack", "parse_dump", "training_thread", "Signature", "signature", "describe",
    "StackConfig", "StackVerdict", "cluster_stacks", "NotInTopology", "RankStacks", "read_rank_stacks",
    "cluster_rank_stacks", "RULE_OUTLIER", "RULE_WAIT_CHAIN",
]

# Which rule named the suspects of a verdict (StackVerdict.rule).
RULE_OUTLIER = "outlier-clustering"
RULE_WAIT_CHAIN = "wait-chain"


class NotInTopology(ValueError):
    """Dumps for ranks the topology does not list: the topology and the dumps disagree."""

    def __init__(self, ranks: list[int]):
        self.ranks = ranks
        shown = ", ".join(map(str, ranks[:10])) + (" ..." if len(ranks) > 10 else "")
        super().__init__(f"{len(ranks)} rank(s) have dumps but are not in the topology: {shown}")


@dataclass(frozen=True, slots=True)
class StackConfig:
    max_frame_edits: int = 1  # frames inserted/deleted/replaced between signatures that still group
    healthy_share: float = 0.3  # besides the largest group, groups at least this share of ranks are healthy
    min_healthy_share: float = 0.5  # healthy groups must hold this share of usable ranks, else no verdict
    cover_share: float = 0.75  # share of outliers a blamed group must hold (localize)
    min_seen_share: float = 0.5  # below this share of ranks with a usable dump, confidence is halved
    max_detail_groups: int = 6
    # Wait-chain reading of a hang (diagnosis.hang.stack_reading): it names suspects only when most ranks
    # wait and few do not, else the outlier clustering decides.
    min_waiting_share: float = 0.5  # of usable ranks, waiting in a communication primitive
    max_suspect_share: float = 0.25  # of usable ranks, at the ends of the chains


@dataclass(frozen=True)
class StackVerdict:
    outlier_ranks: tuple[int, ...]
    healthy_signatures: tuple[str, ...]
    groups: Mapping[str, tuple[int, ...]]  # signature text → ranks, largest first
    axis: str | None
    group_id: int | None
    group: str | None  # e.g. "pp:3" (numbering of events.topology)
    nodes: tuple[str, ...]
    confidence: float
    detail: str
    bad_ranks: tuple[int, ...] = ()  # empty, garbled or truncated dumps
    missing_ranks: tuple[int, ...] = ()  # in the topology, no dump at all
    outlier_frames: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # outlier signature → frames setting it apart
    rule: str | None = None  # RULE_WAIT_CHAIN or RULE_OUTLIER: what named the suspects (None: nothing did)
    chains: tuple[str, ...] = ()  # wait chains, victim first, to each suspect (wait-chain rule)
    no_suspect: bool = False  # every rank waits in the same call and nobody is behind: evict nobody
    waited_on: tuple[int, ...] = ()  # ranks without a usable dump that wait chains end at (diagnosis.hang.stack_reading)
    alert: bool = False  # the evidence disagrees or names too many: tell a person, evict nobody (diagnosis.hang.recorder)

    @property
    def localized(self) -> bool:
        return self.group is not None


def signature(stack: ThreadStack | str) -> Signature | None:
    """A thread's frames as (function, file) keys; given dump text, its training thread's (None: unusable dump)."""
    if isinstance(stack, str):
        return _dump_signature(stack)
    return tuple(f.key for f in stack.frames)


def describe(sig: Signature, limit: int | None = None) -> str:
    """A readable signature, innermost frame first: ``isend@distributed_c10d.py < send_forward@schedules.py``."""
    parts = [f"{fn}@{file}" for fn, file in (sig if limit is None else sig[:limit])]
    if limit is not None and len(sig) > limit:
        parts.append(f"... (+{len(sig) - limit})")
    return " < ".join(parts)


def _dump_signature(text: str) -> Signature | None:
    thread = training_thread(parse_dump(text))
    if thread is None or thread.truncated:
        return None
    return tuple(f.key for f in thread.frames)


def _edits(a: Signature, b: Signature, limit: int) -> int:
    """Levenshtein distance over frames, giving up (limit + 1) once it exceeds ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev = list(range(len(b) + 1))
    for i, fa in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, fb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (fa != fb))
        if min(cur) > limit:
            return limit + 1
        prev = cur
    return prev[-1]


def _merge_similar(counts: Counter[Signature], max_edits: int) -> dict[Signature, Signature]:
    """Map each signature to the representative of its fuzzy group (the most common member).

    Signatures are taken from most to least common and join the first representative with the
    same innermost frame within ``max_edits``: the blocking call is what tells a hang apart, so it
    must match exactly; the callers above it may differ a little.
    """
    reps: list[tuple[Signature, frozenset]] = []
    out: dict[Signature, Signature] = {}
    for sig, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        home = sig
        if max_edits > 0:
            # Variants fold into big groups; comparing with the largest few keeps thousands of
            # distinct stacks (a garbage storm) from costing a quadratic number of comparisons.
            frames = set(sig)
            for rep, rep_frames in reps[:_MAX_FUZZY_REPS]:
                # Each frame missing from the other side costs at least one edit: a cheap bound first.
                if rep[:1] != sig[:1] or len(frames - rep_frames) > max_edits or len(rep_frames - frames) > max_edits:
                    continue
                if _edits(rep, sig, max_edits) <= max_edits:
                    home = rep
                    break
        if home is sig:
            reps.append((sig, frozenset(sig)))
        out[sig] = home
    return out


def _apart(outlier: Signature, healthy: Signature, limit: int = 3) -> tuple[str, ...]:
    """The outlier's innermost frames that the healthy stack does not have."""
    seen = set(healthy)
    return tuple(f"{fn} ({file})" for fn, file in outlier if (fn, file) not in seen)[:limit]


@dataclass(frozen=True)
class RankStacks:
    """Every rank's training thread, parsed once for both rules."""

    threads: Mapping[int, ThreadStack]  # usable ranks (identical dumps share one object)
    bad: tuple[int, ...]  # empty, garbled or truncated dumps
    missing: tuple[int, ...]  # in the topology, no dump at all
    expected: int  # ranks in the topology


def read_rank_stacks(dumps: Mapping[int, str], topology: Topology) -> RankStacks:
    """Parse one dump per rank; :class:`NotInTopology` when a dump names a rank the topology lacks.

    Any dump text, however broken, is otherwise accepted (unusable ones land in ``bad``).
    """
    unknown = sorted(r for r in dumps if r not in topology.by_rank)
    if unknown:
        raise NotInTopology(unknown)
    cache: dict[str, ThreadStack | None] = {}
    threads: dict[int, ThreadStack] = {}
    bad: list[int] = []
    for rank, text in dumps.items():
        if not isinstance(text, str):
            bad.append(rank)
            continue
        key = text
        for pattern in _VOLATILE:
            key = pattern.sub("#", key)
        if key not in cache:
            thread = training_thread(parse_dump(text))
            cache[key] = None if thread is None or thread.truncated else thread
        thread = cache[key]
        if thread is None:
            bad.append(rank)
        else:
            threads[rank] = thread
    missing = tuple(sorted(set(topology.by_rank) - set(dumps)))
    return RankStacks(threads, tuple(sorted(bad)), missing, len(topology.by_rank))


def cluster_stacks(dumps: Mapping[int, str], topology: Topology, config: StackConfig = StackConfig()) -> StackVerdict:
    """Group ranks by stack, find the outliers and the parallel group they share.

    Raises :class:`NotInTopology` when a dump names a rank the topology lacks; any dump text,
    however broken, is otherwise accepted (unusable ones land in ``bad_ranks``).
    """
    return cluster_rank_stacks(read_rank_stacks(dumps, topology), topology, config)


def _rank_signatures(stacks: RankStacks) -> dict[int, Signature]:
    """Each rank's stack signature (its frames' keys), identical dumps signed once."""
    sig_of: dict[int, Signature] = {}  # by thread object
    rank_sig: dict[int, Signature] = {}
    for rank, thread in stacks.threads.items():
        sig = sig_of.get(id(thread))
        if sig is None:
            sig = sig_of[id(thread)] = tuple(f.key for f in thread.frames)
        rank_sig[rank] = sig
    return rank_sig


def cluster_rank_stacks(stacks: RankStacks, topology: Topology, config: StackConfig = StackConfig()) -> StackVerdict:
    """:func:`cluster_stacks` on dumps already parsed."""
    rank_sig = _rank_signatures(stacks)
    bad = list(stacks.bad)
    missing = stacks.missing
    expected = stacks.expected
    if not rank_sig:
        return StackVerdict(
            outlier_ranks=(), healthy_signatures=(), groups={}, axis=None, group_id=None, group=None, nodes=(),
            confidence=0.0, bad_ranks=tuple(bad), missing_ranks=missing,
            detail=f"no usable stack dump: {len(bad)} bad, {len(missing)} missing of {expected} ranks",
        )

    home = _merge_similar(Counter(rank_sig.values()), config.max_frame_edits)
    members: dict[Signature, list[int]] = {}
    for rank, sig in rank_sig.items():
        members.setdefault(home[sig], []).append(rank)
    ordered = sorted(members.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    usable = len(rank_sig)
    healthy = [sig for i, (sig, rs) in enumerate(ordered) if i == 0 or len(rs) >= config.healthy_share * usable]
    healthy_set = set(healthy)
    outliers = sorted(r for sig, rs in ordered if sig not in healthy_set for r in rs)
    groups = {describe(sig): tuple(sorted(rs)) for sig, rs in ordered}
    apart = {describe(sig): _apart(sig, healthy[0]) for sig, _ in ordered if sig not in healthy_set}

    seen_share = usable / expected if expected else 0.0
    lines = [f"{usable}/{expected} ranks with a usable dump, {len(ordered)} stack group(s)"]
    for sig, rs in ordered[: config.max_detail_groups]:
        role = "healthy" if sig in healthy_set else "outlier"
        extra = f"; apart by {', '.join(apart[describe(sig)])}" if role == "outlier" and apart[describe(sig)] else ""
        lines.append(f"{role} {len(rs)} rank(s) [{rank_list(rs)}]: {describe(sig, 4)}{extra}")
    if len(ordered) > config.max_detail_groups:
        lines.append(f"... {len(ordered) - config.max_detail_groups} more group(s)")
    if bad:
        lines.append(f"bad dumps (empty, garbled or truncated): ranks {rank_list(bad)}")
    if missing:
        lines.append(f"no dump: ranks {rank_list(missing)}")
    low_seen = seen_share < config.min_seen_share
    if low_seen:
        lines.append(f"too many ranks missing ({usable}/{expected} usable): low confidence")

    healthy_count = usable - len(outliers)
    dominant = healthy_count >= config.min_healthy_share * usable
    place = localize(outliers, topology, cover_share=config.cover_share) if outliers and dominant else None
    if place is None:
        lines.insert(0, "no outlier stack: every usable rank shares the dominant stack(s)" if dominant else
                     f"no dominant stack: the healthy-looking groups hold only {healthy_count}/{usable} ranks")
        return StackVerdict(
            outlier_ranks=(), healthy_signatures=tuple(describe(s) for s in healthy), groups=groups,
            axis=None, group_id=None, group=None, nodes=(), confidence=0.0, detail="; ".join(lines),
            bad_ranks=tuple(bad), missing_ranks=missing, outlier_frames=apart,
        )
    dominance = (usable - len(outliers)) / usable
    confidence = 0.95 * place.coverage * min(1.0, seen_share) * min(1.0, dominance / 0.5)
    if low_seen:
        confidence *= 0.5
    lines.insert(
        0,
        f"rule {RULE_OUTLIER}: {len(outliers)} outlier rank(s) [{rank_list(outliers)}]; {place.covered}/{place.outliers} in "
        f"{place.group} ({len(place.ranks)} ranks on {len(place.nodes)} node(s))",
    )
    return StackVerdict(
        outlier_ranks=tuple(outliers),
        healthy_signatures=tuple(describe(s) for s in healthy),
        groups=groups,
        axis=place.axis,
        group_id=place.group_id,
        group=place.group,
        nodes=place.nodes,
        confidence=round(confidence, 4),
        detail="; ".join(lines),
        bad_ranks=tuple(bad),
        missing_ranks=missing,
        outlier_frames=apart,
        rule=RULE_OUTLIER,
    )


def rank_list(ranks: list[int] | tuple[int, ...], limit: int = 12) -> str:
    """``0-3, 7, 9`` style, cut after ``limit`` runs."""
    runs: list[str] = []
    rs = sorted(ranks)
    i = 0
    while i < len(rs) and len(runs) < limit:
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        runs.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    more = " ..." if i < len(rs) else ""
    return ", ".join(runs) + more
