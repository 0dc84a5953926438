"""The command record of DESIGN.md §6, with its HMAC signature.

A trainer obeys only commands whose signature verifies under the shared secret, so a forged or
altered command is refused. The signature covers the canonical JSON of every other field.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import orjson

from streams.events import InvalidEvent, loads, new_id, require_fields

COMMAND_ACTIONS = ("evict", "restart", "reattempt", "rollback", "capture_stacks", "checkpoint", "stop")

SECRET_ENV = "FAULTLENS_SECRET"
SECRET_FILE_ENV = "FAULTLENS_SECRET_FILE"


def load_secret(path: str | os.PathLike[str] | None = None) -> bytes:
    """The shared secret: a file (flag, or ``FAULTLENS_SECRET_FILE``) or ``FAULTLENS_SECRET``."""
    path = path or os.environ.get(SECRET_FILE_ENV)
    if path:
        secret = Path(path).read_bytes().strip()
        if not secret:
            raise ValueError(f"secret file {path} is empty")
        return secret
    env = os.environ.get(SECRET_ENV)
    if env:
        return env.encode()
    raise ValueError(f"no command secret: set {SECRET_ENV} or {SECRET_FILE_ENV}, or pass --secret-file")


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    job: str
    action: str
    issued_at: float
    expires_at: float
    nodes: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    reason: str = ""
    diagnosis_id: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=new_id)
    signature: str = ""

    def __post_init__(self) -> None:
        if self.action not in COMMAND_ACTIONS:
            raise InvalidEvent("action", f"unknown command action {self.action!r}")
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
        }

    def _mac(self, secret: bytes) -> str:
        canonical = orjson.dumps(self.body(), option=orjson.OPT_SORT_KEYS)
        return hmac.new(secret, canonical, hashlib.sha256).hexdigest()

    def signed(self, secret: bytes) -> "Command":
        return replace(self, signature=self._mac(secret))

    def verify(self, secret: bytes) -> bool:
        return bool(self.signature) and hmac.compare_digest(self.signature, self._mac(secret))

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
                signature=str(obj["signature"]),
            )
        except (TypeError, ValueError) as exc:
            raise InvalidEvent(None, f"bad command: {exc}") from None

    @classmethod
    def decode(cls, raw: bytes | str | None) -> "Command":
        return cls.from_dict(loads(raw))
