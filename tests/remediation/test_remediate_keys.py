"""Which key `faultlens remediate` signs with: acting needs the deployment's private key; the
removed shared secret is refused with what to do instead. None of these reach a broker."""

import os
import sys

from faultlens.events.command import MAX_LIFETIME_S
from tests.in_process import faultlens_main
from tests.progress import run_watched  # waits while it prints or computes (issue 47)

ARGV = ["remediate", "--bootstrap", "127.0.0.1:1"]


def _env(tmp_path, **extra):
    env = {**os.environ, "FAULTLENS_HOME": str(tmp_path), **extra}
    for name in ("FAULTLENS_SIGNING_KEY", "FAULTLENS_SECRET", "FAULTLENS_SECRET_FILE"):
        if name not in extra:
            env.pop(name, None)
    return env


def _run(args, env):
    """As a user runs it: the first test. The others run main() in this process (tests/in_process.py):
    an interpreter started to print one refusal was ~0.7 CPU-s."""
    return run_watched([sys.executable, "-m", "faultlens", *ARGV, *args], env=env, stall_s=60, cpu=True, limit_s=280)


def _main(args, monkeypatch, tmp_path, **extra):
    """_run's command and _env's environment, in this process."""
    env = _env(tmp_path, **extra)
    for name in ("FAULTLENS_HOME", "FAULTLENS_SIGNING_KEY", "FAULTLENS_SECRET", "FAULTLENS_SECRET_FILE"):
        if name in env:
            monkeypatch.setenv(name, env[name])
        else:
            monkeypatch.delenv(name, raising=False)
    return faultlens_main(*ARGV, *args)


def test_acting_without_a_signing_key_is_refused_and_says_how_to_make_one(tmp_path):
    out = _run(["--act-on", "j1"], _env(tmp_path, FAULTLENS_SECRET="old-shared-secret"))
    assert out.returncode == 2
    assert "no command signing key" in out.stderr and "faultlens keys generate" in out.stderr
    assert "FAULTLENS_SECRET is ignored" in out.stderr  # an old deployment learns why its secret stopped working


def test_the_removed_secret_file_flag_is_refused_clearly(tmp_path, monkeypatch):
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    out = _main(["--secret-file", str(secret)], monkeypatch, tmp_path)
    assert out.returncode == 2 and "HMAC" in out.stderr and "--signing-key" in out.stderr


def test_a_bad_signing_key_file_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / "key.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n")
    out = _main(["--act-on", "j1", "--signing-key", str(bad)], monkeypatch, tmp_path)
    assert out.returncode == 2 and "not an unencrypted PEM private key" in out.stderr
    missing = _main(["--act-on", "j1", "--signing-key", str(tmp_path / "nope.pem")], monkeypatch, tmp_path)
    assert missing.returncode == 2 and "nope.pem" in missing.stderr


def test_a_ttl_over_the_receivers_cap_is_refused_before_anything_is_signed(tmp_path, monkeypatch):
    out = _main(["--ttl", str(MAX_LIFETIME_S + 1)], monkeypatch, tmp_path)
    assert out.returncode == 2 and "receivers refuse" in out.stderr
