"""The hand-worked history (tests/history/known.py) with commands its receivers answered.

The acks are the trainer hook's own (`train`/`command_ack`), made by screening each command with the
hook's real gate and callbacks; only their times are set to the history's clock:
- FORGED (`cf`): an eviction of healthy n0 in j2 signed with an unknown key, citing the real
  diagnosis d4 (which got no command); both ranks on n0 refuse it;
- c1 is obeyed by rank 2 on n1 (and the launcher restarts the job for it), then sent again and refused as a duplicate;
- UNANSWERED (`cu`): a signed eviction of n9, where no receiver runs: only j1's spokesperson (rank 0
  on n0) answers that it is not for it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec

from faultlens.events.command import Command
from faultlens.events.command_memory import CommandMemory
from faultlens.events.command_screen import CommandScreen
from faultlens.events.signing import SigningKey
from faultlens.history.schema import open_history
from faultlens.history.sink import HistorySink, build_batch
from faultlens.streams.command_listener import CommandListener
from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks.hook import TrainerHook
from tests.history import known

TRUSTED = SigningKey.generate()
ATTACKER = SigningKey.generate()

FORGED = Command(id="cf", job="j2", action="evict", issued_at=known.D + 17, expires_at=known.D + 317, nodes=("n0",),
                 reason="gpu_thermal", diagnosis_id="d4").signed(ATTACKER)
UNANSWERED = Command(id="cu", job="j1", action="evict", issued_at=known.T0 + 118, expires_at=known.T0 + 400,
                     nodes=("n9",), reason="manual").signed(TRUSTED)
C1 = msgspec.structs.replace(known.C1, issued_at=known.T0 + 115, expires_at=known.T0 + 400).signed(TRUSTED)


class _Recorder:
    """The hook's producer: keeps what it is asked to send."""

    def __init__(self) -> None:
        self.sent = []

    def send_event(self, event) -> None:
        self.sent.append(event)

    def flush(self, timeout: float | None = None) -> None:
        pass


def hook_acks(cmd: Command, job: str, node: str, rank: int, now: float, memory: CommandMemory | None = None) -> list:
    """What the trainer hook of (job, node, rank) publishes when ``cmd`` reaches it at ``now``
    (``memory``: the ids that hook handled before)."""
    rec = _Recorder()
    hook = TrainerHook(job=job, rank=rank, node=node, settings=KafkaSettings(), listen=False, producer=rec)
    screen = CommandScreen(TRUSTED.verify_keys(), job, node, rank, spokesperson=rank == 0, memory=memory)
    listener = CommandListener(KafkaSettings(), screen, hook._on_command, hook._on_refused)
    listener.dispatch(cmd.encode(), now)
    hook.close()
    return [dataclasses.replace(e, ts=now + 0.5) for e in rec.sent if e.kind == "command_ack"]


def acks() -> list:
    out = hook_acks(FORGED, "j2", "n0", 0, FORGED.issued_at) + hook_acks(FORGED, "j2", "n0", 1, FORGED.issued_at)
    seen = CommandMemory()
    out += hook_acks(C1, "j1", "n1", 2, known.T0 + 116, seen) + hook_acks(C1, "j1", "n1", 2, known.T0 + 117, seen)
    out += hook_acks(UNANSWERED, "j1", "n0", 0, UNANSWERED.issued_at)
    return out


def write_history(path: Path, answers: list) -> None:
    """A history file of known.py (c1 moved to C1's time) with the three commands and ``answers``."""
    c = open_history(path, create=True)
    records = [r for r in known.records() if r is not known.C1] + [C1, FORGED, UNANSWERED, *answers]
    HistorySink(c).write(build_batch(records, labels=known.LABELS))
    c.close()
