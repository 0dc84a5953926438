"""A user-space storage client's own word that an operation on its storage failed (parsing.storage_client),
read by the state grammar for a line no rule took: each form on a line written here, each beside the healthy
look-alike its guard is for."""

from __future__ import annotations

import pytest

from faultlens.parsing.registry import parser_for
from faultlens.parsing.state_grammar import read_state


def _read(line: str, source: str = "nccl") -> tuple[str, str, str | None] | None:
    got = read_state(line, line, source)
    return None if got is None else (got.fault, got.state, got.rule if got.quiet is None else f"{got.rule} (recorded)")


@pytest.mark.parametrize(
    ("line", "state", "look_alike"),
    [
        # a FUSE library's operation ended in an error; not the same operation's timing
        (
            "fuse: 2024/03/02 10:11:12.000001 *fuseops.WriteFileOp error: bucket.Write: connection reset by peer",
            "a FUSE operation failed",
            "fuse: 2024/03/02 10:11:12.000001 *fuseops.WriteFileOp took 41 ms",
        ),
        # a FUSE daemon's "failed to <operation>"; not the job's own "failed to read" of a file, on a line of no FUSE
        (
            "2024-03-02 10:11:12,345 ERROR CacheFuseFileSystem - Failed to getattr /ckpt/step_900",
            "a FUSE operation failed",
            "trainer: Failed to read /ckpt/step_900/tokenizer.json",
        ),
        # an object store's request by its API name, then its error; not the request's own log of success
        (
            "[ckpt] PutObject s3://ckpt/step_900/shard-3 failed: status 503",
            "an object store request failed",
            "[ckpt] PutObject s3://ckpt/step_900/shard-3 completed in 412 ms, status 200",
        ),
        # a read or write of a bucket failed; not the same write finished
        (
            "ckptd: bucket write failed for gs://ckpt/step_900",
            "a read or write of storage failed",
            "ckptd: bucket write finished for gs://ckpt/step_900",
        ),
        # a drive the store keeps its data on is not there; not a hedge about it
        (
            "objstore-server: drive offline: /mnt/disk3",
            "its drive is not there",
            "objstore-server: heal the set if a drive offline comes back",
        ),
    ],
)
def test_each_statement_is_read_and_its_look_alike_is_not(line: str, state: str, look_alike: str) -> None:
    assert _read(line) == ("storage", state, "storage_client")
    assert _read(look_alike) is None


def test_a_fused_optimizer_is_no_fuse_file_system() -> None:
    # "fused" is not "fuse": a trainer's fused kernel that failed to read its config is the job's, not a file system's
    assert _read("apex: fused_adam: Failed to read kernel cache /tmp/fused_adam.so") is None


def test_a_request_that_will_be_retried_is_not_read() -> None:
    assert _read("[ckpt] PutObject s3://ckpt/step_900/shard-3 failed: status 503, retrying in 2 s") is None


def test_a_line_is_an_alert_at_most() -> None:
    parser = parser_for("nccl")
    [event] = parser.feed("fuse: *fuseops.ReadFileOp error: fh.reader.ReadAt: unexpected EOF") + parser.flush()
    assert (event.kind, event.data["fault"], event.data["action"], event.data["rule"]) == (
        "suspect_line",
        "storage",
        "alert",
        "storage_client",
    )
