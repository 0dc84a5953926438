"""The commonest message, an NVML sample (`gpu`/`sample`), read straight from its bytes.

Half of all telemetry is NVML samples of ~4.5 kB: 8 GPUs of ~27 values. Decoded the general way
(JSON into dicts, then type-checked in Python by events.gpu_table) a sample cost more than the
Kafka client that fetched it. Here msgspec reads it into typed structs in one C pass: the values
some detector reads are type- and range-checked while parsing, the other documented ones (memory
use, corrected-error counters, ``nvlink_errors``...) are skipped unread, as events.gpu_table
leaves them unchecked in a plain sample; and the rows are not tracked by the garbage collector
(tens of thousands of them wait for event time in a consumer's buffer).

Only what is certainly *plain* (events.gpu_table) is read this way. Anything the typed read
refuses (another kind on the topic, an unknown envelope or payload key, a read value of the wrong
type, a number out of range, a negative index, a read key left out) goes through
:func:`events.envelope.decode` and events.gpu_table, so it gets the same verdict and the same
dead-letter reason as it would there. A dead letter or a forwarded event carries the message's
own bytes, unread keys included.

A row answers ``row["temp_c"]``, ``row.get(...)`` and ``isinstance(row, Mapping)`` like the dict it
replaces, so the rules' rare close looks (a counter that moved, a hot GPU) read it unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain
from operator import attrgetter
from typing import Annotated, Any, Iterator, Union

import msgspec

from faultlens.events.gpu_table import TABLE_NUMBERS, GpuRows, GpuTable
from faultlens.events.typed_read import Int64, NonNegInt64, typed_reader

# Every number finite and within ±1e300 (what events.gpu_table calls plain), checked as it is
# parsed: JSON has no NaN or infinity, and msgspec refuses a float literal past the double range.
_Float = Annotated[float, msgspec.Meta(gt=-1e300, lt=1e300)]
_Num = Union[Int64, _Float, None]
_Index = Union[NonNegInt64, None]
_UNSET = msgspec.UNSET


class GpuReading(msgspec.Struct, gc=False):
    """One GPU of a sample: the keys some detector reads (events.gpu_table.TABLE_NUMBERS first,
    in order, then the rest); the other documented keys are skipped unread."""

    util: _Num
    temp_c: _Num
    power_w: _Num
    power_limit_w: _Num
    sm_clock_mhz: _Num
    sm_clock_max_mhz: _Num
    ecc_dbe_volatile: _Num
    ecc_dbe_aggregate: _Num
    remap_uncorrectable: _Num
    retired_pages_sbe: _Num
    retired_pages_dbe: _Num
    pcie_replay: _Num
    index: _Index
    uuid: Union[str, None]
    throttle: Union[list[str], None]
    # Not every driver reports these: left out, they are absent, as in the dict.
    remap_pending: Any = _UNSET
    remap_failure: Any = _UNSET
    retired_pending: Any = _UNSET

    # The read-only mapping a GPU object of the general decoding is.
    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key, _UNSET) if type(key) is str else _UNSET
        if value is _UNSET:
            raise KeyError(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        value = getattr(self, key, _UNSET) if type(key) is str else _UNSET
        return default if value is _UNSET else value

    def __contains__(self, key: object) -> bool:
        return type(key) is str and getattr(self, key, _UNSET) is not _UNSET

    def __iter__(self) -> Iterator[str]:
        return (k for k in self.__struct_fields__ if getattr(self, k) is not _UNSET)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def keys(self):
        return list(self)

    def values(self):
        return [getattr(self, k) for k in self]

    def items(self):
        return [(k, getattr(self, k)) for k in self]


Mapping.register(GpuReading)


class _Sample(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    gpus: list[GpuReading]
    interval_s: Union[NonNegInt64, Annotated[float, msgspec.Meta(ge=0, lt=1e300)], None, msgspec.UnsetType] = _UNSET


_numbers_of = attrgetter(*TABLE_NUMBERS)
assert GpuReading.__struct_fields__[:len(TABLE_NUMBERS)] == TABLE_NUMBERS
_index_of, _uuid_of, _throttle_of = attrgetter("index"), attrgetter("uuid"), attrgetter("throttle")


def readings_table(gpus: list[GpuReading]) -> GpuTable:
    """The table of typed rows (plain: their types and ranges were checked as they were parsed)."""
    numbers = list(chain.from_iterable(map(_numbers_of, gpus)))
    try:
        sum(numbers)  # a null stops the sum (`None in numbers` compares each number with null: slower)
        has_null = False
    except TypeError:
        has_null = True
    rows = GpuRows(gpus)
    rows.columns = (numbers, has_null, list(map(_index_of, gpus)), list(map(_uuid_of, gpus)),
                    list(map(_throttle_of, gpus)))
    return GpuTable(rows, *rows.columns)


def _sample_data(sample: _Sample) -> dict[str, Any]:
    data: dict[str, Any] = {"gpus": readings_table(sample.gpus).gpus}
    if sample.interval_s is not _UNSET:
        data["interval_s"] = sample.interval_s
    return data


# The envelope of one message of the GPU topic: a plain sample with :class:`GpuReading` rows (and
# its table read, see events.gpu_table.GpuRows), anything else as events.envelope.decode reads it.
decode_gpu_message = typed_reader("gpu", "sample", _Sample, _sample_data)
