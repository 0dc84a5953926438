"""A user-space storage client's own word that an operation on its storage failed (issue 54).

A job reads its data through programs in user space as often as through the kernel: a FUSE file system
(gcsfuse, s3fs, Alluxio's, JuiceFS), an object store's client library (S3's, GCS's), a storage server
(MinIO). None of them prints a pool state or a block request's errno (parsing.storage_state); each says,
in its own words, that an OPERATION on storage failed: a FUSE operation ended in an error
(``*fuseops.ReadFileOp error: ...``, ``AlluxioJniFuseFileSystem - Failed to readdir /data``), an object
store's request failed (``ListObjects: Get https://...: stream error``), a read or write of a file system or
disk failed (``Failed to write to output filesystem``, ``Disk read failed.``), or a drive the server stores on
is not there (``drive not found: /data/disk1``, ``Error(disk not found) reading erasure shards``). A person
who has never seen the product reads these by what the line states, not by its name; rules name one
product's messages, this names the statements, so the next client's wording of them is read too.

Every reading is the storage's (docs/design.md §9 ``storage``), at most an alert
(parsing.state_grammar.grammar_event): the store may be another machine's, and the job's I/O is what to
watch, not a reason to evict the node the line was printed on. The guards are a person's: a hedge or a
question before the statement; an operation the line says succeeded, or that found nothing to do (``object
not found`` is an answer to a lookup, not a failure of the store); and parsing.state_grammar's own (the line's
level, its words that it retries or recovered, help text), which apply before this is consulted.

Pure functions over one line; the statements are the regexes below.
"""

from __future__ import annotations

import re

from faultlens.parsing.line import any_of

# fmt: off
# A FUSE file system named on the line: its library's package ("fuseops", "fuse:"), or a daemon's class whose
# name holds it ("AlluxioJniFuseFileSystem", "gcsfuse"); not "fused" (a fused optimizer or kernel).
_FUSE = re.compile(r"(?i)\b(?:gcs|s3|juice|rclone)?fuse(?:ops)?\b|(?-i:[a-z]Fuse[A-Z])|\bfuse:")
# What a file system is asked to do (the FUSE operations and the system calls behind them).
_FS_OP = r"readdir|read|write|open|getattr|setattr|lookup|create|unlink|rename|flush|fsync|release|mkdir|rmdir|statfs|truncate|mount"
# Each statement: the words a finding gives it.
_STATEMENTS: tuple[tuple[str, str], ...] = (
    # a FUSE operation ended in an error: the library's operation type ("*fuseops.ReadFileOp error"), or a FUSE
    # daemon's "failed to <operation>" (_FUSE must be on the line: _needs_fuse)
    ("a FUSE operation failed", r"\bfuseops\.\w+Op error\b|\bfailed to (?P<fuse_op>" + _FS_OP + r")\b"),
    # an object store's request failed: the API call by its name, then an error in its clause
    ("an object store request failed",
     r"\b(?:List|Get|Put|Head|Delete|Copy)Objects?(?:V2)?\b(?=[^;|]{0,200}?\b(?:error|failed|timed? ?out|INTERNAL_ERROR|5\d\d)\b)"
     r"|\b(?:Create|Complete|Abort)MultipartUpload\b(?=[^;|]{0,200}?\b(?:error|failed|timed? ?out)\b)"),
    # a read or write of a file system, disk or volume failed
    ("a read or write of storage failed",
     r"\b(?:disk|drive|volume|file ?system|bucket|object store) (?:read|write|i/o) (?:failed|error)\b"
     r"|\bfailed to (?:read|write)(?: to| from)? (?:the )?(?:\w+ )?(?:file ?system|disk|drive|volume|bucket|object store)\b"),
    # a drive or disk a storage server keeps its data on is not there
    ("its drive is not there", r"\b(?:drive|disk)s? (?:not found|offline)\b"),
)
_STATEMENT = tuple((said, re.compile(r, re.IGNORECASE)) for said, r in _STATEMENTS)
# The guards: a hedge or a question before the statement in its clause; the operation's own word that it worked.
_HEDGE = re.compile(r"(?i)\b(?:if|whether|unless|when(?:ever)?|may|might|could|would|should|in case|e\.g\.|such as)\b|\?")
_CLAUSE = re.compile(r"[.;!?]\s|\s-\s|\|")
_WORKED = re.compile(r"(?i)\b(?:succeeded|successful(?:ly)?|completed|recovered)\b")

# Literals one of which any statement needs (lowered), for the parsers' pre-filters: narrow, as each costs the scan
# of every line ("fuse" is in "fused", which a trainer prints; "object" would be in a Python error's every other line).
QUICK = ("fuse", "objects", "object ", "objectv2", "objectsv2", "multipartupload", "read failed", "write failed",
         "read error", "write error", "i/o failed", "i/o error", "failed to read", "failed to write", "not found", "offline")
_QUICK = any_of(QUICK)
# fmt: on


def quick(lowered: str) -> bool:
    """Whether the lowered line holds a literal some statement needs (most lines do not)."""
    return _QUICK.search(lowered) is not None


def read_storage_client(message: str) -> tuple[str, str] | None:
    """(the words that failed, the statement) when the line is a storage client saying an operation on its
    storage failed, else None."""
    if _WORKED.search(message):
        return None
    for statement, regex in _STATEMENT:
        for m in regex.finditer(message):
            if "fuse_op" in regex.groupindex and m.group("fuse_op") and not _FUSE.search(message):
                continue  # "failed to read" is a FUSE operation's only where the line is a FUSE file system's
            if not _hedged(message, m.start()):
                return " ".join(m.group(0).split())[:60], statement
    return None


def _hedged(message: str, at: int) -> bool:
    start = max((c.end() for c in _CLAUSE.finditer(message, 0, at)), default=0)
    return _HEDGE.search(message, start, at) is not None
