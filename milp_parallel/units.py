"""Human-readable quantities: sizes (``16GiB``), bandwidths (``100Gbps``), times, ranges.

Parsing is strict: a string that does not read as the asked quantity raises
:class:`~milp_parallel.errors.FormatError` with the offending text and examples of what is
accepted. Formatting goes the other way, for tables and plot labels.

Conventions
-----------
- Sizes: ``B``, decimal ``kB KB MB GB TB PB`` (powers of 1000) and binary ``KiB MiB GiB TiB
  PiB`` (powers of 1024); a plain number is bytes. The prefix is case-insensitive; the ``B``
  is not (``16Gb`` would be bits, and is refused).
- Bandwidths: bits per second ``bps Kbps Mbps Gbps Tbps`` (powers of 1000, divided by 8 to give
  bytes/s) or bytes per second ``B/s KB/s MB/s GB/s GiB/s ...``; a plain number is bytes/s.
- Times: ``s ms us ns min h``; a plain number is seconds.
- Ranges of integers: ``4..1024`` doubles from 4 to 1024 (4, 8, ..., 1024), ``1..16:+3`` steps
  by 3, ``2..54:*3`` multiplies by 3; ``1,2,4`` is a list; ``8`` is one value. Pieces combine
  with commas: ``1,3..12:+3``.
"""

from __future__ import annotations

import math
import re
from typing import Iterable

from .errors import FormatError

__all__ = ["parse_bytes", "parse_bandwidth", "parse_seconds", "parse_int_range",
           "parse_memory_limit", "DEVICE_MEMORY", "NO_LIMIT",
           "format_bytes", "format_bandwidth", "format_seconds"]

#: The ``memory_limit`` sentinel meaning "each device's memory" (the cluster's capacity).
DEVICE_MEMORY = "device"
#: The ``memory_limit`` sentinel meaning "no budget".
NO_LIMIT = "none"

_NO_LIMIT_WORDS = ("none", "unlimited", "inf", "off")

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"

_SIZE_PREFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15,
                "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}

_SIZE_RE = re.compile(r"^\s*" + _NUMBER + r"\s*(|[kKmMgGtTpP][iI]?)([bB]?)\s*$")
_BW_RE = re.compile(r"^\s*" + _NUMBER + r"\s*(|[kKmMgGtTpP][iI]?)(bps|bit/s|b/s|B/s|Bps)?\s*$")
_TIME_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9,
               "min": 60.0, "m": 60.0, "h": 3600.0}
_TIME_RE = re.compile(r"^\s*" + _NUMBER + r"\s*([a-zµ]*)\s*$")


def _float(x: int | float, what: str) -> float:
    try:
        return float(x)
    except OverflowError:     # an int beyond the float range
        raise FormatError(f"a {what} must be a finite number, got {x!r:.30}...") from None


def parse_bytes(text: str | int | float) -> int:
    """Parse a size such as ``16GiB``, ``16GB``, ``512MB``, ``1e9`` into bytes.

    Parameters
    ----------
    text : str or number
        A number (bytes) or a number followed by a unit.

    Returns
    -------
    int
        The size in bytes, rounded down to a whole byte.

    Raises
    ------
    FormatError
        If the text is not a non-negative size.

    Examples
    --------
    >>> parse_bytes("16GiB")
    17179869184
    >>> parse_bytes("16GB")
    16000000000
    >>> parse_bytes("1.5 KiB")
    1536
    """
    if isinstance(text, bool):
        raise FormatError(f"expected a size, got {text!r}")
    if isinstance(text, (int, float)):
        try:
            ok = math.isfinite(text) and text >= 0
        except OverflowError:      # an int beyond the float range
            ok = False
        if not ok:
            raise FormatError(f"a size must be a finite number >= 0, got {text!r:.40}")
        return int(text)
    m = _SIZE_RE.match(str(text))
    if not m:
        raise FormatError(f"cannot read {text!r} as a size; write e.g. 16GiB, 16GB, 512MiB or "
                          "a number of bytes")
    value, prefix, unit = m.groups()
    if unit == "b":
        raise FormatError(f"cannot read {text!r} as a size: a lower-case b means bits; write "
                          "bytes, e.g. 16GB or 16GiB")
    x = float(value) * _SIZE_PREFIX[prefix.lower()]
    if not math.isfinite(x):
        raise FormatError(f"a size must be a finite number of bytes, got {text!r:.40}")
    return int(x)


def parse_bandwidth(text: str | int | float) -> float:
    """Parse a bandwidth such as ``100Gbps`` or ``12.5GB/s`` into bytes per second.

    Raises
    ------
    FormatError
        If the text is not a positive bandwidth.

    Examples
    --------
    >>> parse_bandwidth("100Gbps")
    12500000000.0
    >>> parse_bandwidth("50GB/s")
    50000000000.0
    """
    if isinstance(text, bool):
        raise FormatError(f"expected a bandwidth, got {text!r}")
    if isinstance(text, (int, float)):
        x = _float(text, "bandwidth")
    else:
        m = _BW_RE.match(str(text))
        if not m:
            raise FormatError(f"cannot read {text!r} as a bandwidth; write e.g. 100Gbps, "
                              "12.5GB/s or a number of bytes per second")
        value, prefix, unit = m.groups()
        x = float(value) * _SIZE_PREFIX[prefix.lower()]
        if unit in ("bps", "bit/s", "b/s"):
            x /= 8
    if not math.isfinite(x) or x <= 0:
        raise FormatError(f"a bandwidth must be a finite number > 0, got {text!r}")
    return x


def parse_seconds(text: str | int | float) -> float:
    """Parse a duration such as ``60``, ``90s``, ``250ms`` or ``2min`` into seconds.

    Raises
    ------
    FormatError
        If the text is not a non-negative duration.

    Examples
    --------
    >>> parse_seconds("250ms")
    0.25
    >>> parse_seconds("2min")
    120.0
    """
    if isinstance(text, bool):
        raise FormatError(f"expected a duration, got {text!r}")
    if isinstance(text, (int, float)):
        x = _float(text, "duration")
    else:
        m = _TIME_RE.match(str(text))
        if not m or m.group(2) not in _TIME_UNITS:
            raise FormatError(f"cannot read {text!r} as a duration; write e.g. 60, 90s, 250ms "
                              "or 2min")
        x = float(m.group(1)) * _TIME_UNITS[m.group(2)]
    if not math.isfinite(x) or x < 0:
        raise FormatError(f"a duration must be a finite number >= 0, got {text!r}")
    return x


def parse_memory_limit(value: str | int | float | None, *,
                       device_bytes: float | None = None) -> float | None:
    """The one reading of a ``memory_limit`` (API, command line, sweep files).

    Parameters
    ----------
    value : str, number or None
        ``"device"`` (:data:`DEVICE_MEMORY`): each device's memory; ``"none"``
        (:data:`NO_LIMIT`, also ``"unlimited"``, ``"inf"``, ``math.inf``): no budget; a
        size (``"12GiB"``, ``"16GB"``) or a number of bytes > 0; ``None``: no budget, as
        everywhere in the package (a Problem's, ``solve()``'s and the pipeline's
        ``memory_limit``; their default is ``"device"`` where a device is known).
    device_bytes : float, optional
        The device memory that ``"device"`` stands for. Without it (a Problem file has no
        device), ``"device"`` is refused.

    Returns
    -------
    float or None
        The budget per device in bytes, or ``None`` for no budget.

    Raises
    ------
    InvalidOptionError
        For a size that does not parse, 0, a negative number, NaN, or ``"device"`` where no
        device memory is known; the message lists what is accepted.

    Examples
    --------
    >>> parse_memory_limit("16GiB")
    17179869184.0
    >>> parse_memory_limit("none") is None, parse_memory_limit(None, device_bytes=8e9) is None
    (True, True)
    >>> parse_memory_limit("device", device_bytes=16e9)
    16000000000.0
    """
    from .errors import InvalidOptionError

    accepted = ("a size such as '16GiB' or '12GB', a number of bytes > 0, 'device' (each "
                "device's memory) or 'none' (no budget)")
    if value is None:
        return None
    if isinstance(value, str):
        word = value.strip().lower()
        if word == DEVICE_MEMORY:
            if device_bytes is None:
                raise InvalidOptionError(
                    "memory_limit='device' needs a cluster to take the device memory from; "
                    "a Problem has none: give a size such as '16GiB' or 'none'")
            return float(device_bytes)
        if word in _NO_LIMIT_WORDS:
            return None
        try:
            x = float(parse_bytes(value))
        except FormatError:
            raise InvalidOptionError(f"memory_limit={value!r:.40} is not a size; give "
                                     f"{accepted}") from None
    elif isinstance(value, bool) or not isinstance(value, (int, float)) and not (
            hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0
            and value.dtype.kind in "iuf"):
        raise InvalidOptionError(f"memory_limit must be {accepted}; got {value!r:.60} "
                                 f"({type(value).__name__})")
    else:
        try:
            x = float(value)
        except OverflowError:
            raise InvalidOptionError(f"memory_limit={value!r:.30}... is beyond the float "
                                     f"range; give {accepted}") from None
    if math.isinf(x) and x > 0:
        return None
    if not x > 0 or not math.isfinite(x):
        raise InvalidOptionError(f"memory_limit must be positive bytes, got {value!r}; give "
                                 f"{accepted}")
    return x


#: The most values one range string may name.
_MAX_RANGE_VALUES = 4096

_RANGE_RE = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*(?::\s*([+*])\s*(\d+))?\s*$")


def parse_int_range(text: str | int | Iterable[int]) -> tuple[int, ...]:
    """Parse a list or range of positive integers such as ``4..1024`` or ``1,2,4``.

    ``a..b`` doubles from ``a`` while the value stays ``<= b`` (device counts are usually
    powers of two); ``a..b:+s`` steps by ``s``; ``a..b:*f`` multiplies by ``f``. Pieces
    separated by commas are concatenated; duplicates are dropped and the result sorted.

    Returns
    -------
    tuple of int
        Sorted, without duplicates.

    Raises
    ------
    FormatError
        If a piece does not parse, a bound is 0, a range runs backwards or a step is 0 (or a
        factor 1).

    Examples
    --------
    >>> parse_int_range("4..64")
    (4, 8, 16, 32, 64)
    >>> parse_int_range("1..10:+3")
    (1, 4, 7, 10)
    >>> parse_int_range("1,2,3..12:*2")
    (1, 2, 3, 6, 12)
    """
    if isinstance(text, bool):
        raise FormatError(f"expected integers, got {text!r}")
    if isinstance(text, int):
        values: list[int] = [text]
    elif not isinstance(text, str):
        values = []
        for x in text:
            values.extend(parse_int_range(x))
    else:
        values = []
        pieces = [p for p in str(text).split(",")]
        if not any(p.strip() for p in pieces):
            raise FormatError(f"{text!r} names no integers; write e.g. 8, 1,2,4 or 4..1024")
        for piece in pieces:
            piece = piece.strip()
            if not piece:
                continue
            if piece.isdigit():
                values.append(int(piece))
                continue
            m = _RANGE_RE.match(piece)
            if not m:
                raise FormatError(f"cannot read {piece!r} (in {text!r}) as integers; write "
                                  "e.g. 8, 1,2,4, 4..1024 (doubling), 1..16:+1 or 3..243:*3")
            lo, hi, op, step = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)
            if lo < 1 or hi < lo:
                raise FormatError(f"range {piece!r} must satisfy 1 <= start <= end")
            op = op or "*"
            step_n = int(step) if step else 2
            if (op == "+" and step_n < 1) or (op == "*" and step_n < 2):
                raise FormatError(f"range {piece!r}: the step must be >= 1 (:+s) or the factor "
                                  ">= 2 (:*f)")
            x = lo
            while x <= hi:
                values.append(x)
                if len(values) > _MAX_RANGE_VALUES:
                    raise FormatError(f"{text!r:.60} names more than {_MAX_RANGE_VALUES} "
                                      "values; use a larger step or fewer ranges")
                x = x + step_n if op == "+" else x * step_n
    for v in values:
        if v < 1:
            raise FormatError(f"{text!r}: every value must be a positive integer, got {v}")
    return tuple(sorted(set(values)))


def _format(x: float, units: list[tuple[float, str]], digits: int) -> str:
    for factor, name in units:
        if abs(x) >= factor:
            return f"{x / factor:.{digits}g}{name}"
    factor, name = units[-1]
    return f"{x / factor:.{digits}g}{name}"


def format_bytes(n_bytes: float, *, binary: bool = True, digits: int = 3) -> str:
    """A size as text: ``format_bytes(2**34) == "16GiB"``; ``binary=False`` uses GB.

    Examples
    --------
    >>> format_bytes(17179869184)
    '16GiB'
    >>> format_bytes(16e9, binary=False)
    '16GB'
    """
    if binary:
        units = [(2**50, "PiB"), (2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"),
                 (2**10, "KiB"), (1, "B")]
    else:
        units = [(1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1, "B")]
    if not math.isfinite(n_bytes):
        return str(n_bytes)
    return _format(float(n_bytes), units, digits)


def format_bandwidth(bytes_per_s: float, *, digits: int = 3) -> str:
    """A bandwidth as text in bytes per second (decimal): ``12.5GB/s``."""
    units = [(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"), (1, "B/s")]
    return _format(float(bytes_per_s), units, digits)


def format_seconds(seconds: float, *, digits: int = 3) -> str:
    """A duration as text: ``format_seconds(0.0123) == "12.3ms"``.

    Examples
    --------
    >>> format_seconds(0.0123)
    '12.3ms'
    >>> format_seconds(90)
    '90s'
    """
    if not math.isfinite(seconds):
        return str(seconds)
    if seconds == 0:
        return "0s"
    return _format(float(seconds), [(1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")],
                   digits)
