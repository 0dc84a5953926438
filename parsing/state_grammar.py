"""What happened to which device, read as a person reads a line no rule knows (issue 54).

A person who has never seen a program's format still reads ``No IB devices found``, ``bond1: now running
without any active interface!`` or ``Module nvidia-uvm not found.`` as a fault, by two things: WHAT the line
is about (a GPU or its driver, an InfiniBand / RDMA / Ethernet device, port, link or bond, NVLink or the
fabric manager, a disk, volume or filesystem, a node) and the STATE it says that thing is in (absent, down,
failed, lost, dead, not ready). Rules name one program's words; this grammar names the objects and the
states, so a program's next wording of the same statement is read too. The object gives the class
(docs/design.md §9), the state says it is bad.

The guards are those a person applies before believing such a line: a negation or a count of none before
the state (``0 ports down``, ``link is not down``), the line's own word that all is well (``successfully``,
``recovered``) or that it will try again, a question, a hedge or a help text (``if the port is down``,
``check whether ...``), and an inventory line (lspci's ``03:00.0 Ethernet controller: ...``). A line the
grammar reads is a suspicion, never more than an alert (parsing.fallback; docs/design.md §1). A line its
objects and states do not read may still state a storage system's health in that system's own vocabulary (a
pool's, array's or placement group's state, a count of things in a bad state, an error counter, a block
request's errno): parsing.storage_state reads it, behind the same guards and under the same ceiling, and a
user-space storage client's word that an operation on its storage failed, parsing.storage_client. A network link's
state printed as a field (``LinkState:....Down``, ``phys state: 3: Disabled``) is read by parsing.state_field. After a
program's own failure frame (parsing.own_failure), a line that states in any vendor's words that an accelerator
hung, failed a reset, stopped answering or could not be brought up is read by parsing.accelerator_state.

Pure functions over one line; the tables are the regexes below.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from faultlens.parsing import accelerator_state, level_subject, own_failure, state_field, storage_client, storage_state
from faultlens.parsing.alarm import QUICK as ALARM_QUICK
from faultlens.parsing.fallback import CEILING
from faultlens.parsing.line import any_of, common
from faultlens.parsing.severity import NOTICE, level_name, reassured, says_retrying, severity_of, trainer_level
from faultlens.parsing.subsystems import attribute

# fmt: off
# The objects, by the class a fault of theirs is (docs/design.md §9). First match of a line's clause is its
# subject. A GPU's driver, its modules, device files and container hook are the GPU's: without them the
# job has no GPU (gpu_lost).
_OBJECTS = {
    "nvlink": r"nvlinks?|nvswitch(?:es)?|nv-?fabric-?manager|fabric ?manager",
    "gpu_lost": r"gpus?|graphics (?:adapters?|cards?|devices?)|nvidia(?:[-_.][\w.-]*\w)?|nvrm|gsp|cuda[- ](?:capable )?devices?"
                r"|gres/gpu|/dev/nvidia(?:\d+|ctl|-uvm)|nvml",
    # A bare link is a network link; a SATA or PCIe link is its device's (generic, below).
    "nic": r"ib|infiniband|rdma|roce|hcas?|ipoib|mlx\d_\d+|ibp\w+|ib\d+|bond\d+|eth\d+|en[ops]\d\w*|nics?|efa"
           r"|(?<!sata )(?<!pcie )(?<!pci )links?|ports?|(?:network|ethernet|ib|rdma) interfaces?|slaves?|carrier",
    "storage": r"disks?|(?<![/=])nvme\d*(?:n\d+(?:p\d+)?)?|volumes?|file ?systems?|mount ?points?|partitions?(?: table)?|superblock"
               r"|(?<![/=])(?-i:sd[a-z]\d*)|luns?|raid|md\d+|block devices?",
    "node_silent": r"(?<!numa )nodes?|kubelet|pleg|raylet|daemons?",
}
# Words that name a device but not its kind: its class is the specific object the line names elsewhere,
# else the class of the driver whose tag opens the line (parsing.subsystems: "NVRM: ... No firmware image
# found" is the GPU's, "qla2xxx [...]: Cable is unplugged" a storage HBA's).
_GENERIC = r"devices?|adapters?|controllers?|cards?|firmware(?: images?)?|hardware|cables?|hbas?|interfaces?|(?:sata|pcie|pci) links?"
# What a device holds rather than the device: a filesystem or partition table a mount or a probe cannot
# find is the content of a disk (every probe of an unformatted one says so), not the disk absent.
_CONTENT = re.compile(r"(?i)file ?systems?|partitions?(?: table)?|superblock")
_ANY_OBJECT = "|".join([*_OBJECTS.values(), _GENERIC])
_OBJECT = re.compile("|".join(f"(?P<{c}>\\b(?:{r})\\b)" for c, r in _OBJECTS.items()) + rf"|(?P<generic>\b(?:{_GENERIC})\b)",
                     re.IGNORECASE)

# States a thing is said to be in, after its name, and the classes each state is a fault of. "not ready"
# is a node's (a link "is not ready" while the interface comes up is routine); "down" is a link's, a
# port's, a node's, not a disk's spun down.
_STATES: dict[str, tuple[str, frozenset[str]]] = {
    "absent": (r"not (?:be )?(?:found|detected|present|available|initiali[sz]ed|loaded|recogni[sz]ed|accessible)\b|missing(?=\s*(?:[.!,;:)]|$))"
               r"|no such (?:file or directory|device)|does(?: not|n.t) (?:seem to |appear to )?(?:be )?(?:present|exist)"
               r"|(?:count )?(?:reported )?(?:lower|fewer|less) than (?:configured|expected)|(?:detected )?(?:capacity|size) change from \d+ to 0\b",
               frozenset({"gpu_lost", "nic", "storage", "nvlink"})),
    "down": (r"(?:(?:is|are|was|were|went|goes|now|state|status|definitely)[\s:=]+)*[(<\[]?(?:down|inactive|disconnected)\b(?!/)"
             r"|no carrier\b", frozenset({"nic", "nvlink", "node_silent"})),
    # "failed to <verb>" is an action that failed, whose object follows: "GPU:0: Failed to query display engine".
    "failed": (r"(?:init(?:ialization)? |read |write |update |probe |start |status:? )?(?:failed|failure)\b(?! to\b| \w+ing\b)",
               frozenset({"gpu_lost", "nic", "storage", "nvlink"})),
    "lost": (r"lost\b", frozenset({"nic", "nvlink", "node_silent"})),
    "offline": (r"offline(?:d)?\b", frozenset({"gpu_lost", "nic", "storage", "nvlink", "node_silent"})),
    "dead": (r"(?:marked (?:as )?)?(?:dead|unreachable|not responding|unresponsive|not healthy|unhealthy|not ready)\b"
             r"|(?:has )?died\b", frozenset({"node_silent"})),
    "mismatched": (r"(?:version |api )?mismatch\b|(?:do|does)(?: not|n.t) match\b", frozenset({"gpu_lost", "nvlink"})),
    "hung": (r"(?:is )?hung\b", frozenset({"gpu_lost"})),
}
_STATE = "|".join(f"(?P<{k}>{r})" for k, (r, _) in _STATES.items())
# A class a state changes: a GPU that hangs needs a reset, not a new GPU.
_STATE_CLASS = {("hung", "gpu_lost"): "gpu_reset_required"}

# The object, up to two names (a number or address, another object's name) and then the state: "mlx5_3 port 1
# ==> ibp84s0 (Down)", "Link 3: <inactive>", "Module nvidia-uvm not found", "Disk read failed" (the state's own
# words). Not a word between ("nvidia: module verification failed", "RDMA functionality is not available"):
# then the state is another thing's. Not across a path's slash ("nvidia/570.144/gsp.bin failed").
_NAMED = rf"(?:[\w.:*-]*\d[\w.:*-]*|{_ANY_OBJECT})"
_OBJECT_THEN_STATE = re.compile(
    rf"\b(?:{_ANY_OBJECT})\b(?:[\s:=,(<\[\]'\">-]+{_NAMED}){{0,2}}?[\s:=,(<\[\]'\"!-]+"
    rf"(?:(?:is|are|was|were|has|have|be\w*|now|currently|still)\s+){{0,3}}(?:{_STATE})", re.IGNORECASE)
# An object after a preposition or an action's verb is not the clause's subject: "PM: Resume from disk failed" is a
# resume's failure, "Mounting other filesystems: failed" a boot script's step (its own line says which).
_COMPLEMENT = re.compile(r"(?i)\b(?:from|to|on|in|into|onto|via|for|with|of|\w{3,}ing(?:\s+\w+)?)\s+$")
# A link a PCI Express, SATA, USB or Thunderbolt line names is that bus's, not a network's.
_BUS_LINE = re.compile(r"(?i)pci|sata|\bata\d|usb|thunderbolt")
# The state before the object: none found ("No IB devices found", "None of the NVIDIA graphics adapters were
# initialized"), a search or a load that could not be done ("Unable to find the Infiniband/RoCE device",
# "Unable to load the kernel module 'nvidia.ko'"), a program running without one, a peer lost.
_STATE_THEN_OBJECT = re.compile(
    # not a search for a kind ("No matching GPU found", "no compatible IB ports found for flags 0x20")
    rf"\b(?P<none>no|none of the)\s+(?!(?:matching|compatible|suitable|supported|usable|other|more|additional|new)\b)"
    rf"(?:[\w/-]+\s+){{0,2}}?(?:{_ANY_OBJECT})\b(?:[\s/-]+[\w/-]+){{0,2}}?\s+"
    r"(?:(?:were|was|is|are|could be) )?(?:found|detected|present|available|initiali[sz]ed|loaded)\b"
    rf"|\b(?P<unable>unable to|could not|couldn.t|cannot|can.t|failed to|fails to|did not|didn.t|not able to)\s+"
    r"(?:find|detect|locate|load|probe|open|reach|contact|stat|access|mount|see|bring up)\s+"
    rf"(?:(?:the|a|an|any|kernel|module)\s+|['\"])*(?:[\w-]+\s+)?['\"]?(?:{_ANY_OBJECT})\b"
    rf"|\b(?P<without>without) (?:any |an? )?(?:active|working|usable) (?:{_ANY_OBJECT})\b"
    rf"|\b(?P<cut>lost) (?:connection|communication|contact) (?:with|to) (?:[\w-]+ ){{0,3}}?(?:{_ANY_OBJECT})\b"
    # a monitor's verdict on a node, however long the node's name: "The node with id ... has been marked dead"
    rf"|\b(?:{_OBJECTS['node_silent']})\b[^.;!?]{{0,160}}?\bmarked (?:as )?(?P<verdict>dead|down|lost|unreachable|failed)\b",
    re.IGNORECASE)
_LEAD_STATE = {"none": "absent", "unable": "absent", "without": "down", "cut": "lost", "verdict": "dead"}
# States one word holds: a cluster manager's condition names, and the shell's "Killed" after a progress bar
# (bash prints it when SIGKILL ends the job; the OOM killer's signal: docs/design.md §9's host_oom).
_COMPOUND = re.compile(r"\b(?P<node_silent>(?:Node|Kubelet)NotReady)\b|\b(?P<storage>DiskPressure)\b|\b(?P<host_oom>MemoryPressure)\b"
                       r"|(?:^|[\]\s|])(?P<killed>Killed)\s*$")
# A status table's row of the condition that holds not ("MemoryPressure   False   ...   KubeletHasSufficientMemory").
_CONDITION_FALSE = re.compile(r"\s+(?:False|Unknown)\b")
_COMPOUND_READING = {"node_silent": ("node", "not ready"), "storage": ("disk", "under pressure"),
                     "host_oom": ("memory", "under pressure"), "killed": ("the process", "killed")}

# The guards. A negation or a count of none just before the state ("is not down", "0 devices down",
# "no longer lost"); a question or a hedge in the clause ("if the link is down", "check whether ...",
# "may be missing"), or advice on what to set instead ("... is not available, please use one of ..."); help and
# usage text; an inventory line (lspci's bus address and device class).
_NEGATED = re.compile(r"(?:\bnot|\bnever|n't|\bno longer|\b0|\bzero|\bno)\s+(?:\w+\s+)?$", re.IGNORECASE)
_HEDGED = re.compile(r"\b(?:if|whether|unless|may|might|could be|would|should|in case|make sure|ensure|verify|check(?:ing)?|e\.g\.|such as|"
                     r"when(?:ever)?|how to|to detect|already|ignored?|ignoring|harmless|benign|please (?:use|set|specify|choose|select))\b|\?",
                     re.IGNORECASE)
_HELP = re.compile(r"^\s*(?:usage|help|hint|note|example|tip)\b|^\s*(?:-{1,2}\w|#)", re.IGNORECASE)
_INVENTORY = re.compile(r"^\s*(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] [\w ]+(?:controller|bridge|device): ", re.IGNORECASE)
# A clause ends at a sentence's stop; the guards look no further back than its start.
_CLAUSE = re.compile(r"[.;!?]\s|\s-\s|\|")
# Literals one of which any reading needs (the parsers' pre-filters carry them, so a line of none is settled by one scan).
QUICK = ("not ", "n't", "missing", "no such", "lower than", "fewer than", "less than", "capacity change", "down", "inactive",
         "disconnected", "unplugged", "no carrier", "fail", "lost", "dead", "unreachable", "unresponsive", "unhealthy",
         "died", "mismatch", "hung", "no ", "none of", "unable to", "could not", "couldn", "cannot", "can't",
         "without", "notready", "pressure", "killed")
_QUICK = any_of(QUICK)
# The same, narrower where a literal is common ("no ", "not "): what the parsers' pre-filters add for the grammar.
_OWN_PREFILTER = tuple(q for q in QUICK if q not in ("no ", "not ", "n't")) + (
    "found", "not detect", "not present", "not available", "not initiali", "not loaded", "not recogni", "not accessible",
    "not responding", "not healthy", "not ready", "seem to", "appear to", "not exist", "n't exist", "match")
# With the storage vocabulary's literals, but those holding a literal here or an alarm word (both parsers' pre-filters
# carry parsing.alarm.QUICK): a literal inside another passes no line more and costs the scan (a third of its time).
PREFILTER = _OWN_PREFILTER + tuple(q for q in (*state_field.QUICK, *storage_state.QUICK, *storage_client.QUICK, *own_failure.QUICK, *accelerator_state.QUICK, *level_subject.QUICK) if not any(w in q for w in (*_OWN_PREFILTER, *ALARM_QUICK)))


# A level word the line's own format prints, upper case, where the parsers' readers of levels may not look
# (past a long host and pid prefix: "0220-...-83:9106:9106 [2] NCCL INFO NET/IB : No device found.", a UCX
# line's "UCX  DEBUG"), or NetworkManager's "<info>".
_LEVEL_WORD = re.compile(r"(?<![\w.])(?:INFO|DEBUG|TRACE|NOTICE)(?=\s|:|\]|\|)|<(?:info|debug|notice)>")

# fmt: on


@dataclass(frozen=True, slots=True)
class Reading:
    """``fault``: the class the object gives; ``object`` and ``state``: the words read, for the event's finding;
    ``quiet``: why the line's own level makes it a record, not an alert (None: it does not); ``rule``: the
    event's rule, ``storage_state`` where the storage vocabulary read the line (parsing.storage_state), ``storage_client``,
    ``own_failure``, ``accelerator_state`` and ``state_field`` where those modules did."""

    fault: str
    object: str
    state: str
    quiet: str | None = None
    rule: str = "grammar"

    @property
    def finding(self) -> str:
        if self.rule == "own_failure":
            return f"{self.object!r} states its own failure ({self.state}); no rule, subsystem or model took the line"
        if self.rule == "storage_client":
            return f"a storage client says {self.state} ({self.object!r}); no rule, subsystem or model took the line"
        if self.rule == "state_field":
            return f"a link's state field {self.object!r} reads {self.state}; no rule, subsystem or model took the line"
        if self.rule == "level_subject":
            return f"the line's own level says it failed; its subject {self.object!r} gives the class; no rule, subsystem or model took the line"
        if self.rule == "accelerator_state":
            return f"an accelerator's own words {self.object!r} say it {self.state}; no rule, subsystem or model took the line"
        return f"the state grammar reads {self.object!r} as {self.state}; no rule, subsystem or model took the line"


def read_state(message: str, raw: str | None = None, source: str = "kernel") -> Reading | None:
    """The fault a line states of a device, node or resource by the grammar, or None (no object, no bad
    state, or a guard). ``raw`` is the line as read (its syslog tag names the driver when the message's
    own tag does not); ``source`` the stream (kernel / nccl), whose format states the line's level."""
    low = message.lower()
    grammar = _QUICK.search(low) is not None
    own = source != "kernel" and own_failure.quick(low)  # the kernel's log holds no program's frames
    device = accelerator_state.quick(low)
    client = storage_client.quick(low)
    field = grammar or state_field.quick(low)
    if not (field or own or device or client or storage_state.quick(low) or level_subject.quick(low)) or _HELP.match(message) or _INVENTORY.match(message):
        return None
    if reassured(message) or says_retrying(message):
        return None
    reading = _read(message, raw) if grammar else None
    if reading is None:
        printed = state_field.read_state_field(message) if field else None
        if printed is not None and not _guarded(message, printed[3], printed[3], counted=False):
            # a link's state printed as a field whose value says it is down (parsing.state_field)
            reading = Reading(*printed[:3], rule="state_field")
        # what a storage system says of its own health, in the vocabulary storage systems share
        elif (said := storage_state.read_storage(message, raw)) is not None:
            reading = Reading("storage", *said, rule="storage_state")
        elif (client or grammar) and (failed := storage_client.read_storage_client(message)) is not None:
            # a user-space storage client's own word that an operation on its storage failed (parsing.storage_client)
            reading = Reading("storage", *failed, rule="storage_client")
        elif own and (told := own_failure.read_own_failure(message)) is not None:
            # a program's own word that it failed, in its frame: the job's code (parsing.own_failure)
            reading = Reading("user_code", *told, rule="own_failure")
        elif (device or grammar) and (stated := accelerator_state.read_accelerator(message, raw)) is not None:
            # an accelerator's own word that it hung, was reset or could not be brought up (parsing.accelerator_state)
            reading = Reading(*stated, rule="accelerator_state")
        elif level_subject.quick(low) and (subject := level_subject.read_level_subject(message, _placed_objects, _subject_placed)) is not None:
            # the line's own format states error or fatal; what failed is the subject it names (parsing.level_subject)
            reading = Reading(subject[0], subject[1], f"at its own {subject[2]} level", rule="level_subject")
        else:
            return None
    quiet = reading.quiet or _own_level(message, raw, source)
    return Reading(reading.fault, reading.object, reading.state, quiet, reading.rule) if quiet else reading


def _own_level(message: str, raw: str | None, source: str) -> str | None:
    """Why the line's own level is notice or below (the parsers record such a line, never act on it), or None."""
    if source == "kernel":
        level = severity_of(message, raw).priority
    else:
        level = trainer_level(message)
    if level is not None and level >= NOTICE:
        return f"the line's own level is {level_name(level)}"
    if _LEVEL_WORD.search(message, 0, 160):
        return "the line's own level word is below a warning"
    return None


def _read(message: str, raw: str | None) -> Reading | None:
    m = _COMPOUND.search(message)
    if m is not None:
        kind = m.lastgroup or ""
        if _CONDITION_FALSE.match(message, m.end()):
            return None
        obj, state = _COMPOUND_READING[kind]
        return Reading("host_oom" if kind == "killed" else kind, obj, state)
    for m in _STATE_THEN_OBJECT.finditer(message):
        if _guarded(message, m.start(), m.start()):
            continue
        state = _LEAD_STATE[next(k for k in _LEAD_STATE if m.group(k))]
        reading = _resolve(message, m.group(0), state, raw)
        if reading is not None:
            return reading
    for m in _OBJECT_THEN_STATE.finditer(message):
        state = next(k for k in _STATES if m.group(k))
        if _COMPLEMENT.search(message, max(0, m.start() - 24), m.start()) or _guarded(message, m.start(state), m.start()):
            continue
        reading = _resolve(message, m.group(0), state, raw)
        if reading is not None:
            return reading
    return None


def _guarded(message: str, state_at: int, clause_from: int, counted: bool = True) -> bool:
    """A negation or count of none just before the state, or a hedge or question in its clause. ``counted``: False
    for a field's value, which follows its key, never a count ("lmc 0 state DOWN": the 0 is another field's)."""
    start = max((c.end() for c in _CLAUSE.finditer(message, 0, clause_from)), default=0)
    before = message[start:state_at]
    if counted and _NEGATED.search(before) and not message[state_at:].lower().startswith(("not ", "no ")):
        return True
    end = _CLAUSE.search(message, state_at)
    return _HEDGED.search(message, start, end.start() if end else len(message)) is not None


def _objects(message: str, text: str, state: str) -> list[tuple[str, str]]:
    """(class, word) of each object ``text`` names ("generic" for a device of no kind: a bus's link is one)."""
    bus = _BUS_LINE.search(message) is not None
    out = []
    for o in _OBJECT.finditer(text):
        word, kind = o.group(0), o.lastgroup or ""
        if state == "absent" and _CONTENT.fullmatch(word):
            continue
        out.append(("generic" if bus and word.lower().startswith("link") else kind, word))
    return out


def _resolve(message: str, span: str, state: str, raw: str | None) -> Reading | None:
    """The class of the span's first specific object (else a generic one's, by the line's other objects or its
    driver's tag), when ``state`` is a fault of that class."""
    found = _objects(message, span, state)
    specific = [(c, w) for c, w in found if c != "generic"]
    if not found:
        return None
    fault: str | None
    fault, word = specific[0] if specific else (_class_elsewhere(message, raw, state), found[0][1])
    if fault is None or fault not in _STATES[state][1]:
        return None
    return Reading(_STATE_CLASS.get((state, fault), fault), word, _STATE_WORDS.get(state, state))


def _placed_objects(text: str) -> list[tuple[str, str, int]]:
    """(class, word, where) of each object ``text`` names (parsing.level_subject's subjects)."""
    return [(o.lastgroup or "", o.group(0), o.start()) for o in _OBJECT.finditer(text)]


def _subject_placed(text: str, at: int) -> bool:
    """Whether a word at ``at`` can be its clause's subject: not after a preposition or an action's verb."""
    return _COMPLEMENT.search(text, max(0, at - 24), at) is None


def _class_elsewhere(message: str, raw: str | None, state: str) -> str | None:
    """A generic device's class: a specific object the line names elsewhere, else its driver's tag's class."""
    for kind, _ in _objects(message, message, state):
        if kind not in ("generic", "node_silent"):
            return kind
    att = attribute(message) or (attribute(raw) if raw and raw != message else None)
    if att is not None and att.fault in ("gpu_lost", "nic", "storage", "nvlink"):
        return att.fault
    return None


_STATE_WORDS = {"absent": "absent / not found", "dead": "dead / not ready", "mismatched": "of a mismatched version"}


def grammar_event(reading: Reading, raw: str, **extra: object) -> tuple[str, dict[str, object]]:
    """The ``suspect_line`` event of a reading: an alert at most (docs/design.md §1: a line read by its words is
    evidence, never an eviction on its own), a record only when the line's own level is below a warning."""
    action = "none" if reading.quiet else CEILING
    finding = reading.finding + (f"; recorded only: {reading.quiet}" if reading.quiet else "")
    return ("suspect_line", common(raw, reading.fault, action, "info" if reading.quiet else "warn", rule=reading.rule, basis="grammar",
                                   finding=finding, object=reading.object, state=reading.state, **extra))  # fmt: skip
