"""Running a sweep: :func:`run_sweep` runs its items in parallel; the results file, read back.

Imports :mod:`.kinds`, :mod:`.items` and :mod:`.spec` (for :class:`~.spec.Sweep`), of
``sweep/``; outside it :mod:`milp_parallel.errors` and :mod:`milp_parallel.io`, and, lazily,
tqdm and dask.distributed when asked for.

Execution
---------
Each item runs in its own Python process (:func:`milp_parallel.isolation.run_isolated`: a
crash, a memory blow-up or a ``SIGKILL`` of that process marks only that item ``failed``),
started by a thread of a local pool (``jobs`` at a time) or by a task on a Dask distributed
cluster (``scheduler``), through the :class:`concurrent.futures.Executor` interface either
way. The parent alone appends results, one line per item, each with one ``write`` + ``fsync``
under a lock.

Result lines carry ``status``, one of :data:`~milp_parallel.sweep.kinds.ITEM_STATUSES`;
readers take the last line per ``id`` (:func:`read_results`), so a retried item's new line
supersedes the old one.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..errors import FileWriteError, FormatError, InvalidOptionError
from .items import _failure, run_item_isolated
from .kinds import FAILED, FAILED_STATUSES, SweepItem
from .spec import Sweep

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepSummary:
    """What :func:`run_sweep` did."""

    total: int
    skipped: int
    done: int
    failed: int
    seconds: float
    out: str

    def __str__(self) -> str:
        return (f"{self.total} items: {self.done} ran, {self.failed} of them failed, "
                f"{self.skipped} already done; {self.seconds:.1f}s; results in {self.out}")



# ---------------------------------------------------------------------- results file
def read_results(path: str | Path) -> dict[str, dict]:
    """The last record per item id in a results file (``{}`` if the file does not exist).

    Lines that do not parse (a torn write of a killed process) are skipped with a warning.

    Raises
    ------
    FormatError
        If the path exists but cannot be read as text (a directory, a binary file), or no
        line of a non-empty file is a result record.
    """
    return {key: rec for key, (_, rec) in result_lines(path).items()}


def result_lines(path: str | Path, skipped: list[str] | None = None
                 ) -> dict[str, tuple[int, dict]]:
    """As :func:`read_results`, with the line number of each record: ``{id: (line, rec)}``.

    For readers whose messages name the line of a bad field (:mod:`milp_parallel.report`).
    Given a list ``skipped``, the unreadable lines are appended to it instead of logged.
    """
    from ..io import loads, read_text
    path = Path(path)
    out: dict[str, tuple[int, dict]] = {}
    if not path.exists():
        return out
    what = "results file (JSON lines)"
    bad: list[str] = []
    for lineno, line in enumerate(read_text(path, what=what).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = loads(line, source=f"{path}, line {lineno}", what=what)
        except FormatError as exc:
            bad.append(str(exc))
            continue
        if isinstance(rec, dict) and isinstance(rec.get("id"), str):
            out[rec["id"]] = (lineno, rec)
        else:
            bad.append(f"{path}, line {lineno}: not a result record (an object with an 'id')")
    if bad and not out:
        raise FormatError(f"{path}: not a results file: no line is a result record ({bad[0]}); "
                          "give another file")
    if bad and skipped is not None:
        skipped.extend(bad)
    elif bad:
        logger.warning("%s: skipped %d unreadable line(s)", path, len(bad))
    return out


def _make_folder(folder: Path, what: str) -> None:
    """``mkdir -p folder``, or a :class:`FileWriteError` naming the folder and why not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return
    except (FileExistsError, NotADirectoryError):  # the folder or one above it is a file
        file = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()),
                    folder)
        why = f"{file} is a file, not a folder"
    except OSError as exc:
        why = exc.strerror or str(exc)
    raise FileWriteError(f"{folder}: cannot create the folder for {what} ({why}); give "
                         "another path") from None


class _Appender:
    """Appends one JSON line per record: one write, flush, fsync, under a thread lock and an
    advisory file lock (so two sweeps on one file do not interleave)."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        _make_folder(path.parent, f"the results file {path}")
        # A killed writer may have left a torn last line: start ours on a fresh line.
        if path.exists() and path.stat().st_size:
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    self._write(b"\n")
        else:
            self._write(b"")  # the results file can be written: found before any item runs

    def _write(self, data: bytes) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            why = "permission denied" if isinstance(exc, PermissionError) else \
                exc.strerror or str(exc)
            raise FileWriteError(f"{self.path}: cannot write the results file ({why}); give "
                                 "another --out path") from None
        try:
            try:
                import fcntl
                fcntl.flock(fd, fcntl.LOCK_EX)
            except ImportError:  # pragma: no cover - not POSIX
                pass
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)

    def append(self, record: Mapping) -> None:
        from ..io import dumps
        line = dumps(record) + "\n"
        with self._lock:
            self._write(line.encode())


# ---------------------------------------------------------------------- the runner
class _Progress:
    def __init__(self, total: int, enabled: bool | None):
        self.total, self.done, self.failed = total, 0, 0
        self.t0 = time.perf_counter()
        self.bar = None
        if enabled is None:
            enabled = sys.stderr.isatty()
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="item", dynamic_ncols=True, file=sys.stderr)
            except ImportError:
                logger.info("tqdm is not installed (pip install milp_parallel[progress]); "
                            "logging progress instead")

    def update(self, item: SweepItem, rec: Mapping) -> None:
        self.done += 1
        if rec["status"] in FAILED_STATUSES:
            self.failed += 1
        if self.bar is not None:
            self.bar.set_postfix(failed=self.failed, refresh=False)
            self.bar.update(1)
        else:
            elapsed = time.perf_counter() - self.t0
            eta = elapsed / self.done * (self.total - self.done)
            obj = rec.get("objective")
            logger.info("[%d/%d] %s %s: %s%s (%.1fs; elapsed %.0fs, eta %.0fs)%s", self.done,
                        self.total, item.id, item.label(), rec["status"],
                        "" if obj is None else f" objective={obj:.6g}",
                        rec.get("wall_seconds") or 0.0, elapsed, eta,
                        f" error: {rec['error']}" if rec["status"] in FAILED_STATUSES else "")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_sweep(items: Sweep | Sequence[SweepItem], out: str | Path, *, jobs: int | None = None,
              scheduler: Any = None, retry_failed: bool = False,
              progress: bool | None = None,
              on_result: Callable[[dict], None] | None = None) -> SweepSummary:
    """Run the items not yet in ``out``, in parallel, appending one JSON line each.

    Parameters
    ----------
    items : Sweep or sequence of SweepItem
    out : path
        The results file (JSON lines). Items whose id already has a line there are skipped,
        except failed ones when ``retry_failed``.
    jobs : int, optional
        Items at once on the local pool; default the number of CPU cores.
    scheduler : str or distributed.Client, optional
        A Dask scheduler address (``tcp://host:port``) or a Client: run the items as tasks on
        that cluster (each still in its own process on the worker) instead of locally. Needs
        ``pip install milp_parallel[dask]``.
    retry_failed : bool
        Re-run items whose last record is ``failed`` or ``timeout``.
    progress : bool, optional
        A tqdm bar (``True``), log lines (``False``), or a bar only on a terminal (``None``).
    on_result : callable, optional
        Called with each new record (in the parent), after it is written.

    Returns
    -------
    SweepSummary

    Raises
    ------
    SolverUnavailableError
        If ``scheduler`` is given but dask.distributed is not installed.
    """
    all_items = list(items.items if isinstance(items, Sweep) else items)
    out = Path(out)
    previous = read_results(out)
    todo = []
    for it in all_items:
        rec = previous.get(it.id)
        if rec is None or (retry_failed and rec.get("status") in FAILED_STATUSES):
            todo.append(it)
    skipped = len(all_items) - len(todo)
    if skipped:
        logger.info("%s: %d of %d items already done, skipping them", out, skipped,
                    len(all_items))
    t0 = time.perf_counter()
    appender = _Appender(out)
    bar = _Progress(len(todo), progress)
    client = None
    own_client = False
    if scheduler is not None and todo:
        try:
            from distributed import Client
        except ImportError:
            from ..errors import SolverUnavailableError
            raise SolverUnavailableError("running a sweep on a Dask cluster needs "
                                         "dask.distributed: pip install milp_parallel[dask]"
                                         ) from None
        if isinstance(scheduler, Client):
            client = scheduler
        else:
            try:
                client = Client(scheduler)
            except (ValueError, TypeError, OSError) as exc:  # a bad address, no scheduler
                raise InvalidOptionError(
                    f"scheduler {scheduler!r:.80}: cannot connect ({exc}); give the address "
                    "of a running Dask scheduler, e.g. tcp://HOST:8786") from None
            own_client = True
        executor: cf.Executor = client.get_executor(pure=False)
        logger.info("running %d items on the Dask cluster at %s", len(todo),
                    client.scheduler.address)
    else:
        n = jobs or os.cpu_count() or 1
        executor = cf.ThreadPoolExecutor(max_workers=max(1, n),
                                         thread_name_prefix="milp_parallel-sweep")
        if todo:
            logger.info("running %d items, %d at a time", len(todo), n)
    failed = 0
    try:
        futures = {executor.submit(run_item_isolated, it): it for it in todo}
        for fut in cf.as_completed(futures):
            it = futures[fut]
            try:
                rec = fut.result()
            except Exception as exc:  # noqa: BLE001 - e.g. a Dask worker lost
                rec = _failure(it, FAILED, f"{type(exc).__name__}: {exc}", 0.0)
            appender.append(rec)
            if rec["status"] in FAILED_STATUSES:
                failed += 1
            bar.update(it, rec)
            if on_result is not None:
                on_result(rec)
    finally:
        bar.close()
        if client is not None:
            executor.shutdown(wait=True)
        else:
            executor.shutdown(wait=True, cancel_futures=True)
        if own_client:
            client.close()
    return SweepSummary(total=len(all_items), skipped=skipped, done=len(todo), failed=failed,
                        seconds=time.perf_counter() - t0, out=str(out))
