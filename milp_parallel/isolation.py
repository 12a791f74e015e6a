"""Run one function in a fresh Python process, killed at a wall-clock limit.

The one process-isolation runner of the package: benchmark sweeps
(:mod:`milp_parallel.sweep`) run every item through it, and so does the papers'
reproduction (``benchmarks/reproduce.py``). A crash, a memory blow-up (the OOM killer's
``SIGKILL``) or a hang of the function ends only its own process, and comes back as a result
with a status, never as an exception in the caller.

The function is named by reference (``"package.module:function"``, or a module-level
function object) and imported again in the child, which gets the parent's ``sys.path``; its
arguments and return value travel pickled. A fresh interpreter (not a fork) is used, so the
child shares no thread pool or lock state with the parent (HiGHS keeps a process-wide thread
pool that a forked child inherits broken), and it works from inside Dask workers, whose
daemonic processes may not fork children with :mod:`multiprocessing`.

Statuses: :data:`RETURNED` (the function returned; :attr:`IsolatedResult.value` holds what),
:data:`FAILED` (it raised, or the process died: the error names the exception, or the signal
or exit code and the end of its stderr), :data:`TIMEOUT` (killed at the limit).

Examples
--------
>>> r = run_isolated("math:sqrt", 16.0)
>>> r.status, r.value
('returned', 4.0)
>>> run_isolated("math:sqrt", -1.0).error
'ValueError: math domain error'
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import InvalidOptionError

__all__ = ["run_isolated", "IsolatedResult", "function_ref", "RETURNED", "FAILED", "TIMEOUT"]

#: The function returned.
RETURNED = "returned"
#: The function raised, or its process died (crash, signal, non-zero exit).
FAILED = "failed"
#: The process ran past its wall-clock limit and was killed.
TIMEOUT = "timeout"

#: Lines of the child's stderr kept in a failure's message.
_STDERR_LINES = 3


@dataclass(frozen=True)
class IsolatedResult:
    """What became of a function run by :func:`run_isolated`.

    Attributes
    ----------
    status : str
        :data:`RETURNED`, :data:`FAILED` or :data:`TIMEOUT`.
    value : object
        The function's return value (``None`` unless ``RETURNED``).
    error : str
        Why it did not return (``""`` when it did).
    seconds : float
        Wall-clock time, process start included.
    """

    status: str
    value: Any = None
    error: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether the function returned."""
        return self.status == RETURNED


def function_ref(fn: Callable | str) -> str:
    """``"module:qualname"`` of a module-level function (a string is checked and returned).

    Raises
    ------
    InvalidOptionError
        For a lambda, a nested function or a string without ``":"``: the child process could
        not import it.
    """
    if isinstance(fn, str):
        if ":" not in fn:
            raise InvalidOptionError(f"function reference {fn!r} must be 'module:function'")
        return fn
    module, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or "<" in qual or module == "__main__":
        raise InvalidOptionError(
            f"{fn!r} cannot run in another process: give a function defined at the top level "
            "of an importable module (not a lambda, a nested function or __main__)")
    return f"{module}:{qual}"


def _resolve(ref: str) -> Callable:
    module, _, qual = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


def run_isolated(fn: Callable | str, *args: Any, kill_after: float | None = None,
                 env: dict[str, str] | None = None) -> IsolatedResult:
    """Call ``fn(*args)`` in a fresh Python process; kill it after ``kill_after`` seconds.

    Parameters
    ----------
    fn : callable or str
        A module-level function, or its ``"module:function"`` reference.
    *args
        Picklable arguments.
    kill_after : float, optional
        Wall-clock limit in seconds (``None``: none).
    env : dict, optional
        Extra environment variables for the child.

    Returns
    -------
    IsolatedResult
        Never raises for what happens in the child.
    """
    ref = function_ref(fn)
    t0 = time.perf_counter()
    payload = pickle.dumps({"path": list(sys.path), "ref": ref, "args": args},
                           protocol=pickle.HIGHEST_PROTOCOL)
    pkg_parent = str(Path(__file__).resolve().parent.parent)
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = os.pathsep.join(
        x for x in (pkg_parent, child_env.get("PYTHONPATH")) if x)
    child_env.update(env or {})
    with tempfile.TemporaryDirectory(prefix="milp_parallel_run_") as tmp:
        out = os.path.join(tmp, "result.pickle")
        cmd = [sys.executable, "-c", "from milp_parallel.isolation import _child; _child()",
               out]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env=child_env, cwd=tmp)
        try:
            _, err = proc.communicate(payload, timeout=kill_after)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return IsolatedResult(TIMEOUT, error=f"killed after the hard limit of "
                                                 f"{kill_after:g}s",
                                  seconds=time.perf_counter() - t0)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0 or not os.path.exists(out):
            if proc.returncode < 0:
                why = f"worker process killed by {_signal_name(-proc.returncode)}"
            else:
                why = f"worker process exited with code {proc.returncode}"
            tail = err.decode(errors="replace").strip().splitlines()[-_STDERR_LINES:]
            if tail:
                why += ": " + " | ".join(tail)
            return IsolatedResult(FAILED, error=why, seconds=seconds)
        with open(out, "rb") as f:
            kind, value = pickle.load(f)
    if kind == "raised":
        return IsolatedResult(FAILED, error=value, seconds=seconds)
    return IsolatedResult(RETURNED, value=value, seconds=seconds)


def _child() -> None:  # pragma: no cover - runs in the child process
    """Child-process entry: read the call from stdin, write its outcome to ``argv[1]``."""
    import logging
    logging.basicConfig(level=logging.WARNING)
    out = sys.argv[1]
    call = pickle.loads(sys.stdin.buffer.read())
    sys.path[:] = call["path"]
    try:
        outcome = ("returned", _resolve(call["ref"])(*call["args"]))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as the failure
        outcome = ("raised", f"{type(exc).__name__}: {exc}")
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(outcome, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, out)
