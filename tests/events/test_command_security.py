"""The issue-16 attacks on a receiver, each refused with a reason a person can act on.

Receivers are built the way production builds them: a CommandScreen with the deployment's public
key and a command memory file; commands come as the bytes on the `commands` topic.
"""

import orjson
from msgspec.structs import replace

from faultlens.events.command import MAX_LIFETIME_S, Command
from faultlens.events.command_memory import CommandMemory, memory_file
from faultlens.events.command_screen import CommandScreen
from faultlens.events.signing import SigningKey, VerifyKeys

OURS = SigningKey.generate()  # the remediation consumer's key
THEIRS = SigningKey.generate()  # another deployment's remediation consumer
NOW = 1_700_000_000.0


def evict(**kw):
    base = dict(job="train-7", action="evict", nodes=("n004",), issued_at=NOW, expires_at=NOW + 300,
                reason="gpu_lost on n004", diagnosis_id="d-1")
    return Command(**{**base, **kw})


def receiver(tmp_path, node="n004", rank=None, keys: VerifyKeys | None = None):
    return CommandScreen(OURS.verify_keys() if keys is None else keys, "train-7", node, rank,
                         memory=CommandMemory(memory_file(tmp_path, "agent", "train-7", node)))


def refused(result, words):
    assert not result.obey and result.addressed, result
    assert words in result.reason, result.reason
    return result


def test_a_command_from_our_signer_is_obeyed(tmp_path):
    assert receiver(tmp_path).screen(evict().signed(OURS).encode(), NOW + 1).obey


def test_forged_with_a_wrong_key_under_our_key_id(tmp_path):
    unsigned = evict(key_id=OURS.key_id)
    forged = replace(unsigned, signature=THEIRS.sign(unsigned.canonical()))
    refused(receiver(tmp_path).screen(forged.encode(), NOW + 1), f"bad signature under key {OURS.key_id}")


def test_signed_by_another_deployment(tmp_path):
    r = refused(receiver(tmp_path).screen(evict().signed(THEIRS).encode(), NOW + 1), "unknown key")
    assert THEIRS.key_id in r.reason and OURS.key_id in r.reason  # which key came, which are trusted


def test_altered_after_signing(tmp_path):
    body = orjson.loads(evict().signed(OURS).encode())
    for field, value in (("nodes", ["n005"]), ("expires_at", NOW + 299.5), ("key_id", THEIRS.key_id),
                         ("params", {"replacements": ["evil-host"]})):
        altered = orjson.dumps({**body, field: value})
        screen = receiver(tmp_path, node=None)
        result = screen.screen(altered, NOW + 1)
        assert not result.obey and ("bad signature" in result.reason or "unknown key" in result.reason), field


def test_an_hmac_command_from_an_older_faultlens(tmp_path):
    legacy = {**orjson.loads(evict().encode()), "signature": "ab" * 32}
    legacy.pop("key_id")
    refused(receiver(tmp_path).screen(orjson.dumps(legacy), NOW + 1), "no key id")


def test_expired(tmp_path):
    refused(receiver(tmp_path).screen(evict().signed(OURS).encode(), NOW + 301), "expired")


def test_a_lifetime_over_the_receivers_cap_whatever_the_signer_wrote(tmp_path):
    year = evict(expires_at=NOW + 365 * 86400).signed(OURS)
    refused(receiver(tmp_path).screen(year.encode(), NOW + 1), f"over the {MAX_LIFETIME_S:.0f}s")
    at_cap = evict(expires_at=NOW + MAX_LIFETIME_S).signed(OURS)
    assert receiver(tmp_path / "2").screen(at_cap.encode(), NOW + 1).obey
    strict = CommandScreen(OURS.verify_keys(), "train-7", "n004", max_lifetime_s=60)
    refused(strict.screen(evict().signed(OURS).encode(), NOW + 1), "over the 60s")


def test_issued_in_the_future(tmp_path):
    ahead = evict(issued_at=NOW + 500, expires_at=NOW + 800).signed(OURS)
    refused(receiver(tmp_path).screen(ahead.encode(), NOW), "in the future")
    skewed = evict(issued_at=NOW + 5, expires_at=NOW + 300).signed(OURS)  # a few seconds of clock skew is fine
    assert receiver(tmp_path / "2").screen(skewed.encode(), NOW).obey


def test_an_evict_that_names_no_nodes(tmp_path):
    whole_job = evict(nodes=()).signed(OURS)
    refused(receiver(tmp_path).screen(whole_job.encode(), NOW + 1), "must name its nodes")


def test_wrong_job_and_wrong_node_are_refused_and_not_obeyed(tmp_path):
    screen = receiver(tmp_path, node="n001", rank=3)
    other_job = screen.screen(evict(job="train-8").signed(OURS).encode(), NOW + 1)
    assert not other_job.obey and not other_job.addressed and other_job.reason == "for job train-8, not train-7"
    other_node = screen.screen(evict().signed(OURS).encode(), NOW + 1)
    assert not other_node.obey and not other_node.addressed and other_node.reason == "for nodes n004, not n001"
    other_rank = screen.screen(evict(nodes=("n001",), ranks=(0, 1)).signed(OURS).encode(), NOW + 1)
    assert not other_rank.obey and other_rank.reason == "for ranks 0,1, not 3"
    # none of these is acked by an ordinary rank: the fleet's every receiver reads every command
    assert not (other_job.ack or other_node.ack or other_rank.ack)


def test_which_misaddressed_commands_are_acked(tmp_path):
    """A command of another job that names this node is acked by that node's receivers; a command
    of this job for other nodes or ranks is acked by the job's spokesperson (rank 0) only."""
    rank3 = receiver(tmp_path / "r3", node="n001", rank=3)
    aimed_here = rank3.screen(evict(job="train-8", nodes=("n001",)).signed(OURS).encode(), NOW + 1)
    assert not aimed_here.obey and not aimed_here.addressed and aimed_here.ack
    assert aimed_here.reason == "for job train-8, not train-7 (names n001)"
    rank0 = CommandScreen(OURS.verify_keys(), "train-7", "n000", 0, spokesperson=True,
                          memory=CommandMemory(memory_file(tmp_path, "hook", "train-7", "r0")))
    for_n004 = rank0.screen(evict().signed(OURS).encode(), NOW + 1)
    assert not for_n004.obey and for_n004.ack and for_n004.reason == "for nodes n004, not n000"
    for_rank5 = rank0.screen(evict(nodes=("n000",), ranks=(5,)).signed(OURS).encode(), NOW + 1)
    assert not for_rank5.obey and for_rank5.ack and for_rank5.reason == "for ranks 5, not 0"
    elsewhere = rank0.screen(evict(job="train-8").signed(OURS).encode(), NOW + 1)
    assert not elsewhere.ack  # another job's command for another machine: nobody here answers it
    agent = CommandScreen(OURS.verify_keys(), "train-7", "n004", actions=("capture_stacks",))
    assert not agent.screen(evict().signed(OURS).encode(), NOW + 1).ack  # the trainer's business


def test_a_duplicate_after_a_restart_is_refused(tmp_path):
    raw = evict().signed(OURS).encode()
    assert receiver(tmp_path).screen(raw, NOW + 1).obey
    refused(receiver(tmp_path).screen(raw, NOW + 30), "duplicate")  # a new process, the same command memory file
    # a receiver with its own command memory file (another node) is not confused by this one's memory
    other = CommandScreen(OURS.verify_keys(), "train-7", memory=CommandMemory(memory_file(tmp_path, "launcher", "train-7")))
    assert other.screen(raw, NOW + 30).obey


def test_a_refused_command_is_not_remembered(tmp_path):
    """A forged copy arriving first must not make the genuine command look like a duplicate."""
    genuine = evict().signed(OURS)
    forged = replace(genuine, reason="x", signature=genuine.signature)  # same id, altered body
    screen = receiver(tmp_path)
    assert not screen.screen(forged.encode(), NOW + 1).obey
    assert screen.screen(genuine.encode(), NOW + 2).obey


def test_two_keys_are_trusted_during_a_rollover(tmp_path):
    new = SigningKey.generate()
    both = VerifyKeys({**OURS.verify_keys().keys, **new.verify_keys().keys})
    screen = receiver(tmp_path, node=None, keys=both)
    assert screen.screen(evict(id="old").signed(OURS).encode(), NOW + 1).obey
    assert screen.screen(evict(id="new").signed(new).encode(), NOW + 1).obey
    refused(screen.screen(evict(id="3rd").signed(THEIRS).encode(), NOW + 1), "unknown key")


def test_malformed_values_cannot_slip_past_the_lifetime_cap(tmp_path):
    body = orjson.loads(evict().signed(OURS).encode())
    for bad in ({"expires_at": "nan"}, {"issued_at": "-inf"}, {"job": ""}, {"nodes": 5}):
        result = receiver(tmp_path).screen(orjson.dumps({**body, **bad}), NOW + 1)
        assert not result.obey and result.reason.startswith("malformed"), (bad, result.reason)
