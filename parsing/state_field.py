"""A network link's or port's state printed as a field whose value says it is down (issue 54).

Tools that report a link print its state as a FIELD, not a sentence: a key, a separator, a value. The key is
spelled as each tool likes (``state``, ``phys state``, ``Physical state``, ``LinkState``, ``PhysLinkState``,
``physical_state``, ``port_state``), the separator too (a colon, ``=``, blanks, a dotted leader
``LinkState:.......Down``, the sysfs enumerator ``state: 1: DOWN``), and the state grammar's sentences ("the
link is down") do not see it. A person reads any of them the same way: a link's state whose value is DOWN,
DISABLED, POLLING (the port trains and finds no peer), INACTIVE or NO-CARRIER is a link not carrying traffic.
Rules name one tool's layout; this names the field, so the next tool's layout of it is read too.

Whose state it is: a key that names a link's or a port's state (``link``, ``port``, ``phys``/``physical``
before ``state``), or the sysfs port state's enumerated value (``1: DOWN``), is a network link's (``nic``; an
NVLink's where the line names one, docs/design.md §9); a bare ``state`` is read only on a line that names a
network device (``ens1f0: <...> state DOWN``), so a service's, a job's or a bridge's state is not a link's.

The guards are the healthy look-alikes of the same fields: a value that is up (``ACTIVE``, ``LinkUp``,
``UP``); a link an administrator set down (its key says ``admin``, or ``ip link``'s flags lack ``UP``: the
interface was never brought up, ``qdisc noop``); a virtual interface (a container's bridge or veth, which is
down whenever nothing uses it). The state grammar's own guards (a negation, a hedge, help text) apply before
and after this is consulted; a reading is at most an alert.

Pure functions over one line.
"""

from __future__ import annotations

import re

from faultlens.parsing.line import any_of

# fmt: off
# The key: a state or status, qualified by what it is the state of, in any tool's spelling (blank, underscore or
# CamelCase between its words). Not an administrator's setting ("AdminState", "admin state").
_KEY = r"(?<![a-z])(?<!admin )(?<!admin_)(?<!administrative )(?P<qual>(?:(?:phys(?:ical)?|link|port)[ _]?)*)(?:state|status)"
# The separator: blanks, a colon or "=", a dotted leader; then the sysfs port state's number ("1: DOWN", "3: Disabled").
_SEP = r"[\s:=.]*(?P<num>\d:\s*)?"
# A value that says the link is not carrying traffic.
_VALUE = r"(?P<value>down|disabled|polling|inactive|no[-_ ]?carrier)(?![\w-])"
_FIELD = re.compile(_KEY + _SEP + _VALUE, re.IGNORECASE)
# A network device the line names (the state grammar's nic objects, by their device names), or an NVLink.
_NIC = re.compile(r"(?i)\b(?:ib\d*|infiniband|rdma|roce|hcas?|mlx\d_\w+|ibp\w+|bond\d+|eth\d+|en[ops]\d\w*|bnxt_re\d+|irdma\d+|efa_?\d*|rdmap\w+)\b")
_NVLINK = re.compile(r"(?i)\bnvlinks?\d*\b")
# A link nobody brought up: a key of the administrator's, or ip link's flag list without UP ("<BROADCAST,MULTICAST>").
_ADMIN = re.compile(r"(?i)\badmin(?:istrative)?[ _]?(?:state|status)\b|\bqdisc noop\b")
_FLAGS = re.compile(r"<(?P<flags>[A-Z_,-]+)>")
# A virtual interface is down whenever nothing uses it: a container's bridge or pair, a VM's bridge, a tunnel.
_VIRTUAL = re.compile(r"(?i)\b(?:docker\d*|br-\w+|virbr\d+|veth\w*|cni\d*|flannel\.\d+|cali\w+|tun\d+|tap\w+|wg\d+|lo)\b:")
# Literals one of which any reading needs besides the state grammar's ("down", "inactive": parsing.state_grammar
# consults this on a line of either; the parsers' pre-filters carry both).
QUICK = ("disabled", "polling", "no-carrier", "no_carrier", "nocarrier")
_QUICK = any_of(QUICK)
# fmt: on


def quick(lowered: str) -> bool:
    """Whether the lowered line holds a literal a field's value needs that the state grammar's literals lack."""
    return _QUICK.search(lowered) is not None


def read_state_field(message: str) -> tuple[str, str, str, int] | None:
    """(class, the field's words, state, where its value starts) when the line prints a network link's or port's
    state as a field whose value says it is down, else None."""
    if _ADMIN.search(message) or _VIRTUAL.search(message):
        return None
    flags = _FLAGS.search(message)
    if flags is not None and "UP" not in flags.group("flags").split(","):
        return None
    for m in _FIELD.finditer(message):
        if not (m.group("qual") or m.group("num") or _NIC.search(message) or _NVLINK.search(message)):
            continue
        fault = "nvlink" if _NVLINK.search(message) else "nic"
        return fault, m.group(0).strip(), m.group("value").lower(), m.start("value")
    return None
