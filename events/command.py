"""The command record of docs/design.md §6, with its Ed25519 signature.

Only the remediation consumer holds the private key (events.signing); every receiver verifies
with the public key, named in the command by ``key_id``, so a forged or altered command is
refused and a compromised node cannot sign one. The signature covers the canonical JSON of every
other field, ``key_id`` included.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import msgspec
import orjson

from faultlens.events.envelope import InvalidEvent, new_id
from faultlens.events.record import Record, Seconds
from faultlens.events.signing import SigningKey, VerifyKeys


class CommandAction(StrEnum):
    """What a command asks its receivers to do (docs/design.md §9; a contract: add, never rename).
    A member equals its name as a string and encodes as it, so a command's signed bytes are the
    same whether it was built from a member or a name."""

    EVICT = "evict"
    RESTART = "restart"
    REATTEMPT = "reattempt"
    ROLLBACK = "rollback"
    CAPTURE_STACKS = "capture_stacks"
    CHECKPOINT = "checkpoint"
    STOP = "stop"
    RUN_CHECKS = "run_checks"  # the node agents' stop-time checks (collectors.checks)


COMMAND_ACTIONS: tuple[str, ...] = tuple(a.value for a in CommandAction)

# Receivers refuse a command valid for longer than this, whatever its signer wrote: a leaked
# signed command is dangerous only until it expires.
MAX_LIFETIME_S = 600.0


class Command(Record, frozen=True, kw_only=True):
    """A command, its fields in the order they go on the bus (a message must hold those of
    ``REQUIRED``; the signature covers the others, so they are read as they were sent)."""

    REQUIRED = ("id", "job", "action", "issued_at", "expires_at", "signature")
    WHAT = "a command"

    id: str = msgspec.field(default_factory=new_id)
    job: str
    # Given as a member or as its name; kept as the member (see CommandAction).
    action: CommandAction
    nodes: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    reason: str = ""
    diagnosis_id: str = ""
    issued_at: Seconds
    expires_at: Seconds
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    key_id: str = ""
    signature: str = ""

    def __post_init__(self) -> None:
        if type(self.action) is not CommandAction:
            try:
                msgspec.structs.force_setattr(self, "action", CommandAction(self.action))
            except (ValueError, TypeError):
                raise InvalidEvent("action", f"unknown command action {self.action!r}") from None
        # A caller may hand a list or another mapping: kept as the record's own types, so two equal
        # commands compare equal whichever was given.
        if type(self.nodes) is not tuple:
            msgspec.structs.force_setattr(self, "nodes", tuple(self.nodes))
        if type(self.ranks) is not tuple:
            msgspec.structs.force_setattr(self, "ranks", tuple(self.ranks))
        if type(self.params) is not dict:
            msgspec.structs.force_setattr(self, "params", dict(self.params))
        if not self.job:
            raise InvalidEvent("job", "a command must name its job")
        if self.expires_at < self.issued_at:
            raise InvalidEvent("expires_at", "expires before it was issued")

    def body(self) -> dict[str, Any]:
        """Every field but the signature: what the signature covers."""
        out = self.to_dict()
        del out["signature"]
        return out

    def canonical(self) -> bytes:
        """The signed bytes: sorted-key JSON of every field but the signature."""
        return orjson.dumps(self.body(), option=orjson.OPT_SORT_KEYS)

    def signed(self, key: SigningKey) -> "Command":
        unsigned = msgspec.structs.replace(self, key_id=key.key_id, signature="")
        return msgspec.structs.replace(unsigned, signature=key.sign(unsigned.canonical()))

    def signature_problem(self, keys: VerifyKeys) -> str | None:
        """Why the signature is not good under ``keys``; None when it is."""
        return keys.problem(self.key_id, self.canonical(), self.signature)

    def verify(self, keys: VerifyKeys) -> bool:
        return self.signature_problem(keys) is None
