"""parsing.severity.says_retrying: a program that says it will try again, and one that says it will not."""

from __future__ import annotations

import pytest

from faultlens.parsing.severity import says_retrying


@pytest.mark.parametrize("line", [
    "wandb: Network error (ConnectionError), entering retry loop. encountered retryable exception",
    "command failed, retrying after 5 seconds",
    "upload failed; will retry in 30s",
])
def test_a_line_that_will_try_again_says_so(line):
    assert says_retrying(line)


@pytest.mark.parametrize("line", [
    # nfs-ganesha (tests/fixtures/log_corpus/fresh48/storage_nfs.jsonl): the error is final
    "nfs4_Errno_verbose :NFS4 :CRIT :Error I/O error with error code 5 in file_To_Fattr converted to NFS4ERR_IO "
    "but was set non-retryable",
    "RPC failed with a non-retryable status",
])
def test_a_line_that_will_not_try_again_is_no_retry(line):
    assert not says_retrying(line)
