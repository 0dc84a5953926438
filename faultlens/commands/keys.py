"""faultlens keys: the Ed25519 key pair that signs remediation commands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from faultlens.commands import about
from faultlens.events.signing import (
    PRIVATE_KEY_FILE,
    PUBLIC_KEY_FILE,
    SIGNING_KEY_ENV,
    VERIFY_KEY_ENV,
    SigningKey,
    VerifyKeys,
    write_key_pair,
)

HELP = "generate or inspect the command-signing key pair"
DESCRIPTION = f"""\
`faultlens keys generate --out DIR` writes a new Ed25519 pair:

  DIR/{PRIVATE_KEY_FILE}  private (mode 0600), only for `faultlens remediate` / `faultlens up`
                               (--signing-key or {SIGNING_KEY_ENV})
  DIR/{PUBLIC_KEY_FILE}   public, for every receiver: `faultlens collect`, trainer hooks and
                               `python -m faultlens.trainer_hooks.launcher` (--verify-key or {VERIFY_KEY_ENV})

and prints one JSON line with both paths and the key id every signed command carries. Existing
files are never overwritten. To rotate: generate into a new DIR, give receivers both public keys
(--verify-key twice, or {VERIFY_KEY_ENV}=old.pem,new.pem), switch the signer, then drop the old one.

`faultlens keys show FILE...` prints the key id of each PEM file (private or public)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="keys_command", metavar="{generate,show}", required=True)
    g = sub.add_parser("generate", help="write a new key pair", description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("--out", type=Path, required=True, help="directory to write the two PEM files into")
    s = sub.add_parser("show", help="print the key id of PEM key files")
    s.add_argument("files", nargs="+", type=Path, metavar="FILE")


def _show(path: Path) -> dict:
    data = path.read_bytes()
    if b"PRIVATE KEY" in data:
        return {"file": str(path), "kind": "private", "key_id": SigningKey.from_pem(data, str(path)).key_id}
    (key_id,) = VerifyKeys.from_pem([(str(path), data)]).ids
    return {"file": str(path), "kind": "public", "key_id": key_id}


def run(args: argparse.Namespace) -> int:
    if args.keys_command == "show":
        code = 0
        for path in args.files:
            try:
                print(json.dumps(_show(path)), flush=True)
            except (OSError, ValueError) as exc:
                print(f"faultlens keys show: {about(path, exc)}", file=sys.stderr)
                code = 1
        return code
    key = SigningKey.generate()
    try:
        private, public = write_key_pair(args.out, key)
    except (OSError, FileExistsError) as exc:
        print(f"faultlens keys generate: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({
        "key_id": key.key_id,
        "private_key": str(private),
        "public_key": str(public),
        "private_key_goes_to": f"faultlens remediate / up only: --signing-key {private} (or {SIGNING_KEY_ENV})",
        "public_key_goes_to": f"every agent, trainer hook and launcher: --verify-key {public} (or {VERIFY_KEY_ENV})",
    }), flush=True)
    return 0
