"""Types of the payload keys docs/events.md documents, checked before any detector reads them.

A key that is absent or ``null`` passes here (the driver may not report a field; the detector that
needs a key says so itself). A key that is present with the wrong type — ``gpus`` not a list,
``rank`` a string, ``loss`` an object, a negative interval — is an :class:`InvalidEvent` naming the
field, so the event becomes a dead letter with that reason instead of being read as something else.
Unknown keys are allowed (forward compatibility).
"""

from __future__ import annotations

import math
from itertools import chain
from operator import itemgetter
from typing import Any, Callable

# Decoded JSON objects are dicts: isinstance(v, dict) is a C-level check, where typing.Mapping goes
# through the ABC machinery (it cost a third of a net sample's check).

from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.gpu_table import GPU_NUMBERS, gpu_table
from faultlens.events.net_reading import CheckedPorts

Check = Callable[[Any], str | None]  # the problem, or None when the value is fine


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _int(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) else f"must be an integer, got {_kind(v)}"


def _nonneg_int(v: Any) -> str | None:
    return _int(v) or (f"must not be negative, got {v}" if v < 0 else None)


def _num(v: Any) -> str | None:
    if not _is_num(v):
        return f"must be a number, got {_kind(v)}"
    if isinstance(v, int):
        return None  # finite, however large (isfinite of an int past a float's range raises)
    return None if math.isfinite(v) else f"must be finite, got {v}"


def _nonneg(v: Any) -> str | None:
    return _num(v) or (f"must not be negative, got {v}" if v < 0 else None)


def _metric(v: Any) -> str | None:
    """A training metric: a number, or the string of a non-finite one (events.envelope.number)."""
    if _is_num(v):
        return None
    if isinstance(v, str) and v.strip().lower() in ("nan", "inf", "+inf", "-inf", "infinity", "-infinity"):
        return None
    return f"must be a number (or \"nan\"/\"inf\"), got {_kind(v)}"


def _str(v: Any) -> str | None:
    return None if isinstance(v, str) else f"must be a string, got {_kind(v)}"


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else f"must be true or false, got {_kind(v)}"


def _obj(v: Any) -> str | None:
    return None if isinstance(v, dict) else f"must be an object, got {_kind(v)}"


# Element checks that are a type alone (or null): a list of them is checked in one C-level pass.
_ELEMENT_TYPES: dict[Check, frozenset[type]] = {_int: frozenset({int, type(None)}), _str: frozenset({str, type(None)})}
_PLAIN_LISTS: dict[Check, Callable[[Any], bool]] = {}


def _list_of(item: Check) -> Check:
    def check(v: Any) -> str | None:
        if not isinstance(v, list):
            return f"must be a list, got {_kind(v)}"
        for i, x in enumerate(v):
            if x is None:
                continue
            problem = item(x)
            if problem:
                return f"[{i}] {problem}"
        return None
    types = _ELEMENT_TYPES.get(item)
    if types is not None:
        _PLAIN_LISTS[check] = lambda v: type(v) is list and types.issuperset(map(type, v))
    return check


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: f"the string {v!r:.40}", bool: f"{v}".lower()}.get(
        type(v), type(v).__name__)


_GPU_NUMBERS = GPU_NUMBERS


def _nvlink(v: Any) -> str | None:
    """A total, or per-counter sums over the active links as the NVML collector writes them."""
    if isinstance(v, dict):
        for name, count in v.items():
            problem = None if count is None else _num(count)
            if problem:
                return f"{name} {problem}"
        return None
    return _num(v)


_GPU: dict[str, Check] = {"index": _nonneg_int, "uuid": _str, "throttle": _list_of(_str), "nvlink_errors": _nvlink,
                          **{k: _num for k in _GPU_NUMBERS}}


def _object(fields: dict[str, Check], required: tuple[str, ...] = ()) -> Check:
    """An object whose ``required`` keys are there and whose ``fields`` present pass their check."""
    def check(v: Any) -> str | None:
        if not isinstance(v, dict):
            return f"must be an object, got {_kind(v)}"
        for key in required:
            if v.get(key) is None:
                return f"{key} is missing"
        get = v.get
        for key, field_check in fields.items():
            value = get(key)
            if value is None or ((plain := _PLAIN.get(field_check)) is not None and plain(value)):
                continue
            if problem := field_check(value):
                return f"{key} {problem}"
        return None
    return check


_gpu = _object(_GPU)


_CHECK_ITEM: dict[str, Check] = {"name": _str, "passed": _bool, "skipped": _bool, "inconclusive": _bool, "detail": _str,
                                  "duration_s": _nonneg}

_check_item = _object(_CHECK_ITEM, required=("name", "passed"))


_INF = float("inf")
# Bulk forms of the element checks a port's counter maps use (dozens of values per port, every
# few seconds per node): a few C-level passes, then one predicate per value (it also takes an
# integer too large for a float, which the per-value check cannot), and the per-value check only
# to name what is wrong.
_FAST: dict[Check, Callable[[Any], bool]] = {
    _nonneg: lambda x: x is None or (type(x) in (int, float) and 0 <= x < _INF),
    _nonneg_int: lambda x: x is None or (type(x) is int and x >= 0),
}
_NULL = type(None)
_NONNEG_TYPES: dict[Check, frozenset[type]] = {_nonneg: frozenset({int, float, _NULL}), _nonneg_int: frozenset({int, _NULL})}


def _plainly_nonneg(values: list, types: frozenset[type]) -> bool:
    """All of ``values`` null or non-negative finite numbers of ``types``, in a few C-level passes
    (False only means "look at each")."""
    if not types.issuperset(map(type, values)):
        return False
    try:
        # Zeros and nulls drop out; a NaN or infinity makes the sum non-finite.
        return min(filter(None, values), default=0) >= 0 and math.isfinite(sum(filter(None, values)))
    except OverflowError:
        return False


def _map_of(value: Check) -> Check:
    """An object whose values pass ``value`` (or are null: a counter the port does not have)."""
    fine = _FAST.get(value)
    types = _NONNEG_TYPES.get(value)

    def check(v: Any) -> str | None:
        if not isinstance(v, dict):
            return f"must be an object, got {_kind(v)}"
        if types is not None and _plainly_nonneg(list(v.values()), types):
            return None
        if fine is not None and all(map(fine, v.values())):
            return None
        for k, x in v.items():
            if x is not None and (problem := value(x)):
                return f"[{k!r}] {problem}"
        return None
    return check


_PORT: dict[str, Check] = {"device": _str, "port": _nonneg_int, "link_layer": _str, "state": _str,
                           "phys_state": _str, "rate_gbps": _nonneg, "netdev": _str,
                           "rates": _map_of(_nonneg), "deltas": _map_of(_nonneg_int)}
_port = _object(_PORT)
_PORT_TEXT = ("device", "link_layer", "state", "phys_state", "netdev")
_port_text = itemgetter(*_PORT_TEXT)
_port_numbers = itemgetter("port", "rate_gbps")
_port_maps = itemgetter("rates", "deltas")
_TEXT_TYPES = frozenset({str, type(None)})
_MAP_TYPES = frozenset({dict, type(None)})
_DICT_ONLY = frozenset({dict})


def _ports_plainly_valid(ports: Any) -> bool:
    """The common case of ``ports`` checked in bulk, every port's counters in one pass (a sample is
    8 ports of ~60 counters). False only means "look closely" (:func:`_port` names the problem)."""
    if type(ports) is CheckedPorts:  # checked as events.net_reading parsed them
        return True
    if type(ports) is not list or not _DICT_ONLY.issuperset(map(type, ports)):
        return False
    try:
        text = list(chain.from_iterable(map(_port_text, ports)))
        numbers = list(map(_port_numbers, ports))
        maps = list(chain.from_iterable(map(_port_maps, ports)))
    except KeyError:  # a key left out: the close look reads it as null
        return False
    if not (_TEXT_TYPES.issuperset(map(type, text)) and _MAP_TYPES.issuperset(map(type, maps))):
        return False
    port, rate = zip(*numbers) if numbers else ((), ())
    if not (_NONNEG_TYPES[_nonneg_int].issuperset(map(type, port)) and min(filter(None, port), default=0) >= 0
            and _plainly_nonneg(list(rate), _NONNEG_TYPES[_nonneg])):
        return False
    rates = list(chain.from_iterable(m.values() for m in maps[0::2] if m is not None))
    deltas = list(chain.from_iterable(m.values() for m in maps[1::2] if m is not None))
    return _plainly_nonneg(rates, _NONNEG_TYPES[_nonneg]) and _plainly_nonneg(deltas, _NONNEG_TYPES[_nonneg_int])


_RANK = {"rank": _nonneg_int}
SCHEMAS: dict[tuple[str, str], dict[str, Check]] = {
    ("gpu", "sample"): (_GPU_SAMPLE := {"gpus": _list_of(_gpu), "interval_s": _nonneg}),
    ("gpu", "xid"): {"gpu": _nonneg_int, "xid": _nonneg_int},
    ("gpu", "lost"): {"gpu": _nonneg_int},
    ("gpu", "unresponsive"): {"gpu": _nonneg_int, "call": _str, "deadline_s": _nonneg, "waited_s": _nonneg,
                              "handle": _str, "others_answered": _nonneg_int},
    ("gpu", "responsive"): {"gpu": _nonneg_int, "call": _str, "stuck_s": _nonneg},
    ("kernel", "xid"): {"xid": _nonneg_int, "pid": _int, "sympathetic": _bool, "count": _nonneg_int, "folded": _bool},
    ("kernel", "gpu_lost"): {"xid": _nonneg_int},
    ("kernel", "sxid"): {"sxid": _nonneg_int},
    ("kernel", "mce"): {"corrected": _bool},
    ("kernel", "edac"): {"corrected": _bool},
    ("kernel", "line"): {"line": _str},
    ("nccl", "nccl_timeout"): {**_RANK, "seq": _int, "timeout_ms": _nonneg, "elapsed_ms": _nonneg,
                               "last_enqueued": _int, "last_completed": _int},
    ("nccl", "nccl_error"): _RANK,
    ("nccl", "cuda_error"): _RANK,
    ("nccl", "exception"): {**_RANK, "user_code": _bool},
    ("nccl", "nan"): _RANK,
    ("nccl", "line"): {"line": _str},
    ("train", "step"): {**_RANK, "step": _nonneg_int, "loss": _metric, "grad_norm": _metric,
                        "step_time_s": _nonneg, "compute_s": _nonneg, "tokens": _nonneg, "tokens_per_s": _nonneg,
                        "mfu": _nonneg, "classes": _nonneg_int},
    ("train", "checkpoint"): {**_RANK, "step": _nonneg_int},
    ("heartbeat", "beat"): {"seq": _int, "pids": _list_of(_int), "sources": _obj, "unranked_pids": _list_of(_int),
                            "health": _obj},
    ("stack", "stack_dump"): {**_RANK, "pid": _int, "dump": _str, "timed_out": _bool},
    ("stack", "recorder_dump"): {**_RANK, "pid": _int, "dump": _str, "entries": _nonneg_int, "truncated": _bool},
    ("check", "result"): {"request_id": _str, "passed": _bool, "failed": _list_of(_str), "checks": _list_of(_check_item), "duration_s": _nonneg},
    ("check", "replay"): {"command_id": _str, "phase": _str, "group": _nonneg_int, "nodes": _list_of(_str),
                          "reproduced": _bool},
    ("check", "replay_done"): {"command_id": _str, "failing_horizontal": _list_of(_nonneg_int),
                               "failing_vertical": _list_of(_nonneg_int)},
    ("net", "sample"): (_NET_SAMPLE := {"ports": _list_of(_port), "interval_s": _nonneg}),
    ("host", "sample"): {"cpu_util": _nonneg, "mem_used_frac": _nonneg, "disk_free_frac": _nonneg, "load1": _nonneg},
}


_NUMBER_TYPES = frozenset({int, float, type(None)})


_BOUND = 1e300  # a number past this goes to the close look (a quick sum of it could overflow)


def _finite_number(v: Any) -> bool:
    # Comparisons, not isfinite: NaN fails them, and an int too large for a float cannot raise.
    return (type(v) is float or type(v) is int) and -_BOUND < v < _BOUND


def _plain_nvlink(v: Any) -> bool:
    """``nvlink_errors`` certainly valid: null, a total, or what the NVML collector writes, each
    error counter summed over the active links (``{"replay", "recovery", "crc_flit", "crc_data"}``)."""
    if v is None:
        return True
    if type(v) is dict:
        return all(type(k) is str for k in v) and all(x is None or _finite_number(x) for x in v.values())
    return _finite_number(v)


def _gpus_plainly_valid(gpus: Any) -> bool:
    """The common case of ``gpus`` checked in bulk: plain dicts of finite numbers, an index, a uuid
    and throttle strings. False only means "look closely" (:func:`_gpu` names the problem): a
    sample is ~200 values, and checking them one call each cost more than every detector after."""
    if type(gpus) is not list:
        return False
    values: list[Any] = []
    for g in gpus:
        if type(g) is not dict:
            return False
        values.extend(map(g.get, _GPU_NUMBERS))
        index, uuid, throttle = g.get("index"), g.get("uuid"), g.get("throttle")
        if index is not None and (type(index) is not int or index < 0):
            return False
        if uuid is not None and type(uuid) is not str:
            return False
        if throttle and (type(throttle) is not list or not all(type(t) is str for t in throttle)):
            return False
        if not _plain_nvlink(g.get("nvlink_errors")):
            return False
    if not _NUMBER_TYPES.issuperset(map(type, values)):
        return False
    try:
        # Zeros and None drop out; one NaN or infinity makes the sum non-finite.
        return math.isfinite(sum(filter(None, values)))
    except OverflowError:  # an integer too large for a float: let the close look decide
        return False


# What certainly passes each element check, tested in one expression: the check itself (with its
# nested calls and isinstance chains) runs only to name a problem. Checks not listed run as they are.
_PLAIN: dict[Check, Callable[[Any], bool]] = {
    _int: lambda v: type(v) is int,
    _nonneg_int: lambda v: type(v) is int and v >= 0,
    _num: _finite_number,
    _nonneg: lambda v: (type(v) is float or type(v) is int) and 0 <= v < _BOUND,
    _metric: lambda v: type(v) is float or type(v) is int,
    _str: lambda v: type(v) is str,
    _bool: lambda v: type(v) is bool,
    _obj: lambda v: type(v) is dict,
    **_PLAIN_LISTS,
}


def _plain_of(check: Check) -> Callable[[Any], bool]:
    """What certainly passes ``check`` (the check itself where no quicker test is known)."""
    return _PLAIN.get(check) or (lambda v: check(v) is None)


_SCHEMA_STEPS: dict[tuple[str, str], tuple[tuple[str, Callable[[Any], bool], Check], ...]] = {
    kind: tuple((key, _plain_of(check), check) for key, check in schema.items()) for kind, schema in SCHEMAS.items()}


def check_payload(event: Envelope) -> None:
    """Raise InvalidEvent (``data.<key>``) when a documented key has the wrong type."""
    steps = _SCHEMA_STEPS.get((event.source, event.kind))
    if not steps:
        return
    schema = SCHEMAS[(event.source, event.kind)]
    data = event.data
    if schema is _GPU_SAMPLE or schema is _NET_SAMPLE:
        interval = data.get("interval_s")
        if interval is None or (type(interval) in (int, float) and 0 <= interval < math.inf):
            if schema is _GPU_SAMPLE:
                if gpu_table(event) is not None or _gpus_plainly_valid(data.get("gpus", [])):
                    return
            elif _ports_plainly_valid(data.get("ports", [])):
                return
    get = data.get
    for key, plain, check in steps:
        value = get(key)
        if value is None or plain(value):
            continue
        problem = check(value)
        if problem:
            raise InvalidEvent(f"data.{key}", problem)
