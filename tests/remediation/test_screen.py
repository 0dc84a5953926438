import orjson
from msgspec.structs import replace

from faultlens.events.command import Command
from faultlens.events.command_screen import CommandScreen
from faultlens.events.signing import SigningKey

KEY = SigningKey.generate()
KEYS = KEY.verify_keys()


def cmd(**kw):
    base = dict(job="j", action="restart", issued_at=1000.0, expires_at=1300.0)
    return Command(**{**base, **kw}).signed(KEY)


def screen(node="n001", rank=1):
    return CommandScreen(KEYS, "j", node, rank)


def test_a_signed_fresh_addressed_command_is_obeyed_once():
    s, c = screen(), cmd()
    first = s.screen(c.encode(), 1100.0)
    assert first.obey and first.command == c
    again = s.screen(c.encode(), 1101.0)
    assert not again.obey and again.addressed and "duplicate" in again.reason


def test_forged_and_altered_commands_are_refused():
    s = screen()
    # an attacker's own key, claiming the trusted key's id
    unsigned = Command(job="j", action="evict", nodes=("n001",), issued_at=1000.0, expires_at=1300.0, key_id=KEY.key_id)
    forged = replace(unsigned, signature=SigningKey.generate().sign(unsigned.canonical()))
    r = s.screen(forged.encode(), 1100.0)
    assert not r.obey and r.addressed and "bad signature" in r.reason
    body = orjson.loads(cmd(action="checkpoint").encode())
    body["action"] = "evict"  # altered after signing
    r = s.screen(orjson.dumps(body), 1100.0)
    assert not r.obey and "bad signature" in r.reason
    unsigned = replace(cmd(), signature="")
    assert not s.screen(unsigned.encode(), 1100.0).obey


def test_expired_commands_are_refused():
    r = screen().screen(cmd().encode(), 1300.5)
    assert not r.obey and r.addressed and "expired" in r.reason


def test_malformed_messages_are_refused_with_a_reason():
    for raw in (b"garbage", None, b"{}", b'{"id": "x", "job": "j", "action": "explode", "issued_at": 1, "expires_at": 2, "signature": "s"}'):
        r = screen().screen(raw, 1100.0)
        assert not r.obey and r.command is None and r.reason.startswith("malformed")


def test_addressing_by_job_node_and_rank():
    s = screen(node="n001", rank=1)
    assert not s.screen(cmd(job="other").encode(), 1100).addressed
    assert not s.screen(cmd(nodes=("n002",)).encode(), 1100).addressed
    assert not s.screen(cmd(ranks=(0,)).encode(), 1100).addressed
    assert s.screen(cmd(nodes=("n001", "n002")).encode(), 1100).obey
    assert s.screen(cmd(ranks=(1,)).encode(), 1100).obey
    # the launcher listens for the whole job: any node
    assert CommandScreen(KEYS, "j").screen(cmd(nodes=("n009",)).encode(), 1100).obey
