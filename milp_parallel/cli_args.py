"""The command line's argument types: each turns one string into a checked value, or into
argparse's one-line usage error (exit 2) that names what is wrong; and how the oracle's
arguments and numbers are read and printed as ParaDL does.

May import: ``units``, ``errors``, the standard library.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Sequence

from .errors import FormatError, InvalidOptionError

__all__: list[str] = []


def _memory(text: str) -> str:
    """A ``--memory-limit`` value, checked now (exit 2), read later by the command."""
    from .units import parse_memory_limit
    try:
        parse_memory_limit(text, device_bytes=1.0)
    except InvalidOptionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()


def _size(text: str) -> int:
    """A size in bytes (``4MiB``, ``65536``)."""
    from .units import parse_bytes
    try:
        return int(parse_bytes(text))
    except (FormatError, InvalidOptionError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str) -> float | None:
    """A ``--time-limit``: a duration (``60``, ``2min``) > 0; ``inf`` or ``none``: no limit."""
    from .solvers.options import validate_time_limit
    from .units import parse_seconds
    if text.strip().lower() in ("none", "inf", "unlimited"):
        return None
    try:
        return validate_time_limit(parse_seconds(text))
    except (FormatError, InvalidOptionError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text!r}")
    return v


def _count(text: str) -> float:
    """A positive whole number given as a number (ParaDL writes ``1024`` or ``1e3``)."""
    v = _positive_float(text)
    if v != int(v):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return v


def _assignment(text: str) -> tuple[str, str]:
    """``LAYER=CONFIG`` (split at the first ``=``; ``CONFIG`` may hold ``=`` and spaces)."""
    layer, sep, config = text.partition("=")
    if not sep or not layer.strip() or not config.strip():
        raise argparse.ArgumentTypeError(f"expected LAYER=CONFIG such as 'conv1=n=2 h=2' or "
                                         f"'fc6=serial', got {text!r}")
    return layer.strip(), config.strip()


def _positive_int(text: str) -> int:
    try:
        v = int(text)
        if len(text.strip().lstrip("+")) > 18:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _count_or_zero(text: str) -> int:
    return 0 if text.strip() == "0" else _positive_int(text)


def _file_out(text: str) -> str:
    """A file to write (``--save``, ``--out``): not a directory, in a folder that exists
    (checked now, before the run, which may take minutes)."""
    path = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a file name, got ''")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a directory; give a file name (e.g. "
                                         f"{path / 'out.json'})")
    if path.parent.exists() and not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: {path.parent} is a file, not a folder; "
                                         "write elsewhere")
    if not path.parent.exists():
        raise argparse.ArgumentTypeError(f"{text}: the folder {path.parent} does not exist; "
                                         "create it first or write elsewhere")
    return text


def _plot_out(text: str) -> str:
    """A plot file (``--plot``): ``.png``, ``.svg``, ``.pdf``, or no suffix for PNG; its
    folders are created, so none of them may be a file."""
    path = Path(text)
    fmt = path.suffix.lstrip(".").lower()
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a file name, got ''")
    if fmt not in ("", "png", "svg", "pdf"):
        raise argparse.ArgumentTypeError(f"{text}: unsupported image format {fmt!r}; name "
                                         "the file .png, .svg or .pdf")
    if (path if fmt else path.with_suffix(".png")).is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a directory; give a file name (e.g. "
                                         f"{path / 'plot.png'})")
    file = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if file is not None:
        raise argparse.ArgumentTypeError(f"{text}: {file} is a file, not a folder; write "
                                         "elsewhere")
    return text


def _int_range(text: str) -> tuple[int, ...]:
    from .units import parse_int_range
    try:
        return parse_int_range(text)
    except FormatError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _py2(x) -> str:
    """A float as ParaDL's Python 2 ``str`` printed it (12 significant digits, ``128.0``)."""
    text = f"{float(x):.12g}"
    if not any(ch in text for ch in ".einf"):
        text += ".0"
    return text


def _split_codes(values: Sequence[str]) -> list[str]:
    out = []
    for v in values:
        for c in v.replace("[", " ").replace("]", " ").replace("'", " ").replace('"', " ") \
                .replace(",", " ").split():
            out.append(c)
    return out
