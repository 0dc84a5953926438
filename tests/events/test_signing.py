"""Command-signing keys: PEM files as `faultlens keys generate` writes them, key ids, rollover."""

import json
import os
import stat
import sys

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from faultlens.events.signing import (
    PRIVATE_KEY_FILE,
    PUBLIC_KEY_FILE,
    SigningKey,
    VerifyKeys,
    load_signing_key,
    load_verify_keys,
    write_key_pair,
)
from tests.progress import run_watched  # waits while it prints or computes (issue 47)


def test_keys_generate_writes_a_private_key_only_its_owner_can_read(tmp_path):
    out = run_watched([sys.executable, "-m", "faultlens", "keys", "generate", "--out", str(tmp_path / "k")],
                      stall_s=60, cpu=True, limit_s=280)
    assert out.returncode == 0, out.stderr
    line = json.loads(out.stdout)
    private, public = tmp_path / "k" / PRIVATE_KEY_FILE, tmp_path / "k" / PUBLIC_KEY_FILE
    assert (line["private_key"], line["public_key"]) == (str(private), str(public))
    assert "--signing-key" in line["private_key_goes_to"] and "--verify-key" in line["public_key_goes_to"]
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert b"PRIVATE" not in public.read_bytes()
    key, keys = load_signing_key(private), load_verify_keys([public])
    assert key.key_id == line["key_id"] and keys.ids == (line["key_id"],)
    assert keys.problem(key.key_id, b"data", key.sign(b"data")) is None
    # never overwritten: a second generate into the same place would strand every receiver
    again = run_watched([sys.executable, "-m", "faultlens", "keys", "generate", "--out", str(tmp_path / "k")],
                        stall_s=60, cpu=True, limit_s=280)
    assert again.returncode == 1 and "never overwritten" in again.stderr
    assert load_signing_key(private).key_id == key.key_id


def test_keys_show_names_both_halves_by_the_same_id(tmp_path):
    private, public = write_key_pair(tmp_path)
    out = run_watched([sys.executable, "-m", "faultlens", "keys", "show", str(private), str(public)],
                      stall_s=60, cpu=True, limit_s=280)
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["kind"] for r in rows] == ["private", "public"] and rows[0]["key_id"] == rows[1]["key_id"]


def test_env_names_the_keys_and_two_public_keys_cover_a_rollover(tmp_path, monkeypatch):
    old_priv, old_pub = write_key_pair(tmp_path / "old")
    new_priv, new_pub = write_key_pair(tmp_path / "new")
    monkeypatch.setenv("FAULTLENS_SIGNING_KEY", str(new_priv))
    monkeypatch.setenv("FAULTLENS_VERIFY_KEY", f"{old_pub},{new_pub}")
    keys = load_verify_keys()
    for signer in (load_signing_key(old_priv), load_signing_key()):
        assert keys.problem(signer.key_id, b"x", signer.sign(b"x")) is None
    retired = VerifyKeys.from_pem([(str(new_pub), new_pub.read_bytes())])
    old = load_signing_key(old_priv)
    assert "unknown key" in retired.problem(old.key_id, b"x", old.sign(b"x"))


def test_a_private_key_readable_by_others_is_loaded_with_a_warning(tmp_path, caplog):
    private, _ = write_key_pair(tmp_path)
    os.chmod(private, 0o644)
    with caplog.at_level("WARNING"):
        load_signing_key(private)
    assert "readable by others" in caplog.text


@pytest.mark.parametrize("content, message", [
    (b"", "not an unencrypted PEM private key"),
    (b"-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n", "not an unencrypted PEM private key"),
    (ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
     "not an Ed25519 private key"),
])
def test_bad_private_key_files_get_a_clear_error(tmp_path, content, message):
    path = tmp_path / "key.pem"
    path.write_bytes(content)
    os.chmod(path, 0o600)
    with pytest.raises(ValueError, match=message):
        load_signing_key(path)


def test_bad_public_key_files_and_missing_keys_get_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("FAULTLENS_VERIFY_KEY", raising=False)
    monkeypatch.delenv("FAULTLENS_SIGNING_KEY", raising=False)
    with pytest.raises(ValueError, match="no command verify key"):
        load_verify_keys()
    with pytest.raises(ValueError, match="no command signing key"):
        load_signing_key()
    with pytest.raises(ValueError, match="nope.pem"):
        load_verify_keys([tmp_path / "nope.pem"])
    private, _ = write_key_pair(tmp_path)
    with pytest.raises(ValueError, match="not a PEM public key"):
        load_verify_keys([private])  # the private key handed to a receiver by mistake
    rsa_like = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "ec.pem").write_bytes(rsa_like)
    with pytest.raises(ValueError, match="not an Ed25519 public key"):
        load_verify_keys([tmp_path / "ec.pem"])


def test_signatures_that_do_not_verify_say_why():
    key = SigningKey.generate()
    keys = key.verify_keys()
    good = key.sign(b"body")
    assert keys.problem(key.key_id, b"body", "") == "unsigned"
    assert "no key id" in keys.problem("", b"body", good)
    assert "bad signature" in keys.problem(key.key_id, b"body!", good)
    assert "bad signature" in keys.problem(key.key_id, b"body", "zz-not-hex")
    assert "bad signature" in keys.problem(key.key_id, b"body", good[:-2])
