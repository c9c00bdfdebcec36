"""Kubernetes resource.Quantity parsing, restricted to what GPU extended resources allow."""

from __future__ import annotations

import re
from decimal import Decimal, DecimalException

from extender.errors import InvalidDemand

_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|)$")
# Bounded so a hostile value cannot make Decimal arithmetic or the ledger blow up.
MAX_VALUE = 10**15


# Parsed values by (type, text[, scale]): every pod of a job repeats the same few quantities,
# and Decimal parsing is most of the cost of reading a pod's demand. Bounded; only values that
# parsed are kept (a bad one raises with its own resource name every time).
_MEMO: dict[tuple, int] = {}
MEMO_SIZE = 4096


def _memoised(key: tuple, parse, *args) -> int:  # type: ignore[no-untyped-def]
    hit = _MEMO.get(key)
    if hit is None:
        hit = parse(*args)
        if len(_MEMO) >= MEMO_SIZE:
            _MEMO.clear()
        _MEMO[key] = hit
    return hit


def parse_int_quantity(value: object, resource: str) -> int:
    """Parse a quantity that must be a non-negative integer (extended resources are integers)."""
    if type(value) in (str, int):
        return _memoised((type(value), value), _parse_int, value, resource)
    return _parse_int(value, resource)


def parse_scaled_quantity(value: object, resource: str, scale: float | int) -> int:
    """A CPU or memory quantity times ``scale``, rounded up (CPU: scale 1000 gives milli-CPU;
    memory: scale 2**-20 gives MiB). Fractions are allowed, as Kubernetes allows them."""
    if type(value) in (str, int, float):
        return _memoised((type(value), value, scale), _parse_scaled, value, resource, scale)
    return _parse_scaled(value, resource, scale)


def _parse_int(value: object, resource: str) -> int:
    if isinstance(value, bool):
        raise InvalidDemand(f"{resource}: quantity must be a string or integer, got {value!r}")
    if isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, str):
        text = value.strip()
        match = _QUANTITY.match(text) if len(text) <= 64 else None
        if not match:
            raise InvalidDemand(f"{resource}: {value!r} is not a Kubernetes quantity")
        try:  # '1e1000000' overflows the decimal context: a bad quantity, not a crash
            number = Decimal(match.group(1)) * _SUFFIX[match.group(2)]
            if not number.is_finite():
                raise InvalidDemand(f"{resource}: {value!r} is not a finite quantity")
            if abs(number.adjusted()) > 30:  # far outside MAX_VALUE and below 1m: no rounding
                raise InvalidDemand(f"{resource}: quantity {value!r} is out of range")
        except DecimalException as exc:
            raise InvalidDemand(f"{resource}: {value!r} is not a Kubernetes quantity") from exc
    else:
        raise InvalidDemand(f"{resource}: quantity must be a string or integer, got {value!r}")
    if number < 0:
        raise InvalidDemand(f"{resource}: quantity {value!r} is negative")
    if number != number.to_integral_value():
        raise InvalidDemand(f"{resource}: extended resources must be whole numbers, got {value!r}")
    if number > MAX_VALUE:
        raise InvalidDemand(f"{resource}: quantity {value!r} is implausibly large")
    return int(number)


def _parse_scaled(value: object, resource: str, scale: float | int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidDemand(f"{resource}: quantity must be a string or number, got {value!r}")
    text = str(value).strip()
    match = _QUANTITY.match(text) if len(text) <= 64 else None
    if not match:
        raise InvalidDemand(f"{resource}: {value!r} is not a Kubernetes quantity")
    try:
        number = Decimal(match.group(1)) * _SUFFIX[match.group(2)]
        if not number.is_finite() or abs(number.adjusted()) > 30:
            raise InvalidDemand(f"{resource}: quantity {value!r} is out of range")
        scaled = (number * Decimal(scale)).to_integral_value(rounding="ROUND_CEILING")
    except DecimalException as exc:
        raise InvalidDemand(f"{resource}: {value!r} is not a Kubernetes quantity") from exc
    if scaled < 0:
        raise InvalidDemand(f"{resource}: quantity {value!r} is negative")
    return int(min(scaled, MAX_VALUE))
