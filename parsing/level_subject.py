"""A line whose own format states error or fatal, read by the subject it names (issue 54).

Most programs print their level in a slot of their line format, before the message: glog's and klog's
``E0115 05:20:19.945191 309 rdma_transport.cpp:662]`` (``F`` fatal), absl's ``E external/xla/...cc:96]``,
capnslog's ``E | op-mon:``, logfmt's ``level=error``, a logger's ``[ERROR]``, ``<FATAL>:``, ``- ERROR -`` or
``UCX  ERROR``, a CI runner's ``##[error]``. That slot is the program's own verdict, not a word of its message:
``E0110 ... ibv_get_device_list failed`` is an error whatever its words. What failed is the SUBJECT the message
names: a person who has never seen the program reads ``No available RNIC`` at error as the RDMA NIC's fault,
``NFS drive is not mounted`` as storage's, ``agent crashed`` as a node's. The subject gives the class
(docs/design.md §9); the state grammar's objects are read first (parsing.state_grammar passes them in), then
the nouns below, which name a device, a resource or a peer by its kind (not a product's name).

A line at error that names no subject stays unrecognised (counted, mined, shown): its level says something
failed, not what. Not read: a level under error (``W0829``, ``level=warning``, ``[WARN]``); a line that says it
retries or recovered (parsing.state_grammar's guards, read first); a hedge or a question; a subject named as a
setting (``--volume``, ``drive=``, an option or a flag). A reading is an alert at most, as every reading of a
line no rule took (parsing.fallback's ceiling).

Pure functions over one line; the frames and the nouns are the regexes below.
"""

from __future__ import annotations

import re
from typing import Callable

# fmt: off
# The level slot, at the head of the message (after its clock, which the parsers take off first), or a logger's
# level token within its first 80 characters, upper case as loggers print it; lower case only in brackets or as a key.
_FRAME = re.compile(
    r"^\[?(?P<glog>[EF])\d{4} \d\d:\d\d:\d\d(?:\.\d+)?\s+\d+\s+[\w./-]+:\d+\]"  # glog / klog: letter, date, time, thread, file:line]
    r"|^(?P<absl>[EF]) [\w./-]+\.\w+:\d+\] "                                    # absl's short form after its clock
    r"|^(?P<capns>[EF]) \| [\w.-]+: "                                           # capnslog: "E | op-mon: "
    r"|^.{0,80}?(?:(?<![\w./-])(?P<word>ERROR|FATAL|CRITICAL|PANIC)(?=\s*[:\]|>)-]|\s)"
    r"|[\[<](?P<bracket>(?i:error|fatal|critical))[\]>]"
    r"|\blevel=\"?(?P<key>(?i:error|fatal|critical|panic))\b"
    r"|##\[(?P<ci>error)\])"
)
_LETTER = {"E": "error", "F": "fatal"}
# Subjects the state grammar's objects do not name, by the class a fault of theirs is (docs/design.md §9): an RDMA
# NIC and the verbs calls that reach it; a drive, a mount, an inode, an OSD, NFS, a storage claim; a node's agent (not
# a replica or a bucket: XLA's compute replica and a gradient bucket are no storage). The first one named after the
# frame wins, with the grammar's objects, whichever comes first.
_SUBJECTS = {
    "nic": r"r?nics?|ibv_\w+|verbs",
    "storage": r"drives?|mounts?|mountpoints?|mounted|inodes?|osds?|nfs|(?:persistent ?volume ?)?claims?|pvcs?",
    "node_silent": r"agents?|notready",
    # The job's own things: named first, they are what failed, and the line is the job's (no device class).
    "": r"containers?|images?|commands?|scripts?|process(?:es)?|tasks?|programs?|kernels?|modules?",
}
_SUBJECT = re.compile("|".join(f"(?P<{c or 'own'}>\\b(?:{r})\\b)" for c, r in _SUBJECTS.items()), re.IGNORECASE)
# The grammar's objects a level cannot lend a state to: a port or a link of no kind is a socket's or a bus's as
# often as a network's ("failed to bind port 8080"); a node, a kubelet or a daemon is where the line was written as
# often as what failed ("Error updating node stats"): the grammar's own states read them.
_TOO_GENERAL = re.compile(r"(?i)ports?|links?|slaves?|carrier|(?<!numa )nodes?|kubelet|pleg|raylet|daemons?")
# A subject inside a path, an address or an image's name ("docker://.../mlperf-nvidia:tag") is a name, not a device.
_IN_A_NAME = re.compile(r"[/:@\[][\w.-]*$")
# A component's tag in brackets (DCGM's "[[NvSwitch]]"): the logger names its module there, not what failed.
_A_TAG = re.compile(r"\]")
# What ran out or overheated is not the subject: memory the process could not get (a locked-memory limit, an
# allocation), a temperature (docs/design.md §9 gpu_thermal), a display engine or mode setting (a desktop's, not the job's GPU).
_NOT_THE_SUBJECT = re.compile(r"(?i)allocate memory|out of memory|resource_exhausted|temperature|thermal|display|modeset")
# A hedge or a question; a subject named as a setting (a flag, a key, an option's or a parameter's name).
_HEDGED = re.compile(r"\b(?:if|whether|unless|may|might|could be|would)\b|\?", re.IGNORECASE)
_SETTING = re.compile(r"(?i)\b(?:option|setting|flag|parameter|argument|config\w*|usage|deprecated)\b")
# fmt: on
# Literals one of which any frame but a letter holds (lowered): the parsers' pre-filters carry them already, as alarm
# words (parsing.alarm), so they add no literal to the scan every line pays; the rarer level names (SEVERE, EMERG, a
# bare "err" or "crit") are left out for that reason.
QUICK = ("error", "fatal", "critical", "panic")

# The state grammar's objects in a text, as (class, word, where), and whether a word at a place can be the clause's
# subject (not a complement: "due to agent failure", "Not attached to NvSwitches"): parsing.state_grammar's own.
Objects = Callable[[str], list[tuple[str, str, int]]]
Placed = Callable[[str, int], bool]


def stated_level(message: str) -> tuple[str, int] | None:
    """(level, where the frame ends) when the line's own format states error or fatal, else None."""
    m = _FRAME.search(message)
    if m is None:
        return None
    kind = m.lastgroup or ""
    word = m.group(kind)
    return (_LETTER.get(word) or word.lower(), m.end())


def read_level_subject(message: str, objects: Objects, placed: Placed) -> tuple[str, str, str] | None:
    """(fault, subject, level) of a line at error or fatal by the first subject it names after its frame, or None."""
    stated = stated_level(message)
    if stated is None:
        return None
    level, end = stated
    rest = message[end:]
    if _HEDGED.search(rest) or _SETTING.search(rest) or _NOT_THE_SUBJECT.search(message):
        return None
    found = [(c, w, at) for c, w, at in objects(rest) if c != "generic" and not _TOO_GENERAL.fullmatch(w)]
    found += [(m.lastgroup or "", m.group(0), m.start()) for m in _SUBJECT.finditer(rest) if not _named_as_setting(rest, m)]
    found = [
        f
        for f in found
        if placed(rest, f[2]) and not _IN_A_NAME.search(rest, 0, f[2]) and not _A_TAG.match(rest, f[2] + len(f[1]))
    ]
    if not found:
        return None
    fault, word, _ = min(found, key=lambda f: f[2])
    return (fault, word, level) if fault != "own" else None


def _named_as_setting(text: str, m: re.Match[str]) -> bool:
    """``--volume``, ``drive=...``: the noun is a setting's name, not what failed."""
    return text[max(0, m.start() - 2) : m.start()].endswith("-") or text[m.end() : m.end() + 1] == "="


def quick(lowered: str) -> bool:
    """Whether the lowered line holds a literal some frame needs, or opens with a glog-style letter frame (substring
    tests: most lines the parsers ask this of hold none, and four scans cost less than one regex's alternation)."""
    return "error" in lowered or "fatal" in lowered or "critical" in lowered or "panic" in lowered or letter_frame(lowered)


def letter_frame(lowered: str) -> bool:
    """Whether the lowered line opens with an error or fatal letter frame (glog's ``e0115 05:20:19``, capnslog's
    ``e | ``, absl's ``e file.cc:96] ``): such a line may hold no word of trouble, so the pre-filters ask this too."""
    return lowered[:1] in LETTER_FIRST and _LETTER_HEAD.match(lowered) is not None


# The first characters such a frame opens with: a pre-filter settles most lines by one look at their first character
# (the trainer parser tests it before calling letter_frame, on every line its literals did not pass).
LETTER_FIRST = frozenset("ef")


_LETTER_HEAD = re.compile(r"[ef](?:\d{4} \d\d:| \| | [\w./-]+\.\w+:\d+\] )")
