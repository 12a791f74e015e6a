"""One I/O layer: how every document of the package is read and written.

Every file format of milp_parallel is JSON (problems, layer graphs, topologies, plans,
profile tables) or JSON lines (sweep results), and every one goes through the functions
here, so they all behave the same way:

- **gzip either way**: a name ending in ``.gz`` is written gzip-compressed; on reading, the
  content decides (gzip's magic bytes), whatever the name says.
- **one spelling of non-finite numbers**: ``inf``, ``-inf`` and ``nan`` are written as the
  JSON strings ``"inf"``, ``"-inf"`` and ``"nan"`` (:func:`encode`) and read back by
  :func:`decode`; bare ``NaN`` / ``Infinity`` (not JSON) are never written.
- **one error**: whatever is wrong with a file (missing, a directory, unreadable, binary,
  truncated or corrupt gzip, not JSON, nested too deep, not the document type asked for, a
  field missing, of the wrong type or a number beyond its range) raises
  :class:`~milp_parallel.errors.FormatError` whose message starts with the file and names
  the field (``nodes[3].costs``) and what was expected.
- **strict keys**: every reader lists the keys each object of its document may have
  (:meth:`Fields.keys`); an unknown key is refused naming it, the nearest known key and the
  known ones (``p.json: layers[3].attrs.paddin is not a known key; did you mean 'padding'?
  known: ...``), so a typo never silently means "the default".
- writes are atomic (a temporary file renamed over the target), so an interrupted write
  never leaves half a document; a path that cannot be written (a directory, a missing
  folder, no permission, a full disk) raises :class:`~milp_parallel.errors.FileWriteError`
  naming it.

Documents carry ``"format"`` and ``"version"`` keys (:func:`read_document` checks them).

Examples
--------
>>> import math, tempfile, os
>>> d = tempfile.mkdtemp()
>>> write_json(os.path.join(d, "x.json.gz"), {"a": [1.5, math.inf]})
>>> read_json(os.path.join(d, "x.json.gz"))
{'a': [1.5, 'inf']}
>>> decode(read_json(os.path.join(d, "x.json.gz")))
{'a': [1.5, inf]}
>>> read_json(os.path.join(d, "missing.json"))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
milp_parallel.errors.FormatError: ...missing.json: no such file (expected a JSON document)
"""

from __future__ import annotations

import difflib
import errno
import gzip
import json
import math
import os
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .errors import FileWriteError, FormatError

__all__ = [
    "NONFINITE", "encode", "decode", "read_bytes", "read_text", "read_json", "loads", "dumps",
    "write_json", "write_text", "read_document", "read_jsonl", "Fields", "describe_type",
    "suggest",
]

#: The strings that stand for the non-finite floats, on write and on read.
NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}

_GZIP_MAGIC = b"\x1f\x8b"


# ---------------------------------------------------------------------- values
def encode(x: Any) -> Any:
    """JSON-ready data: numpy values become Python's, tuples lists, non-finite floats strings.

    Mapping keys become strings; other objects are written as their ``repr``.

    Examples
    --------
    >>> import numpy as np
    >>> encode({"a": np.array([1.0, np.inf]), "b": (np.int64(2), float("nan"))})
    {'a': [1.0, 'inf'], 'b': [2, 'nan']}
    """
    if isinstance(x, Mapping):
        return {str(k): encode(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [encode(v) for v in x]
    if isinstance(x, np.ndarray):
        return encode(x.tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if x is None or isinstance(x, str):
        return x
    if isinstance(x, os.PathLike):
        return os.fspath(x)
    return repr(x)


def decode(x: Any) -> Any:
    """Inverse of :func:`encode` for the non-finite strings (other values unchanged).

    Examples
    --------
    >>> decode(["inf", "-inf", 1, "x"])
    [inf, -inf, 1, 'x']
    """
    if isinstance(x, dict):
        return {k: decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [decode(v) for v in x]
    if isinstance(x, str) and x in NONFINITE:
        return NONFINITE[x]
    return x


def a(what: str) -> str:
    """``what`` with its indefinite article: ``a problem file``, ``an IOPDDL file``."""
    return f"{'an' if what[:1].lower() in 'aeio' or what.startswith('IOPDDL') else 'a'} {what}"


def suggest(word: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the known word nearest ``word``, or ``""`` when none is.

    Examples
    --------
    >>> suggest("paddin", ["padding", "stride"])
    "; did you mean 'padding'?"
    >>> suggest("zzz", ["padding", "stride"])
    ''
    """
    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1, cutoff=0.6)
    if not close:
        lower = {str(k).lower(): str(k) for k in known}
        close = [lower[str(word).lower()]] if str(word).lower() in lower else []
    return f"; did you mean {close[0]!r}?" if close else ""


def describe_type(x: Any) -> str:
    """A short description of a JSON value for error messages: ``a string ('abc')``."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return f"a boolean ({str(x).lower()})"
    if isinstance(x, (int, float)):
        text = repr(x)
        return f"a number ({text if len(text) <= 24 else text[:20] + '...'})"
    if isinstance(x, str):
        text = x if len(x) <= 24 else x[:20] + "..."
        return f"a string ({text!r})"
    if isinstance(x, (list, tuple)):
        return f"a list of {len(x)}"
    if isinstance(x, Mapping):
        return "an object"
    return type(x).__name__


# ---------------------------------------------------------------------- reading
def read_bytes(path: str | os.PathLike, *, what: str = "file") -> bytes:
    """The content of a file, gunzipped when it is gzip data (whatever its name).

    Parameters
    ----------
    path : path
    what : str
        What the file should be (``"problem file"``), for messages.

    Raises
    ------
    FormatError
        Missing file, a directory, no permission, another OS error, or gzip data that is
        truncated or corrupt; the message starts with the path.
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise FormatError(f"{p}: no such file (expected {a(what)})") from None
    except IsADirectoryError:
        raise FormatError(f"{p}: is a directory, not {a(what)}") from None
    except PermissionError:
        raise FormatError(f"{p}: permission denied (cannot read this {what})") from None
    except OSError as exc:
        raise FormatError(f"{p}: cannot read ({exc.strerror or exc})") from None
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise FormatError(f"{p}: corrupt or truncated gzip data ({exc}); the {what} "
                              "cannot be read, write it again") from None
    return raw


def read_text(path: str | os.PathLike, *, what: str = "file") -> str:
    """The content of a text file (UTF-8; gzip-compressed or not).

    Raises
    ------
    FormatError
        As :func:`read_bytes`, or when the content is binary (not UTF-8 text).
    """
    raw = read_bytes(path, what=what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: binary data, not UTF-8 text (byte {exc.start}); expected "
                          f"{a(what)}") from None
    if "\x00" in text:
        raise FormatError(f"{path}: binary data (holds NUL bytes); expected {a(what)}")
    return text.removeprefix("\ufeff")


def _loads(text: str, source: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"{source}: not valid JSON (line {exc.lineno}, column {exc.colno}: "
                          f"{exc.msg}); expected {a(what)}") from None
    except RecursionError:
        raise FormatError(f"{source}: JSON nested too deeply to be {a(what)}") from None
    except ValueError as exc:  # Python's own limit on integer digits (4300)
        raise FormatError(f"{source}: a number is too long ({exc}); expected {a(what)}"
                          ) from None


def read_json(path: str | os.PathLike, *, what: str = "JSON document") -> Any:
    """Parse a JSON file (gzip-compressed or not). Non-finite strings are NOT decoded.

    Raises
    ------
    FormatError
        As :func:`read_text`, when the text is not JSON, nests too deeply, or holds an
        integer of more than 4300 digits (Python's limit). Shorter integers beyond a field's
        range are refused by the reader of that field (:class:`Fields`).
    """
    return _loads(read_text(path, what=what), str(path), what)


def loads(text: str, *, source: str = "<json>", what: str = "JSON document") -> Any:
    """Parse JSON text with the same rules and errors as :func:`read_json`."""
    return _loads(text, source, what)


def read_document(path: str | os.PathLike | None = None, fmt: str = "", version: int = 1, *,
                  data: Any = None, what: str | None = None, hint: str = "") -> dict:
    """A JSON document of a given ``format`` and ``version``: read it (or check ``data``).

    Parameters
    ----------
    path : path, optional
        The file to read; omitted when ``data`` is given.
    fmt : str
        The expected ``"format"`` value, e.g. ``"milp_parallel.problem"``.
    version : int
        The version this library reads.
    data : object, optional
        Already-parsed data to check instead of a file (``path`` then only names it).
    what : str, optional
        Its name in messages (default: ``fmt``).
    hint : str
        Appended to the message of a wrong ``format`` (e.g. how to read other formats).

    Raises
    ------
    FormatError
        As :func:`read_json`, when the document is not an object, or its ``format`` or
        ``version`` is missing or not the one asked for.
    """
    what = what or fmt
    source = "<data>" if path is None else str(path)
    if data is None:
        data = read_json(path, what=what)
    if not isinstance(data, dict):
        raise FormatError(f"{source}: expected {a(what)} (a JSON object), got "
                          f"{describe_type(data)}")
    if data.get("format") != fmt:
        got = "no 'format' key" if "format" not in data else \
            f"'format' {describe_type(data['format'])}"
        raise FormatError(f"{source}: not a {fmt} document ({got}; expected "
                          f"\"format\": \"{fmt}\"){'; ' + hint if hint else ''}")
    v = data.get("version")
    if v != version or isinstance(v, bool):
        raise FormatError(f"{source}: unsupported version {v!r} of the {what} format (this "
                          f"library reads version {version})")
    return data


def read_jsonl(path: str | os.PathLike, *, what: str = "JSON-lines file",
               on_bad_line: Callable[[int, str], None] | None = None
               ) -> Iterator[Any]:
    """Yield the parsed lines of a JSON-lines file (blank lines skipped).

    A line that does not parse (e.g. torn by a killed writer) is passed to ``on_bad_line``
    with its number, or raises :class:`FormatError` naming the file and line when
    ``on_bad_line`` is ``None``.
    """
    text = read_text(path, what=what)
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield _loads(line, f"{path}, line {lineno}", what)
        except FormatError as exc:
            if on_bad_line is None:
                raise
            on_bad_line(lineno, str(exc))


# ---------------------------------------------------------------------- writing
def write_text(path: str | os.PathLike, text: str) -> None:
    """Write text atomically, gzip-compressed when the name ends in ``.gz``.

    Raises
    ------
    FileWriteError
        The path is a directory, its folder does not exist or is not a folder, there is no
        permission, or the disk is full; the message starts with the path.
    """
    p = Path(path)
    data = text.encode("utf-8")
    if p.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise FileWriteError(f"{p}: is a directory; give a file name to write to (e.g. "
                             f"{p / 'out.json'})")
    if not parent.is_dir():
        why = "is not a folder" if parent.exists() else "does not exist"
        raise FileWriteError(f"{p}: cannot write: the folder {parent} {why}; create it first "
                             "or write elsewhere")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
    except OSError as exc:
        _unlink(tmp)
        raise _write_error(p, exc) from None
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(tmp: str | None) -> None:
    if tmp is not None:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _write_error(p: Path, exc: OSError) -> FileWriteError:
    if isinstance(exc, PermissionError):
        why = "permission denied; write to a folder you may write to"
    elif exc.errno == errno.ENOSPC:
        why = "no space left on the device"
    elif isinstance(exc, IsADirectoryError):
        why = "it is a directory; give a file name"
    else:
        why = exc.strerror or str(exc)
    return FileWriteError(f"{p}: cannot write ({why})")


def dumps(doc: Any, *, indent: int | None = None) -> str:
    """:func:`encode` then JSON text (never ``NaN`` / ``Infinity``)."""
    return json.dumps(encode(doc), indent=indent, allow_nan=False)


def write_json(path: str | os.PathLike, doc: Any, *, indent: int | None = None) -> None:
    """Write ``doc`` (:func:`encode`-d) as JSON, atomically; gzip when the name ends in .gz."""
    write_text(path, dumps(doc, indent=indent) + "\n")


# ---------------------------------------------------------------------- typed fields
class Fields:
    """Typed access to the fields of a parsed document, with errors that name the field.

    Parameters
    ----------
    source : str
        The file (or ``"<dict>"``), the start of every message.

    Examples
    --------
    >>> f = Fields("p.json")
    >>> f.integer(3, "nodes[0].interval[1]")
    3
    >>> f.integer(1.5, "edges[2].u")
    Traceback (most recent call last):
    ...
    milp_parallel.errors.FormatError: p.json: edges[2].u must be an integer, got a number (1.5)
    """

    def __init__(self, source: str):
        self.source = source

    def error(self, where: str, message: str) -> FormatError:
        """A :class:`FormatError` ``"<source>: <where> <message>"``."""
        return FormatError(f"{self.source}: {where} {message}")

    def get(self, obj: Any, key: str, where: str, *, default: Any = ..., ) -> Any:
        """``obj[key]`` where ``obj`` must be an object; missing key: ``default`` or error."""
        if not isinstance(obj, Mapping):
            raise self.error(where or "the document", f"must be an object, got "
                                                      f"{describe_type(obj)}")
        if key not in obj:
            if default is ...:
                raise self.error(f"{where}.{key}" if where else key, "is missing")
            return default
        return obj[key]

    def keys(self, obj: Any, allowed: Iterable[str], where: str = "", *,
             required: Iterable[str] = (), hint: str = "") -> Mapping:
        """``obj``, which must be an object with only ``allowed`` keys and every ``required``.

        The one strict check of every reader: an unknown key is refused naming its path, the
        nearest known key (:func:`suggest`) and the known ones; a missing required key is
        refused naming it. ``allowed`` is best a (frozen) set (other iterables are turned
        into one): the check of a well-formed object is one C-level subset test, cheap
        enough for 10**5 objects.

        Parameters
        ----------
        obj : object
            The parsed JSON value.
        allowed : iterable of str
            Every key the object may have (``required`` ones included).
        where : str
            The object's path (``"layers[3].attrs"``); ``""`` for the document itself.
        required : iterable of str
            Keys it must have.
        hint : str
            Appended to the unknown-key message (e.g. what the keys mean here).

        Raises
        ------
        FormatError
            Not an object, an unknown key or a missing one.

        Examples
        --------
        >>> f = Fields("p.json")
        >>> f.keys({"paddin": 1}, {"padding", "stride"}, "layers[3].attrs")
        Traceback (most recent call last):
        ...
        milp_parallel.errors.FormatError: p.json: layers[3].attrs.paddin is not a known key; \
did you mean 'padding'? known: padding, stride
        """
        if not isinstance(obj, Mapping):
            raise self.error(where or "the document", f"must be an object, got "
                                                      f"{describe_type(obj)}")
        if not isinstance(allowed, (set, frozenset)):
            allowed = frozenset(allowed)
        if not obj.keys() <= allowed:
            for key in obj:
                if key not in allowed:
                    path = f"{where}.{key}" if where else str(key)
                    known = ", ".join(sorted(allowed)) or "none (this object takes no keys)"
                    raise self.error(path, f"is not a known key{suggest(key, allowed) or ';'}"
                                           f" known: {known}{'; ' + hint if hint else ''}")
        for key in required:
            if key not in obj:
                raise self.error(f"{where}.{key}" if where else key, "is missing")
        return obj

    def records(self, items: Any, allowed: Iterable[str], where: str, *,
                required: Iterable[str] = ()) -> list:
        """:meth:`keys` for every object of the list ``items`` (``where[i]`` in messages).

        One pass of C-level set tests for a well-formed list (the 10**5 nodes of a large
        problem), :meth:`keys` on each object only to name the first bad one.
        """
        items = self.array(items, where)
        allowed = allowed if isinstance(allowed, (set, frozenset)) else frozenset(allowed)
        need = frozenset(required)
        if all(type(d) is dict and d.keys() <= allowed and need <= d.keys() for d in items):
            return items
        for i, d in enumerate(items):
            self.keys(d, allowed, f"{where}[{i}]", required=required)
        return items  # pragma: no cover - a bad object raised above

    def mapping(self, x: Any, where: str) -> Mapping:
        if not isinstance(x, Mapping):
            raise self.error(where, f"must be an object, got {describe_type(x)}")
        return x

    def array(self, x: Any, where: str, *, length: int | None = None) -> list:
        """``x`` must be a JSON list (of ``length`` items when given)."""
        if not isinstance(x, list):
            raise self.error(where, f"must be a list, got {describe_type(x)}")
        if length is not None and len(x) != length:
            raise self.error(where, f"must have {length} entries, got {len(x)}")
        return x

    def string(self, x: Any, where: str) -> str:
        if not isinstance(x, str):
            raise self.error(where, f"must be a string, got {describe_type(x)}")
        return x

    def boolean(self, x: Any, where: str) -> bool:
        if not isinstance(x, bool):
            raise self.error(where, f"must be true or false, got {describe_type(x)}")
        return x

    def integer(self, x: Any, where: str, *, minimum: int | None = None) -> int:
        """A JSON integer (``2.5``, ``2.0``, ``"2"`` and ``true`` are refused)."""
        if isinstance(x, bool) or not isinstance(x, int):
            raise self.error(where, f"must be an integer, got {describe_type(x)}")
        if abs(x) >= 2**63:
            raise self.error(where, f"is out of range: {str(x)[:24]} (at most 2**63 - 1)")
        if minimum is not None and x < minimum:
            raise self.error(where, f"must be >= {minimum}, got {x}")
        return int(x)

    def number(self, x: Any, where: str, *, finite: bool = False, minimum: float | None = None,
               positive: bool = False) -> float:
        """A number (``"inf"``, ``"-inf"``, ``"nan"`` strings decoded unless ``finite``)."""
        if isinstance(x, str) and x in NONFINITE:
            x = NONFINITE[x]
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise self.error(where, f"must be a number, got {describe_type(x)}")
        try:
            v = float(x)
        except OverflowError:
            raise self.error(where, "is too large a number") from None
        if math.isnan(v):
            raise self.error(where, "is NaN; give a number")
        if finite and math.isinf(v):
            raise self.error(where, f"must be a finite number, got {v}")
        if positive and not v > 0:
            raise self.error(where, f"must be > 0, got {v:g}")
        if minimum is not None and v < minimum:
            raise self.error(where, f"must be >= {minimum:g}, got {v:g}")
        return v

    def numbers(self, x: Any, where: str, *, ndim: int = 1, allow_inf: bool = True
                ) -> np.ndarray:
        """A float64 array of ``ndim`` (1 or 2) dimensions from (nested) JSON lists.

        Entries must be numbers (``"inf"`` too when ``allow_inf``); NaN, booleans, strings
        and numbers beyond float range are refused naming the entry; the rows of a table
        must have equal lengths. Lists of plain numbers take a fast path (big documents).
        """
        if ndim == 1:
            return self._vector(x, where, allow_inf)
        if not isinstance(x, list):
            raise self.error(where, f"must be a table (a list of lists of numbers), got "
                                    f"{describe_type(x)}")
        rows = [self._vector(r, f"{where}[{i}]", allow_inf) for i, r in enumerate(x)]
        if not rows:
            return np.zeros((0, 0))
        for i, r in enumerate(rows):
            if r.size != rows[0].size:
                raise self.error(f"{where}[{i}]", f"has {r.size} entries, row 0 has "
                                                  f"{rows[0].size} (a table's rows must be "
                                                  "equal)")
        return np.stack(rows)

    def _vector(self, x: Any, where: str, allow_inf: bool) -> np.ndarray:
        if not isinstance(x, list):
            raise self.error(where, f"must be a list of numbers, got {describe_type(x)}")
        if set(map(type, x)) <= {int, float}:
            try:
                a = np.array(x, dtype=np.float64)
            except OverflowError:
                a = None
            if a is not None and (not np.isnan(a).any() if allow_inf else np.isfinite(a).all()):
                return a
        out = np.empty(len(x))
        for i, v in enumerate(x):
            if isinstance(v, str) and v == "inf" and allow_inf:
                out[i] = math.inf
                continue
            out[i] = self.number(v, f"{where}[{i}]", finite=not allow_inf)
        return out


