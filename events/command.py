"""The command record of docs/design.md §6, with its Ed25519 signature.

Only the remediation consumer holds the private key (events.signing); every receiver verifies
with the public key, named in the command by ``key_id``, so a forged or altered command is
refused and a compromised node cannot sign one. The signature covers the canonical JSON of every
other field, ``key_id`` included.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Mapping

import orjson

from faultlens.events.envelope import InvalidEvent, loads, new_id, require_fields
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    job: str
    # Given as a member or as its name; kept as the member (see CommandAction).
    action: CommandAction
    issued_at: float
    expires_at: float
    nodes: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    reason: str = ""
    diagnosis_id: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=new_id)
    key_id: str = ""
    signature: str = ""

    def __post_init__(self) -> None:
        if type(self.action) is not CommandAction:
            try:
                object.__setattr__(self, "action", CommandAction(self.action))
            except (ValueError, TypeError):
                raise InvalidEvent("action", f"unknown command action {self.action!r}") from None
        if not self.job:
            raise InvalidEvent("job", "a command must name its job")
        if self.expires_at < self.issued_at:
            raise InvalidEvent("expires_at", "expires before it was issued")

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "job": self.job,
            "action": self.action,
            "nodes": list(self.nodes),
            "ranks": list(self.ranks),
            "reason": self.reason,
            "diagnosis_id": self.diagnosis_id,
            "issued_at": self.issued_at,
            "expires_at": self.expires_at,
            "params": dict(self.params),
            "key_id": self.key_id,
        }

    def canonical(self) -> bytes:
        """The signed bytes: sorted-key JSON of every field but the signature."""
        return orjson.dumps(self.body(), option=orjson.OPT_SORT_KEYS)

    def signed(self, key: SigningKey) -> "Command":
        unsigned = replace(self, key_id=key.key_id, signature="")
        return replace(unsigned, signature=key.sign(unsigned.canonical()))

    def signature_problem(self, keys: VerifyKeys) -> str | None:
        """Why the signature is not good under ``keys``; None when it is."""
        return keys.problem(self.key_id, self.canonical(), self.signature)

    def verify(self, keys: VerifyKeys) -> bool:
        return self.signature_problem(keys) is None

    def to_dict(self) -> dict[str, Any]:
        return {**self.body(), "signature": self.signature}

    def encode(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> "Command":
        obj = require_fields(obj, ("id", "job", "action", "issued_at", "expires_at", "signature"), "a command")
        try:
            return cls(
                id=str(obj["id"]),
                job=str(obj["job"]),
                action=obj["action"],
                nodes=tuple(str(n) for n in obj.get("nodes") or ()),
                ranks=tuple(int(r) for r in obj.get("ranks") or ()),
                reason=str(obj.get("reason", "")),
                diagnosis_id=str(obj.get("diagnosis_id", "")),
                issued_at=float(obj["issued_at"]),
                expires_at=float(obj["expires_at"]),
                params=dict(obj.get("params") or {}),
                key_id=str(obj.get("key_id") or ""),
                signature=str(obj["signature"]),
            )
        except (TypeError, ValueError) as exc:
            raise InvalidEvent(None, f"bad command: {exc}") from None

    @classmethod
    def decode(cls, raw: bytes | str | None) -> "Command":
        return cls.from_dict(loads(raw))
