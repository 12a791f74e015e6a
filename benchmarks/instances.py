"""The benchmarks' inputs: where their data lives, and the instances more than one script uses.

Where data lives (one rule):

* the repository's own inputs are in ``data/`` (:data:`DATA_DIR`: the published numbers, the
  ParaDL tables, IOPDDL's example and instance G), the committed measurements in
  ``benchmarks/results/`` (:data:`RESULTS_DIR`);
* inputs too large or not ours to commit are read from the project's shared folder beside
  the repository, ``../shared/reference/`` (:data:`REFERENCE_DIR`: the IOPDDL contest
  instances and results, :data:`IOPDDL_DIR`; Megatron-LM's Table 1, :data:`MEGATRON_TABLE`).
  A script that misses one says so and skips it;
* an IOPDDL instance is looked up in the shared folder first, then in ``data/``
  (:func:`iopddl_path`).

The generators have fixed seeds, so that a committed row can be measured again:
:func:`random_problem` (random chains and series-parallel graphs, on the edges of
:func:`chain_edges` and :func:`series_parallel_edges`), :func:`interval_chain` and
:func:`interval_dag` (Alpa-style interval memory under a binding budget) and
:func:`zoo_problem` (a zoo model on a cluster preset, with or without a binding budget).
:func:`machine` is the one line about this machine that every results file records;
:func:`write_csv` writes a table of rows (dicts, their values rounded by the caller) as a CSV.

Examples
--------
>>> from benchmarks.instances import random_problem
>>> p = random_problem("chain", 5, 3, budget=True)
>>> p.n_nodes, p.n_edges, p.has_budget
(5, 4, True)
"""

from __future__ import annotations

import csv
import math
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from milp_parallel.errors import InvalidOptionError
from milp_parallel.problem import Problem

__all__ = ["ROOT", "DATA_DIR", "RESULTS_DIR", "REFERENCE_DIR", "IOPDDL_DIR", "MEGATRON_TABLE",
           "iopddl_candidates", "iopddl_path", "iopddl_problem", "chain_edges",
           "series_parallel_edges", "random_problem", "interval_chain", "interval_dag",
           "zoo_problem", "machine", "write_csv"]

#: The repository's root (the folder holding ``benchmarks/``, ``data/`` and ``milp_parallel/``).
ROOT = Path(__file__).resolve().parents[1]
#: The repository's own inputs.
DATA_DIR = ROOT / "data"
#: The committed measurements (one CSV or markdown file per script).
RESULTS_DIR = ROOT / "benchmarks" / "results"
#: The project's shared reference data, beside the repository (not committed here).
REFERENCE_DIR = ROOT.parent / "shared" / "reference"
#: The IOPDDL contest's shared instances and final results.
IOPDDL_DIR = REFERENCE_DIR / "iopddl"
#: Megatron-LM's Table 1 (SC'21), with the columns of ``benchmarks/megatron.py``.
MEGATRON_TABLE = REFERENCE_DIR / "megatron" / "table1-dev.csv"


# ---------------------------------------------------------------------- IOPDDL
def iopddl_candidates(letter: str) -> tuple[Path, Path]:
    """Where IOPDDL instance ``letter`` is looked for, in order: the shared folder, ``data/``."""
    name = f"asplos-2025-iopddl-{letter}.json.gz"
    return IOPDDL_DIR / name, DATA_DIR / name


def iopddl_path(letter: str) -> Path | None:
    """The file of IOPDDL instance ``letter`` (the first of :func:`iopddl_candidates` that
    exists), or ``None`` when neither does."""
    return next((p for p in iopddl_candidates(letter) if p.is_file()), None)


def iopddl_problem(letter: str) -> Problem:
    """IOPDDL instance ``letter`` read as a Problem.

    Raises
    ------
    FileNotFoundError
        When neither candidate exists (the message names both).
    """
    path = iopddl_path(letter)
    if path is None:
        raise FileNotFoundError(f"IOPDDL instance {letter} not found in "
                                + ", ".join(map(str, iopddl_candidates(letter))))
    return Problem.from_iopddl(path)


# ---------------------------------------------------------------------- random graphs
def chain_edges(n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """A path of ``n`` nodes (``rng`` unused: the same signature as the other graphs)."""
    return [(i, i + 1) for i in range(n - 1)]


def series_parallel_edges(n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """Blocks: fork -> 2-3 branches of 1-2 nodes -> join (the join forks the next block)."""
    edges = []
    fork, nxt = 0, 1
    while nxt < n:
        branches = int(rng.integers(2, 4))
        join_needed = []
        for _ in range(branches):
            length = int(rng.integers(1, 3))
            prev = fork
            for _ in range(length):
                if nxt >= n - 1:
                    break
                edges.append((prev, nxt))
                prev, nxt = nxt, nxt + 1
            if prev != fork:
                join_needed.append(prev)
        if nxt >= n:
            break
        join = nxt
        nxt += 1
        for p in join_needed or [fork]:
            edges.append((p, join))
        fork = join
    return edges


def random_problem(kind: str, n: int, k: int, *, budget: bool, seed: int = 0) -> Problem:
    """A random ``kind`` (``"chain"`` or ``"sp"``) problem with ``n`` nodes, ``k`` configs.

    Costs look like layer costs: node compute falls with the config index, edge tables are 0
    on the diagonal (same layout) and positive elsewhere; memory falls as compute rises. With
    ``budget``, an all-live budget 30% of the way from the least to the largest total memory.
    """
    graphs = {"chain": chain_edges, "sp": series_parallel_edges}
    if kind not in graphs:
        raise InvalidOptionError(f"random_problem: kind {kind!r} is not one of "
                                 f"{sorted(graphs)}; give 'chain' or 'sp'")
    rng = np.random.default_rng(seed)
    edges = graphs[kind](n, rng)
    base = rng.uniform(1, 10, n)
    node = [base[v] * rng.uniform(0.5, 1.5, k) * np.linspace(1, 0.2, k) for v in range(n)]
    etabs = []
    for _ in edges:
        t = rng.uniform(0.1, 2.0, (k, k))
        np.fill_diagonal(t, 0.0)
        etabs.append(t)
    mem = [rng.uniform(1, 2, k) * np.linspace(0.2, 1, k) for _ in range(n)]
    limit = None
    if budget:
        lo = sum(m.min() for m in mem)
        hi = sum(m.max() for m in mem)
        limit = lo + 0.3 * (hi - lo)
    return Problem(node, edges, etabs, memory=mem, memory_limit=limit)


# ---------------------------------------------------------------------- interval memory
def _costs(rng: np.random.Generator, n: int, k: int, n_edges: int):
    """Node costs, edge tables and memory in the style of Alpa's ILP.

    Compute falls and memory rises with the strategy index; resharding a tensor costs its
    size times the cost of the layout change, one ``k x k`` matrix (0 on the diagonal) shared
    by every edge, as between the sharding specs of one mesh.
    """
    base = rng.uniform(1, 10, n)
    node = [base[v] * rng.uniform(0.5, 1.5, k) * np.linspace(1, 0.2, k) for v in range(n)]
    change = rng.uniform(0.1, 2.0, (k, k))
    np.fill_diagonal(change, 0.0)
    tabs = [rng.uniform(0.5, 2.0) * change for _ in range(n_edges)]
    mem = [rng.uniform(1, 2, k) * np.linspace(0.2, 1, k) for _ in range(n)]
    return node, tabs, mem


def _binding(problem: Problem, share: float) -> Problem:
    """The problem with a budget ``share`` of the way from the least peak to the peak of the
    unconstrained optimum (found by the exact search), as :func:`zoo_problem`."""
    from milp_parallel.solvers import solve_problem
    from milp_parallel.solvers.memory import least_memory

    free = solve_problem(problem, "dp")
    peak = float(problem.evaluate(free.assignment).peak_memory.max())
    least = float(least_memory(problem).max())
    return problem.with_memory_limit(least + share * (peak - least))


def interval_chain(n: int = 200, k: int = 16, *, seed: int = 0, share: float = 0.5) -> Problem:
    """A chain of ``n`` layers x ``k`` strategies with Alpa-style interval memory (each tensor
    live from its layer until ``1 + L`` steps later, ``L`` uniform in ``[1, 4]``) and a binding
    budget (``share`` of the way from the least peak to the unconstrained optimum's)."""
    rng = np.random.default_rng(seed)
    edges = [(i, i + 1) for i in range(n - 1)]
    node, tabs, mem = _costs(rng, n, k, len(edges))
    span = rng.integers(1, 5, n)
    intervals = [(i, min(n, i + 1 + int(s))) for i, s in enumerate(span)]
    return _binding(Problem(node, edges, tabs, memory=mem, intervals=intervals), share)


def interval_dag(n: int = 60, k: int = 8, *, seed: int = 0, share: float = 0.5) -> Problem:
    """A DAG of ``n`` nodes x ``k`` strategies with interval memory and a binding budget.

    Every node consumes its predecessor and, with probability 0.5, one earlier node within 8
    steps; each tensor lives until its last consumer (at least ``1 + L`` steps, ``L`` uniform
    in ``[1, 12]``). The budget is as in :func:`interval_chain`.
    """
    rng = np.random.default_rng(seed)
    edges = [(i - 1, i) for i in range(1, n)]
    for v in range(2, n):
        if rng.random() < 0.5:
            u = int(rng.integers(max(0, v - 8), v - 1))
            edges.append((u, v))
    edges.sort()
    node, tabs, mem = _costs(rng, n, k, len(edges))
    last = np.arange(n) + 1
    for u, v in edges:
        last[u] = max(last[u], v + 1)
    span = rng.integers(1, 13, n)
    intervals = [(i, min(n, max(int(last[i]), i + 1 + int(s)))) for i, s in enumerate(span)]
    return _binding(Problem(node, edges, tabs, memory=mem, intervals=intervals), share)


# ---------------------------------------------------------------------- the zoo
def zoo_problem(model: str, devices: int, budget: bool, cluster: str = "abci"
                ) -> Problem | None:
    """A zoo model's problem on ``cluster``, without a budget or with a binding one.

    The binding budget is halfway between the least memory of the most loaded device (the
    one whose least memory is largest) and the unconstrained optimum's peak there, the same
    on every device. Returns ``None`` when it cannot bind (the unconstrained optimum already
    uses the least memory on that device).
    """
    from milp_parallel import make_problem
    from milp_parallel.solvers import solve_problem
    from milp_parallel.solvers.memory import least_memory

    p = make_problem(model, cluster, devices=devices, memory_limit=math.inf)
    if not budget:
        return p
    free = solve_problem(p, "dp")
    peak = p.evaluate(free.assignment).peak_memory
    least = least_memory(p)
    d = int(np.argmax(least))
    if peak[d] <= least[d]:
        return None
    return p.with_memory_limit(0.5 * (least[d] + peak[d]))


# ---------------------------------------------------------------------- the machine
def machine() -> str:
    """One line about this machine: cores, memory, CPU model, Python."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       cpu)
    except OSError:
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        mem_s = f"{mem:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        mem_s = "? GiB"
    return f"{os.cpu_count()} cores, {mem_s}, {cpu}, Python {platform.python_version()}"


# ---------------------------------------------------------------------- the results files
def write_csv(path: str | Path, rows: Sequence[Mapping[str, object]]) -> Path:
    """Write ``rows`` to ``path`` as a CSV: a header of the first row's keys in their order,
    then one line per row (:class:`csv.DictWriter`, ``newline=""``, so ``\r\n`` line ends;
    ``None`` as an empty field, numbers as ``str`` writes them: the caller rounds). The
    folder is created if absent; the file is overwritten.

    Raises
    ------
    ValueError
        If ``rows`` is empty (there is no header to write) or a row has a key the first
        row lacks.
    """
    if not rows:
        raise ValueError(f"no rows to write to {path}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path
