"""One read of a `gpu`/`sample` payload, shared by the payload check, the GPU rules and the feature windows.

A sample is ~8 GPU objects of ~27 keys each, several per second per node: reading every key once
per consumer (check, memory rule, thermal rule, windows) cost more than all the judging after it.
:func:`gpu_table` reads the GPUs once, with C-level getters, into columns of the values some
detector reads (TABLE_NUMBERS, ``index``, ``uuid``, ``throttle``), and says whether the sample is
*plain*: every GPU an object holding each of those keys, every such number a finite int or float
(or null), ``index`` a non-negative int, ``uuid`` a string, ``throttle`` a list of strings. A
plain sample is accepted as it is: the documented values no detector reads (memory use, memory
clock, corrected-error counters, ``nvlink_errors``, ``recovery_action``) are not looked at
(issue 13: no per-event validation of fields nobody uses). Anything else (``None``) is looked at
key by key, every documented key, by the slower code that names the problem.

The table of the last event read is kept (by identity): the check builds it and every detector
of the same event reuses it.
"""

from __future__ import annotations

import math
from itertools import chain
from operator import itemgetter
from typing import Any, NamedTuple

# Every documented number of a GPU (docs/events.md, source `gpu`).
GPU_NUMBERS = ("util", "mem_util", "mem_used_mb", "mem_total_mb", "temp_c", "power_w", "power_limit_w",
               "sm_clock_mhz", "mem_clock_mhz", "sm_clock_max_mhz", "ecc_sbe_volatile", "ecc_dbe_volatile",
               "ecc_sbe_aggregate", "ecc_dbe_aggregate", "remap_correctable", "remap_uncorrectable",
               "retired_pages_sbe", "retired_pages_dbe", "pcie_replay")
# The numbers some detector reads (sample features, thermal and memory rules): a table's columns.
TABLE_NUMBERS = ("util", "temp_c", "power_w", "power_limit_w", "sm_clock_mhz", "sm_clock_max_mhz",
                 "ecc_dbe_volatile", "ecc_dbe_aggregate", "remap_uncorrectable", "retired_pages_sbe",
                 "retired_pages_dbe", "pcie_replay")
_WIDTH = len(TABLE_NUMBERS)
_POS = {name: i for i, name in enumerate(TABLE_NUMBERS)}

_numbers_of = itemgetter(*TABLE_NUMBERS)
_index_of, _uuid_of, _throttle_of = itemgetter("index"), itemgetter("uuid"), itemgetter("throttle")

_DICT = frozenset({dict})
_NULL = type(None)
_NUMBER = frozenset({int, float, _NULL})
_INT = frozenset({int, type(None)})
_STR = frozenset({str, type(None)})
_LIST = frozenset({list, type(None)})


class GpuTable(NamedTuple):
    """A plain sample's GPUs: the objects themselves and their documented values as columns."""

    gpus: list[dict[str, Any]]
    numbers: list[Any]  # TABLE_NUMBERS of the first GPU, then of the second, ...
    has_null: bool  # some number is null (a value the driver did not report)
    index: list[int | None]  # type: ignore[assignment]  # the column's name, shadowing tuple.index by design
    uuid: list[str | None]
    throttle: list[list[str] | None]

    @property
    def typed(self) -> bool:
        """The rows are events.gpu_reading.GpuReading (attributes), not dicts."""
        return type(self.gpus) is GpuRows

    def column(self, name: str) -> list[Any]:
        """One of TABLE_NUMBERS for every GPU, in the sample's order."""
        return self.numbers[_POS[name]::_WIDTH]

    def any_throttle(self, reasons: frozenset[str]) -> bool:
        """Whether some GPU reports one of ``reasons``."""
        return not reasons.isdisjoint(chain.from_iterable(filter(None, self.throttle)))


class GpuRows(list):
    """A plain sample's GPUs as events.gpu_reading reads them, with the table's columns it read as
    it decoded them (the consumer's check and detectors then take them as they are).

    The columns, not the table: a table holds its rows, so rows holding their table would make
    every sample a reference cycle, left for the garbage collector instead of freed at once (half
    of all messages; measured, it cost more than the typed decoding saved)."""

    __slots__ = ("columns",)
    columns: tuple[list[Any], bool, list[int | None], list[str | None], list[list[str] | None]]


def read_table(gpus: Any) -> GpuTable | None:
    """The table of a sample's ``gpus``, or None when it is not plain (see the module doc)."""
    if type(gpus) is GpuRows:
        return GpuTable(gpus, *gpus.columns)
    if type(gpus) is not list or not _DICT.issuperset(map(type, gpus)):
        return None
    try:
        numbers = list(chain.from_iterable(map(_numbers_of, gpus)))
        index = list(map(_index_of, gpus))
        uuid = list(map(_uuid_of, gpus))
        throttle = list(map(_throttle_of, gpus))
    except KeyError:  # a key left out: the key-by-key code reads it as null
        return None
    types = set(map(type, numbers))
    if not (types <= _NUMBER and _INT.issuperset(map(type, index)) and _STR.issuperset(map(type, uuid))
            and _LIST.issuperset(map(type, throttle))
            and _STR.issuperset(map(type, chain.from_iterable(filter(None, throttle))))
            and min(filter(None, index), default=0) >= 0):
        return None
    has_null = _NULL in types
    try:
        # One NaN or infinity makes the sum non-finite (nulls drop out).
        if not math.isfinite(sum(filter(None, numbers)) if has_null else sum(numbers)):
            return None
    except OverflowError:  # an integer too large for a float
        return None
    return GpuTable(gpus, numbers, has_null, index, uuid, throttle)


_last: tuple[Any, Any, GpuTable | None] = (None, None, None)


def gpu_table(event: Any) -> GpuTable | None:
    """The table of a `gpu`/`sample` event's GPUs (see :func:`read_table`), read once per event."""
    global _last
    data = event.data
    last_event, last_data, table = _last
    if event is last_event and data is last_data:
        return table
    table = read_table(data.get("gpus"))
    _last = (event, data, table)  # one tuple: a reader in another thread sees all of it or none
    return table
