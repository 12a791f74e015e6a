"""Redirect the C-level standard output (file descriptor 1) for a while.

Solver libraries write to the process's fd 1 directly, not through ``sys.stdout``: HiGHS
prints its banner when a ``Highs`` object is constructed, whatever its options. This keeps
such output out of a library user's stdout and out of the command line's ``--json``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

__all__ = ["c_stdout_to"]


@contextlib.contextmanager
def c_stdout_to(target_fd: int | None = None) -> Iterator[None]:
    """Point fd 1 at ``target_fd`` (``None``: the null device) inside the ``with`` block.

    Does nothing when the process has no real fd 1 (e.g. output captured in-process).
    """
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY) if target_fd is None else None
    try:
        os.dup2(null if target_fd is None else target_fd, 1)
        yield
    finally:
        try:
            sys.stdout.flush()
        except ValueError:
            pass
        os.dup2(saved, 1)
        os.close(saved)
        if null is not None:
            os.close(null)
