"""A stall that is a checkpoint save under way, read from the stacks: no hang, never a reattempt or an eviction.

A save stops every rank's steps for as long as it writes: every rank writing its shard (a sharded
save: torch.distributed.checkpoint, Megatron's distributed checkpoint), or one rank (or a few)
writing the whole state while every other waits in the barrier after the save (torch.save of a full
state dict). A few minutes of that is a healthy job (tests/outside/sre_shapes.py checkpoint_stall:
4 minutes of 64 ranks in DCP's write; a reattempt would throw the save away, and an eviction of the
writer's machine would take a healthy one for a slow filer). One capture cannot tell a slow save
from a stuck one, so :class:`~diagnosis.hang.verdict.HangVerdicts` records the first and looks again
after a patience (diagnosis/hang/state.py, ``writing_patience_s``).

Pure: the ranks' stack texts and a topology in, a :class:`Save` or None out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from faultlens.diagnosis.stacks.rank_threads import read_rank
from faultlens.events.topology import Topology

WRITE = "checkpoint write"  # diagnosis.stacks.wait_primitives' activity of a rank writing its checkpoint


@dataclass(frozen=True)
class Save:
    writers: tuple[int, ...]  # the ranks writing their checkpoint
    usable: int  # ranks with a usable stack
    frames: tuple[str, ...]  # what the writers are in, distinct, sorted

    @property
    def sharded(self) -> bool:
        """Every rank with a usable stack writes (its shard)."""
        return len(self.writers) == self.usable

    def nodes(self, topology: Topology) -> tuple[str, ...]:
        """The writers' machines, when they are some of the job's (a sharded save names none)."""
        return () if self.sharded else tuple(dict.fromkeys(topology.by_rank[r].node for r in self.writers))

    def describe(self, ranks: int) -> str:
        said = "; ".join(self.frames[:3])
        if self.sharded:
            return f"{len(self.writers)} of {ranks} rank(s) are writing their checkpoint ({said})"
        listed = ", ".join(map(str, self.writers[:8])) + (", ..." if len(self.writers) > 8 else "")
        return (
            f"rank(s) [{listed}] are writing their checkpoint ({said}) while the other "
            f"{self.usable - len(self.writers)} rank(s) with a usable stack wait for them"
        )


def read_save(texts: Mapping[int, str], topology: Topology, suspects: tuple[int, ...] = ()) -> Save | None:
    """The save the stacks show, or None: most of the job's ranks have a usable stack, some write
    their checkpoint, every other one waits (in the barrier or a collective after the save), and the
    ``suspects`` a stack reading singled out, if any, are writers."""
    doing = {r: read_rank(t).activity for r, t in texts.items() if r in topology.by_rank}
    usable = {r: a for r, a in doing.items() if a is not None}
    if len(usable) * 2 <= len(topology.by_rank):
        return None
    writers = tuple(sorted(r for r, a in usable.items() if not a.waiting and a.activity == WRITE))
    if not writers or not set(suspects) <= set(writers):
        return None
    if not all(a.waiting for r, a in usable.items() if r not in writers):
        return None  # a rank running outside communication and outside the save: not a save alone
    frames = tuple(sorted({f"{usable[r].activity} in {usable[r].frame}" for r in writers}))
    return Save(writers, len(usable), frames)


__all__ = ["Save", "WRITE", "read_save"]
