"""Command-signing keys: Ed25519, private key on the remediation consumer only.

The remediation consumer (`faultlens remediate` / `faultlens up`) signs with the private key;
agents, trainer hooks and launchers verify with the public key. So a compromised node holds
nothing that lets it sign a command (docs/security.md). Each key has a short id, carried in every
command, so a receiver can trust two public keys while the signer rolls over from one to the other.

Keys live in PEM files written by `faultlens keys generate --out DIR`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

log = logging.getLogger(__name__)

SIGNING_KEY_ENV = "FAULTLENS_SIGNING_KEY"  # path of the private key (remediate, up)
VERIFY_KEY_ENV = "FAULTLENS_VERIFY_KEY"  # path(s) of public keys, comma-separated (every receiver)
PRIVATE_KEY_FILE = "command-signing-key.pem"
PUBLIC_KEY_FILE = "command-verify-key.pem"
MAX_VERIFY_KEYS = 2  # the old and the new key during a rollover; more is a forgotten key


def key_id(public: Ed25519PublicKey) -> str:
    """16 hex digits of the SHA-256 of the raw public key: names a key without revealing anything."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def _public_pem(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclass(frozen=True)
class SigningKey:
    """The private half; only the remediation consumer should ever hold one."""

    private: Ed25519PrivateKey
    key_id: str

    @classmethod
    def generate(cls) -> "SigningKey":
        private = Ed25519PrivateKey.generate()
        return cls(private, key_id(private.public_key()))

    @classmethod
    def from_pem(cls, data: bytes, source: str = "key") -> "SigningKey":
        try:
            private = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{source}: not an unencrypted PEM private key ({exc})") from None
        if not isinstance(private, Ed25519PrivateKey):
            raise ValueError(f"{source}: not an Ed25519 private key ({type(private).__name__})")
        return cls(private, key_id(private.public_key()))

    def sign(self, data: bytes) -> str:
        return self.private.sign(data).hex()

    def private_pem(self) -> bytes:
        return self.private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption())

    def public_pem(self) -> bytes:
        return _public_pem(self.private.public_key())

    def verify_keys(self) -> "VerifyKeys":
        """The matching public key, as a receiver holds it."""
        return VerifyKeys({self.key_id: self.private.public_key()})


@dataclass(frozen=True)
class VerifyKeys:
    """The public keys a receiver trusts, by key id (one, or two during a rollover)."""

    keys: Mapping[str, Ed25519PublicKey]

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError("no public key to verify commands with")

    @classmethod
    def from_pem(cls, blobs: Iterable[tuple[str, bytes]]) -> "VerifyKeys":
        """``blobs``: (where it came from, PEM bytes) pairs."""
        keys: dict[str, Ed25519PublicKey] = {}
        for source, data in blobs:
            try:
                public = serialization.load_pem_public_key(data)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{source}: not a PEM public key ({exc})") from None
            if not isinstance(public, Ed25519PublicKey):
                raise ValueError(f"{source}: not an Ed25519 public key ({type(public).__name__})")
            keys[key_id(public)] = public
        if len(keys) > MAX_VERIFY_KEYS:
            log.warning("%d command verify keys trusted (%s): more than a rollover needs; drop the retired one",
                        len(keys), ", ".join(sorted(keys)))
        return cls(keys)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(sorted(self.keys))

    def problem(self, key: str, data: bytes, signature: str) -> str | None:
        """Why ``signature`` over ``data`` is not good under key ``key``; None when it is."""
        if not signature:
            return "unsigned"
        if not key:
            return "no key id (signed with a shared secret by an older faultlens?)"
        public = self.keys.get(key)
        if public is None:
            return f"signed with unknown key {key} (trusted: {', '.join(self.ids)})"
        try:
            public.verify(bytes.fromhex(signature), data)
        except (ValueError, InvalidSignature):
            return f"bad signature under key {key} (forged or altered)"
        return None


LEGACY_SECRET_ENVS = ("FAULTLENS_SECRET", "FAULTLENS_SECRET_FILE")


def _legacy_hint() -> str:
    """Said when an old deployment still sets the shared HMAC secret, which is no longer read."""
    legacy = [name for name in LEGACY_SECRET_ENVS if os.environ.get(name)]
    if not legacy:
        return ""
    return (f"; {'/'.join(legacy)} is ignored: shared-secret (HMAC) signing was removed because every "
            f"receiver could sign with it (docs/security.md)")


def _check_private_mode(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        log.warning("signing key %s is readable by others (mode %o); chmod 600 it", path, mode)


def load_signing_key(path: str | os.PathLike[str] | None = None) -> SigningKey:
    """The private key from ``path`` (the --signing-key flag) or ``FAULTLENS_SIGNING_KEY``."""
    path = path or os.environ.get(SIGNING_KEY_ENV)
    if not path:
        raise ValueError(f"no command signing key: pass --signing-key or set {SIGNING_KEY_ENV} "
                         f"(create one with `faultlens keys generate --out DIR`){_legacy_hint()}")
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ValueError(f"signing key {p}: {exc.strerror or exc}") from None
    _check_private_mode(p)
    return SigningKey.from_pem(data, str(p))


def verify_key_paths(paths: Sequence[str | os.PathLike[str]] | None = None) -> list[str]:
    """The public key files named by the flag (repeatable) or ``FAULTLENS_VERIFY_KEY`` (comma-separated)."""
    if paths:
        return [str(p) for p in paths]
    return [p.strip() for p in os.environ.get(VERIFY_KEY_ENV, "").split(",") if p.strip()]


def load_verify_keys(paths: Sequence[str | os.PathLike[str]] | None = None) -> VerifyKeys:
    """The trusted public keys from ``paths`` (the --verify-key flags) or ``FAULTLENS_VERIFY_KEY``."""
    named = verify_key_paths(paths)
    if not named:
        raise ValueError(f"no command verify key: pass --verify-key or set {VERIFY_KEY_ENV} "
                         f"(the public key from `faultlens keys generate`){_legacy_hint()}")
    blobs = []
    for path in named:
        try:
            blobs.append((path, Path(path).read_bytes()))
        except OSError as exc:
            raise ValueError(f"verify key {path}: {exc.strerror or exc}") from None
    return VerifyKeys.from_pem(blobs)


def write_key_pair(out_dir: str | os.PathLike[str], key: SigningKey | None = None) -> tuple[Path, Path]:
    """Write the private key (mode 0600) and the public key (0644) into ``out_dir``; never overwrites."""
    key = key or SigningKey.generate()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    private, public = out / PRIVATE_KEY_FILE, out / PUBLIC_KEY_FILE
    for p in (private, public):
        if p.exists():
            raise FileExistsError(f"{p} exists; keys are never overwritten (use another --out for a new key)")
    # Created 0600 from the start: the key is never on disk with wider permissions, not even briefly.
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_pem())
    os.chmod(private, 0o600)  # a umask cannot widen it, but be explicit
    public.write_bytes(key.public_pem())
    os.chmod(public, 0o644)
    return private, public


def ephemeral_signing_key(why: str) -> SigningKey:
    """A throwaway key pair for a run that needs no real one (observe-only, the demo); says so."""
    key = SigningKey.generate()
    log.warning("using an ephemeral command-signing key %s (%s): no receiver outside this run trusts it",
                key.key_id, why)
    return key
