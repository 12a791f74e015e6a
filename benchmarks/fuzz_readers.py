"""Fuzz every reader for longer than CI does: "a typed error or a valid result", or a report.

Runs the targets of ``tests/fuzzing.py`` (one per reader: our problem JSON, IOPDDL, layer
graphs, topologies, plans, sweep results, sweep TOML, ParaDL tables / platforms / masks,
ONNX) with hypothesis, ``--examples`` inputs each (random, not the CI's fixed seed), and
prints one row per target: inputs tried, how many gave a typed error (or a non-zero exit for
``cli``: command lines drawn from bad values and paths), seconds, and the first input that
raised anything else, with where.

    python -m benchmarks.fuzz_readers                      # every target, 2000 inputs each
    python -m benchmarks.fuzz_readers --target iopddl --examples 20000
    python -m benchmarks.fuzz_readers --profile            # also ProfileTable.load
    python -m benchmarks.fuzz_readers --target cli         # command lines (in-process)

``--profile`` adds ``ProfileTable.load`` (profile.py), which does not go through the one I/O
layer yet (see ``milp_parallel/io.py``): it is expected to report failures until it does.
With ``atheris`` installed, ``--atheris TARGET`` runs coverage-guided fuzzing of one target's
raw bytes instead (``pip install atheris``; Ctrl-C to stop).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import traceback
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from benchmarks.instances import DATA_DIR
from tests.fuzzing import (
    TARGETS,
    Target,
    check_cli,
    cli_arguments,
    json_files,
    path_cases,
    run_target,
)


def _profile_target() -> Target:
    from milp_parallel.measure.profile import ProfileEntry, ProfileTable

    doc = ProfileTable((ProfileEntry("conv", "sig", (2, 3, 4, 4), "float32", "cpu", 1e-4),),
                       dtype="float32", device="cpu").to_dict()

    def read(p):
        return ProfileTable.load(p)

    return Target("profile", lambda: json_files(doc), read)


def fuzz_cli(examples: int) -> dict:
    """Command lines: exit 0, 1 or 2 with one error line, never an internal error."""
    import tempfile
    tmp = Path(tempfile.mkdtemp(prefix="milp_parallel_fuzz_cli_"))
    files = [str(p) for p in path_cases(tmp)] + [str(DATA_DIR / "iopddl_example.json")]
    seen = {"n": 0, "typed": 0, "failure": None}

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(cli_arguments(files))
    def one(argv):
        seen["n"] += 1
        seen["typed"] += check_cli(argv) != 0

    return _run(one, seen)


def fuzz(target: Target, examples: int) -> dict:
    """Run one target; return counts and the first failure."""
    seen = {"n": 0, "typed": 0, "failure": None}

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(target.files())
    def one(case):
        seen["n"] += 1
        content, suffix = case
        if run_target(target, content, suffix) is None:
            seen["typed"] += 1

    return _run(one, seen)


def _run(one, seen: dict) -> dict:
    t0 = time.perf_counter()
    try:
        one()
    except Exception as exc:  # noqa: BLE001 - the finding we report
        where = traceback.extract_tb(exc.__traceback__)[-1]
        first = (str(exc).splitlines() or [""])[0][:100]
        seen["failure"] = (f"{type(exc).__name__}: {first} "
                           f"({Path(where.filename).name}:{where.lineno})")
    seen["seconds"] = time.perf_counter() - t0
    return seen


def _atheris(target: Target) -> None:  # pragma: no cover - manual use
    import atheris

    def one(data: bytes) -> None:
        run_target(target, data, ".json")

    atheris.Setup(sys.argv[:1], one)
    atheris.Fuzz()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", action="append", choices=sorted(TARGETS) + ["profile", "cli"],
                    help="fuzz only these readers (repeatable; default: all)")
    ap.add_argument("--examples", type=int, default=2000, help="inputs per target")
    ap.add_argument("--profile", action="store_true", help="also fuzz ProfileTable.load")
    ap.add_argument("--atheris", metavar="TARGET", help="coverage-guided fuzzing of one target")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)   # readers log skipped lines as warnings
    targets = dict(TARGETS)
    if args.profile or (args.target and "profile" in args.target):
        targets["profile"] = _profile_target()
    if args.atheris:
        _atheris(targets[args.atheris])
        return 0
    names = args.target or sorted(targets) + ["cli"]
    print(f"{'target':16s} {'inputs':>7s} {'typed':>7s} {'seconds':>8s}  first failure")
    failed = 0
    for name in names:
        r = fuzz_cli(args.examples) if name == "cli" else fuzz(targets[name], args.examples)
        failed += r["failure"] is not None
        print(f"{name:16s} {r['n']:>7d} {r['typed']:>7d} {r['seconds']:>8.1f}  "
              f"{r['failure'] or '-'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
