"""A NIC port sample (`net`/`sample`), read straight from its bytes.

A NIC sample is ~13 kB: 8 ports, each with ``rates`` and ``deltas`` maps of ~30 counters. Read the
general way (orjson into dicts, then events.payloads checking ~500 counters in Python) it cost
about as much as all the node stage's NVML samples, at a tenth of their number. Here msgspec reads
it in one C pass into the same dicts the general reading makes, checking every value as
events.payloads would while it parses: the port's names a string or null, ``port`` a
non-negative integer, ``rate_gbps`` and every rate a non-negative finite number, every delta a
non-negative integer (each or null). The ports list comes back as :class:`CheckedPorts`, which
events.payloads takes as checked.

Only what is certainly plain is read this way: every port object with exactly the nine
documented keys, every integer within 64 bits signed (msgspec's bounds; up to 2**64 - 1 orjson
reads an int, past it a float, which is no delta: the general reading decides those). Anything
the typed read refuses (another kind, an unknown envelope, payload or port key, a key left out,
a value of the wrong type or out of range, a byte that is not ASCII) goes through
:func:`events.envelope.decode` and events.payloads, so it gets the same verdict and the same
dead-letter reason as it would there. The counter maps stay open: a driver's new counter is read
and checked like the others, as the general check does. So a plain sample's data equals the
general reading's (the rules read the same dicts), and a re-encoded one loses no key.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

import msgspec
from msgspec.structs import asdict

from faultlens.events.typed_read import NonNegInt64, typed_reader

# Integers bounded as events.typed_read says (msgspec reads an int however large, so the read
# must stop short of where orjson reads a float). JSON has no NaN or infinity, and msgspec
# refuses a float literal past the double range, as orjson does.
_NonNeg = Union[NonNegInt64, Annotated[float, msgspec.Meta(ge=0)], None]
_Text = Union[str, None]
_UNSET = msgspec.UNSET


class CheckedPorts(list):
    """A `net`/`sample`'s ``ports`` as :func:`decode_net_message` read them: plain dicts whose
    documented values were checked while parsed (events.payloads does not check them again)."""

    __slots__ = ()


class _Port(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    device: _Text
    port: Union[NonNegInt64, None]
    link_layer: _Text
    state: _Text
    phys_state: _Text
    rate_gbps: _NonNeg
    netdev: _Text
    rates: Union[dict[str, _NonNeg], None]
    deltas: Union[dict[str, Union[NonNegInt64, None]], None]


class _Sample(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    ports: list[_Port]
    interval_s: Union[_NonNeg, msgspec.UnsetType] = _UNSET


def _sample_data(sample: _Sample) -> dict[str, Any]:
    data: dict[str, Any] = {"ports": CheckedPorts(map(asdict, sample.ports))}
    if sample.interval_s is not _UNSET:
        data["interval_s"] = sample.interval_s
    return data


# The envelope of one message of the net topic: a plain sample with its ports read and checked
# (:class:`CheckedPorts`), anything else as events.envelope.decode reads it.
decode_net_message = typed_reader("net", "sample", _Sample, _sample_data)
