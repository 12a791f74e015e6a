"""The ``milp-parallel`` command line.

Subcommands: ``solve`` (a model on a cluster), ``problem`` (a Problem file), ``oracle``
(ParaDL's analytical model, including ParaDL's own arguments with ``--paradl``), ``sweep``
and ``report`` (benchmark grids and their plots), ``models`` and ``clusters`` (what is
available).

Exit codes: 0 success; 1 infeasible, a failed cross-check, a solver failure, a missing
optional package, a failed sweep item; 2 bad usage: every other package error (an unknown
option, model, cluster, solver or strategy name, a bad option value, a file that is missing,
malformed or cannot be written). Errors are one line on stderr
(``milp-parallel: error: ...``) naming the input and how to fix it; ``--debug`` adds the
traceback. Only a bug (an error that is not a package error) says "internal error".
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import traceback
from pathlib import Path
from typing import Sequence

from . import errors
from ._fdio import c_stdout_to
from .cli_args import (
    _assignment,
    _count,
    _count_or_zero,
    _file_out,
    _int_range,
    _memory,
    _plot_out,
    _positive_float,
    _positive_int,
    _py2,
    _seconds,
    _size,
    _split_codes,
)
from .errors import FormatError, MilpParallelError

__all__ = ["main", "build_parser", "exit_code", "EXIT_CODES"]

PROG = "milp-parallel"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

logger = logging.getLogger(__name__)

#: Exit code of every package error, looked up along the error's class hierarchy (the most
#: specific class wins): 1 for a run that failed (no answer fits, the answers disagree, a
#: solver or an optional package failed), 2 for every other package error: a user's mistake.
EXIT_CODES: dict[type, int] = {
    errors.MilpParallelError: EXIT_USAGE,            # a user-facing error unless listed as 1
    errors.InfeasibleError: EXIT_FAILED,
    errors.CrossCheckError: EXIT_FAILED,
    errors.SolverError: EXIT_FAILED,
    errors.MissingDependencyError: EXIT_FAILED,      # install the extra it names
    errors.UnknownNameError: EXIT_USAGE,
    errors.FormatError: EXIT_USAGE,
    errors.InvalidGraphError: EXIT_USAGE,
    errors.InvalidTopologyError: EXIT_USAGE,
    errors.InvalidProblemError: EXIT_USAGE,
    errors.InvalidAssignmentError: EXIT_USAGE,
    errors.InvalidOptionError: EXIT_USAGE,
    errors.UnsupportedProblemError: EXIT_USAGE,
    errors.ProblemTooLargeError: EXIT_USAGE,
    errors.SolverUnavailableError: EXIT_USAGE,       # a solver whose package is missing
}

#: The words the one-line message starts with, for the errors that need them.
_PREFIX = {errors.InfeasibleError: "infeasible: ", errors.CrossCheckError: ""}


def exit_code(exc: BaseException) -> int:
    """The exit code of ``milp-parallel`` for an error (see :data:`EXIT_CODES`).

    Examples
    --------
    >>> exit_code(errors.FormatError("x")), exit_code(errors.InfeasibleError("x"))
    (2, 1)
    """
    for cls in type(exc).__mro__:
        if cls in EXIT_CODES:
            return EXIT_CODES[cls]
    return EXIT_FAILED


class _UsageError(Exception):
    """Bad usage found after parsing (exit 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``milp-parallel: error: ...`` and exit code 2."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        hint = f" (see {self.prog} --help)"
        sys.stderr.write(f"{PROG}: error: {message}{hint}\n")
        raise SystemExit(EXIT_USAGE)


_EPILOG = """\
examples:
  milp-parallel models
  milp-parallel clusters
  milp-parallel solve alexnet --cluster optcnn --devices 4 --memory-limit 16GiB
  milp-parallel problem data/iopddl_example.json --solver highs --json
  milp-parallel oracle resnet50 --cluster abci --strategy data,filter --devices 4..1024
  milp-parallel oracle --paradl -net data/paradl/RESNET50_ImageNet_profall.net_sc \\
      -plat data/paradl/ABCI.plat --paratype d,f --cmaxp 1024 --cmaxB 262144 --cBon 32
  milp-parallel sweep sweeps/quick.toml --out results.jsonl --jobs 2
  milp-parallel report results.jsonl --out report/

exit codes: 0 ok; 1 infeasible, failed cross-check or failed run; 2 bad usage.
"""


#: Commands that left the installed package, with what to run instead.
_MOVED = {"reproduce": "'reproduce' is not a command of the installed package: the papers' "
                       "reproduction needs the source tree; run 'python -m benchmarks.reproduce "
                       "--quick' from the root of a source checkout"}


def _refuse_moved(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """A usage error (exit 2) saying what to run instead when ``argv``'s command moved out."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in _MOVED:
        parser.error(_MOVED[command])


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``milp-parallel`` (for documentation tools and tests)."""
    common = _Parser(add_help=False)
    common.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="log to stderr: -v info, -vv debug")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of an error")
    fmt = argparse.RawDescriptionHelpFormatter

    parser = _Parser(prog=PROG, formatter_class=fmt, epilog=_EPILOG,
                     description="Optimal layer-wise parallelization of neural-network "
                                 "training (MILP cross-checked by an exact graph search), "
                                 "ParaDL's oracle, and benchmark sweeps.")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log to stderr: -v info, -vv debug")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    for add in (_add_solve, _add_profile, _add_problem, _add_oracle, _add_sweep, _add_report,
                _add_listings, _add_calibrate):
        add(sub, common, fmt)
    _add_verify(sub, common, fmt)
    return parser


def _add_solve(sub, common, fmt) -> None:
    """``solve``: a model on a cluster."""
    p = sub.add_parser("solve", parents=[common], formatter_class=fmt,
                       help="find the best layer-wise plan for a model on a cluster",
                       description="Solve for the fastest per-layer parallelization and print "
                                   "the plan (one row per layer, then the totals and the "
                                   "baselines).",
                       epilog="examples:\n"
                              "  milp-parallel solve lenet5 --cluster optcnn --devices 4\n"
                              "  milp-parallel solve alexnet --cluster optcnn --devices 8 "
                              "--solver highs --memory-limit 4GiB --json > plan.json\n"
                              "  milp-parallel solve vgg16 --cluster optcnn --devices 16 "
                              "--plot plan.png")
    p.add_argument("model", metavar="MODEL",
                   help="a zoo name (see 'milp-parallel models') or a graph JSON file")
    p.add_argument("--cluster", required=True, metavar="NAME",
                   help="a preset (see 'milp-parallel clusters') or a cluster JSON file")
    p.add_argument("--devices", type=_positive_int, metavar="N",
                   help="use the first N devices (a preset grows to fit; default: all)")
    p.add_argument("--batch-size", type=_positive_int, metavar="B",
                   help="global batch size (default: the model's)")
    p.add_argument("--solver", default="auto", metavar="S",
                   help="auto (default), dp, highs, cbc, cpsat or brute")
    p.add_argument("--memory-limit", type=_memory, metavar="SIZE",
                   help="budget per device, e.g. 16GiB, 12GB, 'device' (the default: each "
                        "device's memory) or 'none' (no budget)")
    p.add_argument("--time-limit", type=_seconds, metavar="SECONDS",
                   help="solver time limit, e.g. 60 or 2min (> 0)")
    p.add_argument("--no-cross-check", dest="cross_check", action="store_false",
                   help="skip the independent exact check")
    p.add_argument("--fix", type=_assignment, action="append", metavar="LAYER=CONFIG",
                   help="pin a layer's configuration, e.g. 'features.0=n=4' (repeatable)")
    p.add_argument("--forbid", type=_assignment, action="append", metavar="LAYER=CONFIG",
                   help="forbid a layer's configuration, e.g. 'fc6=serial' (repeatable)")
    p.add_argument("--explain", type=_assignment, action="append", metavar="LAYER=CONFIG",
                   help="after the plan, show what forcing LAYER to CONFIG would cost: the "
                        "step time split and the layers that change (repeatable)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON only")
    p.add_argument("--save", type=_file_out, metavar="FILE",
                   help="also write the plan JSON to FILE")
    p.add_argument("--plot", type=_plot_out, metavar="FILE",
                   help="draw the plan (PNG, or SVG / PDF by suffix)")
    p.add_argument("--profile", metavar="FILE",
                   help="measured layer times from 'milp-parallel profile' (JSON) instead of "
                        "FLOP estimates")
    p.set_defaults(func=_cmd_solve)


def _add_profile(sub, common, fmt) -> None:
    """``profile``: time layer tiles with torch."""
    p = sub.add_parser("profile", parents=[common], formatter_class=fmt,
                       help="time each layer's tiles with torch; write a profile table (JSON)",
                       epilog="examples:\n"
                              "  milp-parallel profile lenet5 --cluster pcie_box --devices 4 "
                              "--out prof.json\n"
                              "  milp-parallel solve lenet5 --cluster pcie_box --devices 4 "
                              "--profile prof.json")
    p.add_argument("model", metavar="MODEL", help="a zoo model name")
    p.add_argument("--cluster", required=True, metavar="NAME", help="a preset cluster name")
    p.add_argument("--nodes", type=_positive_int, metavar="N", help="nodes of the preset")
    p.add_argument("--devices", type=_positive_int, metavar="N",
                   help="use the first N devices (default: all)")
    p.add_argument("--batch-size", type=_positive_int, metavar="B", help="global batch size")
    p.add_argument("--out", required=True, type=_file_out, metavar="FILE",
                   help="output JSON path")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:i] (default: cpu)")
    p.add_argument("--dtype", default="float32",
                   choices=["float32", "float16", "bfloat16", "float64"])
    p.add_argument("--repeats", type=_positive_int, default=5, help="timed runs per tile")
    p.add_argument("--warmup", type=_count_or_zero, default=2, help="untimed runs per tile")
    p.add_argument("--threads", type=_positive_int,
                   help="torch CPU threads while timing (1 = steadiest)")
    p.set_defaults(func=_cmd_profile)


def _add_problem(sub, common, fmt) -> None:
    """``problem``: a Problem file."""
    p = sub.add_parser("problem", parents=[common], formatter_class=fmt,
                       help="solve a Problem file (our JSON or IOPDDL .json/.json.gz)",
                       description="Solve a min-sum labelling Problem file; the format (ours "
                                   "or IOPDDL) is detected from the content.",
                       epilog="examples:\n"
                              "  milp-parallel problem data/iopddl_example.json --solver "
                              "highs\n"
                              "  milp-parallel problem p.json.gz --solver dp --memory-limit "
                              "none --json")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--solver", default="auto", metavar="S",
                   help="auto (default), dp, highs, cbc, cpsat or brute")
    p.add_argument("--time-limit", type=_seconds, metavar="SECONDS",
                   help="solver time limit, e.g. 60 or 2min (> 0)")
    p.add_argument("--memory-limit", type=_memory, metavar="SIZE",
                   help="replace the file's budget (a number or size; 'none' drops it)")
    p.add_argument("--json", action="store_true", help="print the result as JSON only")
    p.set_defaults(func=_cmd_problem)


def _add_oracle(sub, common, fmt) -> None:
    """``oracle``: ParaDL's analytical model."""
    p = sub.add_parser("oracle", parents=[common], formatter_class=fmt,
                       help="ParaDL's analytical projection of uniform strategies",
                       description="Project time per epoch (compute + communication) and "
                                   "memory per device of whole-model strategies with "
                                   "ParaDL's oracle. With --paradl, take ParaDL's own "
                                   "arguments and print its SUMMARY table.",
                       epilog="strategies: serial, data, spatial, filter, channel, pipeline, "
                              "data+filter, data+spatial (or ParaDL codes o d s f c p df ds)\n"
                              "examples:\n"
                              "  milp-parallel oracle resnet50 --cluster abci --strategy "
                              "data,filter --devices 4..1024 --plot scaling.png\n"
                              "  milp-parallel oracle data/paradl/VGG_ImageNet_profall.net_sc "
                              "--cluster abci --strategy data --devices 1..64 --csv\n"
                              "  milp-parallel oracle --paradl -net "
                              "data/paradl/VGG_ImageNet_profall.net_sc -plat "
                              "data/paradl/ABCI.plat --paratype df --cmaxp 1024 --cmaxB "
                              "262144 --cBon 32")
    p.add_argument("model", metavar="MODEL", nargs="?",
                   help="a zoo name, a graph JSON file or a ParaDL .net/.net_sc table")
    p.add_argument("--cluster", metavar="NAME",
                   help="a preset, a cluster JSON file or a ParaDL .plat file")
    p.add_argument("--strategy", default="data", metavar="LIST",
                   help="comma-separated strategies (default: data)")
    p.add_argument("--devices", type=_int_range, default=None, metavar="RANGE",
                   help="device counts: 4..1024 (doubling), 1,2,4, 1..16:+1 (default 1..64)")
    p.add_argument("--batch-per-device", type=_positive_float, default=32.0, metavar="B",
                   help="samples per data-parallel replica per iteration (default 32; the "
                        "global batch is this times the replicas, unlike solve's global "
                        "--batch-size)")
    p.add_argument("--dataset-size", type=_positive_int, metavar="N",
                   help="samples per epoch (default: the table's; 1281167 for zoo models)")
    p.add_argument("--mode", choices=("default", "paradl"), default="default",
                   help="'paradl' reproduces ParaDL's published numbers, quirks included")
    p.add_argument("--scaling", choices=("weak", "strong"), default="weak")
    p.add_argument("--layer-mask", metavar="FILE", help="a ParaDL .lc mask of split layers")
    p.add_argument("--csv", action="store_true", help="print CSV")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--plot", type=_plot_out, metavar="FILE", help="draw the scaling plot")
    g = p.add_argument_group("ParaDL's arguments (with --paradl)")
    g.add_argument("--paradl", action="store_true",
                   help="take ParaDL's arguments and print its SUMMARY table")
    g.add_argument("-net", dest="net", metavar="NET", help="ParaDL layer table")
    g.add_argument("-plat", dest="plat", metavar="PLAT", help="ParaDL platform file")
    g.add_argument("-goal", dest="goal", type=int, default=1, help="ParaDL goal (only 1)")
    g.add_argument("--paratype", nargs="+", metavar="CODES",
                   help="ParaDL strategy codes: a, o, d, s, f, c, df, ds")
    g.add_argument("--cmaxp", type=_count, metavar="N", help="maximum devices")
    g.add_argument("--cmaxB", type=_count, metavar="N", help="maximum global batch")
    g.add_argument("--cBon", type=_positive_float, metavar="N",
                   help="batch per device (replica)")
    g.add_argument("--lc", metavar="MASK", help="layer mask (.lc)")
    p.set_defaults(func=_cmd_oracle)


def _add_sweep(sub, common, fmt) -> None:
    """``sweep``: a TOML grid of runs."""
    p = sub.add_parser("sweep", parents=[common], formatter_class=fmt,
                       help="run a TOML grid of solves in parallel, results as JSON lines",
                       description="Run every item of a sweep file not already in the "
                                   "results file (re-running resumes). Each item runs in its "
                                   "own process; see milp_parallel.sweep for the file format.",
                       epilog="examples:\n"
                              "  milp-parallel sweep sweeps/quick.toml --out results.jsonl\n"
                              "  milp-parallel sweep sweeps/paper.toml --out paper.jsonl "
                              "--scheduler tcp://10.0.0.1:8786\n"
                              "  milp-parallel sweep sweeps/quick.toml --out results.jsonl "
                              "--retry-failed")
    p.add_argument("file", metavar="SWEEP.toml")
    p.add_argument("--out", metavar="RESULTS.jsonl", help="the results file (required to run)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--jobs", type=_positive_int, metavar="N",
                     help="items at once on this machine (default: the core count)")
    how.add_argument("--scheduler", metavar="ADDRESS",
                     help="run on a Dask distributed cluster, e.g. tcp://host:8786")
    p.add_argument("--retry-failed", action="store_true",
                   help="re-run items whose last result failed or timed out")
    bar = p.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None,
                     help="always show a progress bar")
    bar.add_argument("--no-progress", dest="progress", action="store_false",
                     help="log one line per item instead of a bar")
    p.add_argument("--list", action="store_true", help="list the items and exit")
    p.set_defaults(func=_cmd_sweep)


def _add_report(sub, common, fmt) -> None:
    """``report``: tables and plots."""
    p = sub.add_parser("report", parents=[common], formatter_class=fmt,
                       help="tables and plots from a sweep's results (or a saved plan)",
                       description="Write summary.md, summary.csv and plots from a results "
                                   "file; given a plan JSON (from 'solve --json'), draw the "
                                   "plan.",
                       epilog="examples:\n"
                              "  milp-parallel report results.jsonl --out report/\n"
                              "  milp-parallel report plan.json --out report/ --format svg")
    p.add_argument("file", metavar="RESULTS.jsonl|PLAN.json")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--format", choices=("png", "svg", "pdf"), default="png")
    p.add_argument("--no-plots", dest="plots", action="store_false",
                   help="tables only (no matplotlib needed)")
    p.set_defaults(func=_cmd_report)


def _add_listings(sub, common, fmt) -> None:
    """``models`` and ``clusters``: what is available."""
    p = sub.add_parser("models", parents=[common], help="list the model zoo with sizes")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_models)
    p = sub.add_parser("clusters", parents=[common], help="list the cluster presets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_clusters)


# ---------------------------------------------------------------------- verify (issue 24)
def _add_verify(sub, common, fmt) -> None:
    p = sub.add_parser(
        "verify", parents=[common], formatter_class=fmt,
        help="run one training step of a plan's program and audit it against the plan",
        description="Spawn WORLD_SIZE CPU processes (gloo), run one training step of the "
                    "plan's parallel program and of the module itself, and print the audit: "
                    "the largest relative error of outputs, loss and gradients, the bytes of "
                    "every layer's collectives (predicted by the plan, counted in the "
                    "program) and the memory per rank. FACTORY() returns (module, "
                    "example_inputs) at the plan's batch size.",
        epilog="example:\n"
               "  milp-parallel verify plan.json --module mynets:resnetlet --world-size 4")
    p.add_argument("plan", metavar="PLAN.json", help="a plan saved by solve --save")
    p.add_argument("--module", required=True, metavar="PKG.MODULE:FACTORY",
                   help="a function returning (torch module, example inputs)")
    p.add_argument("--world-size", type=_positive_int, metavar="N",
                   help="processes (default: the plan's devices)")
    p.add_argument("--backend", default="gloo", help="torch.distributed backend (gloo)")
    p.add_argument("--optimizer", choices=("adam", "sgd", "momentum"), default="adam")
    p.add_argument("--save", type=_file_out, metavar="FILE", help="write the audit as JSON")
    p.set_defaults(func=_cmd_verify)


def _cmd_verify(args) -> int:
    import importlib

    from .plan import Plan
    from .runtime import verify_plan
    plan = Plan.load(args.plan)
    where, _, attr = args.module.partition(":")
    try:
        factory = getattr(importlib.import_module(where), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise FormatError(f"--module {args.module!r}: cannot load it ({exc}); give "
                          "package.module:function, the function returning (module, "
                          "example_inputs)") from None
    made = factory()
    if not (isinstance(made, tuple) and len(made) == 2):
        raise FormatError(f"--module {args.module!r} must return (module, example_inputs)")
    audit = verify_plan(plan, made[0], made[1], world_size=args.world_size,
                        backend=args.backend, optimizer=args.optimizer)
    if args.save:
        audit.save(args.save)
    _out(str(audit))
    return EXIT_OK


# ---------------------------------------------------------------------- calibrate (issue 15)
def _add_calibrate(sub, common, fmt) -> None:
    p = sub.add_parser(
        "calibrate", parents=[common], formatter_class=fmt,
        help="measure this machine's collectives and speeds; write a cluster JSON",
        description="Time all-reduce, all-gather and point-to-point with torch.distributed "
                    "(gloo on CPU, nccl on GPU) in WORLD_SIZE local processes, fit an "
                    "alpha-beta pair to each (the link is point-to-point's; the "
                    "collectives keep their own), measure the device, and write a topology "
                    "file "
                    "(use it as --cluster). The measurements and fits go to "
                    "OUT.calibration.json beside it.",
        epilog="examples:\n"
               "  milp-parallel calibrate --out cpu2.json\n"
               "  milp-parallel calibrate --out cpu2.json --profile prof.json --model lenet5")
    p.add_argument("--out", required=True, type=_file_out, metavar="FILE",
                   help="the topology JSON to write")
    p.add_argument("--world-size", type=_positive_int, default=2, metavar="N",
                   help="processes (devices) to measure with (default 2)")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--threads", type=_positive_int, default=1,
                   help="torch threads per process (default 1)")
    p.add_argument("--repeats", type=_positive_int, default=15,
                   help="timed repetitions per message size (default 15)")
    p.add_argument("--max-bytes", type=_size, default=16 * 2**20, metavar="SIZE",
                   help="largest message (default 16MiB; sizes from 4KiB by factors of 4)")
    p.add_argument("--profile", type=_file_out, metavar="FILE",
                   help="also write the per-op profile table of the --model(s) there")
    p.add_argument("--model", action="append", metavar="NAME",
                   help="zoo model to profile (repeatable; default lenet5)")
    p.add_argument("--batch-size", type=_positive_int, help="global batch of the models")
    p.add_argument("--statistic", choices=("median", "min"), default="median",
                   help="what is kept of a message size's repetitions (default median: the "
                        "typical time, as a profile table and a measured step keep)")
    p.set_defaults(func=_cmd_calibrate)


def _cmd_calibrate(args) -> int:
    from .measure.calibrate import calibrate
    sizes = []
    m = 4096
    while m <= args.max_bytes:
        sizes.append(m)
        m *= 4
    if len(sizes) < 2:
        raise _UsageError("--max-bytes must be at least 16KiB (two message sizes)")
    if (args.model or args.batch_size) and not args.profile:
        raise _UsageError("--model and --batch-size say what --profile FILE measures; give "
                          "--profile too")
    from . import models
    for name in args.model or ():
        models.default_batch_size(name)  # an unknown name, before minutes of measuring
    topo, rep = calibrate(args.out, world_size=args.world_size, backend=args.backend,
                          threads=args.threads, sizes=sizes, repeats=args.repeats,
                          profile_path=args.profile, models=tuple(args.model or ["lenet5"]),
                          batch_size=args.batch_size, statistic=args.statistic)
    _out(f"wrote {args.out}: {topo!r}")
    for kind, f in rep["fits_by_kind"].items():
        _out(f"{kind}: no fit ({f['error']})" if "error" in f else
             f"{kind}: alpha {f['alpha_s'] * 1e6:.2f} us, bandwidth "
             f"{f['bandwidth_bytes_per_s'] / 1e9:.3f} GB/s (RMS relative error "
             f"{100 * f['rms_relative_error']:.1f}%)")
    _out(f"all-reduce / compute overlap {rep['overlap_efficiency']:.2f}")
    if args.profile:
        _out(f"wrote {args.profile}")
    return EXIT_OK


def _version() -> str:
    from . import __version__
    return __version__


def _out(text: str = "") -> None:
    sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))


def _json_out(doc) -> None:
    """JSON on stdout through io.dumps (numpy values as Python's, inf/nan as strings)."""
    from .io import dumps
    _out(dumps(doc, indent=2))


def _clean(x):
    """Non-finite floats to None, recursively (for JSON)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def _quiet_stdout():
    """Send fd 1 to stderr while solving: solver libraries write to the C-level stdout,
    which would corrupt ``--json`` output."""
    return c_stdout_to(2)


# ---------------------------------------------------------------------- commands
def _cmd_solve(args) -> int:
    from .plan import solve
    forbid: dict[str, list[str]] = {}
    for layer, config in args.forbid or ():
        forbid.setdefault(layer, []).append(config)
    fixed: dict[str, str] = {}
    for layer, config in args.fix or ():
        if fixed.setdefault(layer, config) != config:
            raise _UsageError(f"--fix pins layer {layer!r} twice ({fixed[layer]!r} and "
                              f"{config!r}); give one configuration per layer")
    with _quiet_stdout():
        plan = solve(args.model, args.cluster, devices=args.devices, batch_size=args.batch_size,
                     solver=args.solver, memory_limit=args.memory_limit or "device",
                     time_limit=args.time_limit, cross_check=args.cross_check,
                     profile=args.profile, fixed=fixed or None,
                     forbid=forbid or None)
        explanations = [plan.explain(layer, config) for layer, config in args.explain or ()]
    if args.save:
        plan.save(args.save)
    if args.plot:
        from .report import plot_plan
        path = plot_plan(plan, args.plot)
        logger.info("plan drawn in %s", path)
    if args.json:
        if explanations:
            from .io import dumps
            doc = plan.to_dict()
            doc["explanations"] = [_explanation_dict(e) for e in explanations]
            _out(dumps(doc, indent=2))
        else:
            _out(plan.to_json())
    else:
        _out(str(plan))
        if explanations:
            _out("\nexplanations (forcing one layer, re-solved):")
            for e in explanations:
                _out(str(e))
    return EXIT_OK


def _explanation_dict(e) -> dict:
    from dataclasses import asdict, fields
    d = {f.name: getattr(e, f.name) for f in fields(e) if f.name not in ("plan", "changes")}
    d["changes"] = [asdict(ch) for ch in e.changes]
    return d


def _cmd_profile(args) -> int:
    from .measure.profile import profile_model
    table = profile_model(args.model, args.cluster, args.out, nodes=args.nodes,
                          devices=args.devices, batch_size=args.batch_size, device=args.device,
                          repeats=args.repeats, warmup=args.warmup, dtype=args.dtype,
                          threads=args.threads)
    _out(f"wrote {len(table)} measured tiles to {args.out}")
    return EXIT_OK


def _cmd_problem(args) -> int:
    from .problem import load_problem
    from .solvers import solve_problem
    from .units import parse_memory_limit
    problem = load_problem(args.file)
    if args.memory_limit is not None:
        problem = problem.with_memory_limit(parse_memory_limit(args.memory_limit))
    opts = {} if args.time_limit is None else {"time_limit": args.time_limit}
    with _quiet_stdout():
        res = solve_problem(problem, args.solver, **opts)
    labels = None
    if res.assignment is not None:
        labels = [problem.config_labels[v][int(c)] for v, c in enumerate(res.assignment)]
    doc = {"file": str(args.file), "solver": res.solver, "status": res.status,
           "objective": res.objective, "bound": res.bound, "gap": res.gap,
           "seconds": res.seconds,
           "assignment": None if res.assignment is None else [int(c) for c in res.assignment],
           "labels": labels, "n_nodes": problem.n_nodes, "n_edges": problem.n_edges,
           "stats": dict(res.stats)}
    if args.json:
        _json_out(_clean(doc))
    else:
        _out(f"{args.file}: {problem.n_nodes} nodes, {problem.n_edges} edges, "
             f"{int(problem.n_configs.sum())} configurations"
             + (f", memory budget {problem.memory_limit.max():g}" if problem.has_budget
                else ""))
        _out(f"solver {res.solver}: {res.status}, objective {res.objective:.10g}, bound "
             f"{res.bound:.10g}, gap {res.gap:.3g}, {res.seconds:.3f}s")
        if res.assignment is not None:
            width = max(len(n) for n in problem.node_names)
            for v, (name, lab) in enumerate(zip(problem.node_names, labels)):
                _out(f"  {name:>{width}}  {int(res.assignment[v]):>3}  {lab}")
    if res.status == "infeasible":
        sys.stderr.write(f"{PROG}: error: {args.file}: infeasible: no assignment fits the "
                         "memory budget\n")
        return EXIT_FAILED
    if res.assignment is None:
        sys.stderr.write(f"{PROG}: error: {args.file}: solver {res.solver} found no "
                         f"assignment ({res.status}); give it more --time-limit\n")
        return EXIT_FAILED
    return EXIT_OK


def _cmd_oracle(args) -> int:
    from . import oracle
    if args.paradl:
        missing = [flag for flag, v in (("-net", args.net), ("-plat", args.plat),
                                        ("--paratype", args.paratype), ("--cmaxp", args.cmaxp),
                                        ("--cmaxB", args.cmaxB), ("--cBon", args.cBon))
                   if v is None]
        if missing:
            raise _UsageError(f"oracle --paradl needs {', '.join(missing)}")
        if args.goal != 1:
            raise _UsageError(f"-goal {args.goal}: only ParaDL's goal 1 (the SUMMARY) is "
                              "implemented")
        rows = oracle.paradl_summary(args.net, args.plat, _split_codes(args.paratype),
                                     max_devices=args.cmaxp, max_batch=args.cmaxB,
                                     batch_per_device=args.cBon, layer_mask=args.lc)
        if args.json:
            _json_out(rows)
        elif args.csv:
            import csv
            import io
            buf = io.StringIO()
            w = csv.DictWriter(buf, fieldnames=list(oracle._SUMMARY_KEYS),
                               lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
            _out(buf.getvalue())
        else:
            _out("==================SUMMARY==================")
            _out("name\t\tB\tp\tMem (bytes)\tTcomp (s)\tTcomm(s)\tTime(s)\tCost(min*Node)")
            for r in rows:
                _out("\t".join([r["name"], ""] + [_py2(r[k]) for k in (
                    "B", "p", "mem_bytes", "comp_s", "comm_s", "time_s",
                    "cost_node_minutes")]))
        if args.plot:
            from .report import plot_oracle_scaling
            plot_oracle_scaling([{"strategy": r["name"], "devices": int(r["p"]),
                                  "compute_seconds": r["comp_s"],
                                  "communication_seconds": r["comm_s"]} for r in rows],
                                args.plot, title=Path(args.net).name)
        if not (args.json or args.csv):
            # stdout stays ParaDL's table, line for line; what Mem counts goes to stderr
            # (after the plot: a plot that cannot be written is the one line on stderr)
            sys.stderr.write(f"{PROG}: note: Mem (bytes) is ParaDL's count per device, 2 x 4 B "
                             "x (samples x (|x| + |y|) + weights): activations and their "
                             "gradients, weights and their gradients, no optimizer state; "
                             "RELU and BNORM rows in place but for spatial and ds ('oracle "
                             "MODEL --cluster NAME' counts every row)\n")
        return EXIT_OK

    if args.model is None or args.cluster is None:
        raise _UsageError("oracle needs MODEL and --cluster (or --paradl with ParaDL's "
                          "arguments)")
    model = args.model
    dataset = args.dataset_size
    if not (Path(model).suffix in (".net", ".net_sc", ".json", ".gz")
            or model.endswith(".net_256") or Path(model).exists()):
        from . import models
        model = models.get(model)
        dataset = dataset or 1_281_167
    elif Path(model).suffix in (".json", ".gz"):
        from .graph import LayerGraph
        model = LayerGraph.load(model)
        dataset = dataset or 1_281_167
    devices = args.devices or (1, 2, 4, 8, 16, 32, 64)
    # a preset name grows to the largest device count inside project (clusters.for_devices),
    # as it does for a script
    cluster = args.cluster
    strategies = [x for x in args.strategy.split(",") if x.strip()]
    if not strategies:
        raise _UsageError(f"--strategy {args.strategy!r} names no strategy; give e.g. data or "
                          "data,filter")
    projections = []
    for s in strategies:
        projections.append(oracle.project(
            model, cluster, s.strip(), devices=devices, batch_per_device=args.batch_per_device,
            dataset_size=dataset, scaling=args.scaling, mode=args.mode,
            layer_mask=args.layer_mask))
    if args.json:
        _out("[" + ",\n".join(pr.to_json() for pr in projections) + "]")
    elif args.csv:
        for i, pr in enumerate(projections):
            text = pr.to_csv()
            _out(text if i == 0 else text.split("\n", 1)[1])
    else:
        from .units import format_bytes
        for pr in projections:
            _out(f"{pr.strategy} on {pr.cluster} ({pr.model}, {pr.scaling} scaling, "
                 f"{pr.dataset_size} samples per epoch, mode {pr.mode}): time per epoch")
            _out(f"  {'devices':>7} {'global batch':>12} {'compute s':>11} {'comm s':>11} "
                 f"{'total s':>11} {'memory':>9}  fits")
            for r in pr.rows:
                if not r.applicable:
                    _out(f"  {r.devices:>7} {'':>12} not applicable: {r.reason}")
                    continue
                _out(f"  {r.devices:>7} {r.batch:>12g} {r.compute_s:>11.4g} {r.comm_s:>11.4g} "
                     f"{r.total_s:>11.4g} {format_bytes(r.memory_bytes, binary=False):>9}  "
                     f"{'yes' if r.fits else 'NO'}")
            _out(f"  -> {pr.bottleneck()}")
            _out(f"  ({pr.memory_note})")
    if args.plot:
        from .report import plot_oracle_scaling
        rows = [{"strategy": pr.strategy, "devices": r.devices, "compute_seconds": r.compute_s,
                 "communication_seconds": r.comm_s, "feasible": r.fits}
                for pr in projections for r in pr.rows if r.applicable]
        if not rows:
            raise _UsageError("nothing to plot: no strategy applies at these device counts")
        plot_oracle_scaling(rows, args.plot, title=f"{projections[0].model} on "
                                                   f"{projections[0].cluster}")
    return EXIT_OK


def _cmd_sweep(args) -> int:
    from .sweep import FAILED_STATUSES, load_sweep, read_results, run_sweep
    sweep = load_sweep(args.file)
    if args.list:
        done = read_results(args.out) if args.out and Path(args.out).exists() else {}
        for it in sweep.items:
            status = done.get(it.id, {}).get("status", "-")
            _out(f"{it.id}  {status:10s} {it.label()}")
        return EXIT_OK
    if not args.out:
        raise _UsageError("sweep needs --out RESULTS.jsonl (or --list)")
    logging.getLogger("milp_parallel.sweep").setLevel(
        min(logging.getLogger("milp_parallel.sweep").getEffectiveLevel(), logging.INFO))
    summary = run_sweep(sweep, args.out, jobs=args.jobs, scheduler=args.scheduler,
                        retry_failed=args.retry_failed, progress=args.progress)
    _out(str(summary))
    results = read_results(args.out)
    failed = [it for it in sweep.items
              if results.get(it.id, {}).get("status") in FAILED_STATUSES]
    if failed:
        sys.stderr.write(f"{PROG}: error: {len(failed)} of {len(sweep.items)} items failed "
                         "(see their 'error' field; re-run with --retry-failed)\n")
        return EXIT_FAILED
    return EXIT_OK


def _cmd_report(args) -> int:
    from .io import read_text
    from .report import plot_plan, write_report
    path = Path(args.file)
    head = read_text(path, what="results file or plan").lstrip()[:4096]
    if head.startswith("{") and '"milp_parallel.plan"' in head and "\n{" not in head:
        from .io import write_text
        from .plan import Plan
        from .sweep import _make_folder
        plan = Plan.load(path)
        out = Path(args.out)
        _make_folder(out, f"the report {out}")
        f = plot_plan(plan, out / f"plan.{args.format}")
        write_text(out / "plan.txt", str(plan) + "\n")
        _out(f"wrote {f} and {out / 'plan.txt'}")
        return EXIT_OK
    files = write_report(path, args.out, fmt=args.format, plots=args.plots)
    _out("wrote " + ", ".join(str(f) for f in files))
    return EXIT_OK


def _cmd_models(args) -> int:
    from . import models
    rows = []
    for name in models.names():
        g = models.get(name)
        rows.append({"name": name, "layers": len(g), "params": int(g.param_count()),
                     "batch_size": int(g.batch_size),
                     "gflops_per_sample": float(g.flops()) / 1e9})
    if args.json:
        _json_out(rows)
        return EXIT_OK
    _out(f"{'model':16s} {'layers':>6} {'params':>14} {'batch':>6} {'GFLOP/sample':>13}")
    for r in rows:
        _out(f"{r['name']:16s} {r['layers']:>6} {r['params']:>14,} {r['batch_size']:>6} "
             f"{r['gflops_per_sample']:>13.3f}")
    return EXIT_OK


def _cmd_clusters(args) -> int:
    from .machine import clusters
    from .units import format_bandwidth, format_bytes
    rows = []
    for name in clusters.names():
        t = clusters.get(name)
        rows.append({"name": name, "devices": int(t.n_devices), "device": t.device.name,
                     "memory_bytes": float(t.device.memory_bytes),
                     "peak_flops": float(t.device.peak_flops), "dtype": t.dtype,
                     "dtypes": list(clusters.dtypes(name)),
                     "efficiency": float(t.device.efficiency),
                     "levels": [{"name": lv.name, "fanout": int(lv.fanout),
                                 "bandwidth_bytes_per_s": float(lv.bandwidth_bytes_per_s),
                                 "latency_s": float(lv.latency_s)} for lv in t.levels]})
    if args.json:
        _json_out(rows)
        return EXIT_OK
    _out(f"{'cluster':10s} {'devices':>7}  {'device':16s} {'memory':>8} {'TFLOP/s':>8} "
         f"{'dtype':5s}  links (innermost first)")
    for r in rows:
        links = ", ".join(f"{lv['fanout']} x {lv['name']} "
                          f"{format_bandwidth(lv['bandwidth_bytes_per_s'])}"
                          for lv in r["levels"])
        _out(f"{r['name']:10s} {r['devices']:>7}  {r['device']:16s} "
             f"{format_bytes(r['memory_bytes'], binary=False):>8} "
             f"{r['peak_flops'] / 1e12:>8.3g} {r['dtype']:5s}  {links}")
    _out(f"peaks at each preset's dtype (default {clusters.DEFAULT_DTYPE} for all; "
         "clusters.get(name, dtype='bf16') for another)")
    return EXIT_OK


# ---------------------------------------------------------------------- entry point
def _setup_logging(verbose: int) -> None:
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    root = logging.getLogger()
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        h = _StderrHandler()
        h.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(h)
    root.setLevel(level)


class _StderrHandler(logging.StreamHandler):
    """Logs to whatever ``sys.stderr`` is at the time (``main`` may run many times in one
    process, each with its own stderr)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``milp-parallel`` with ``argv`` (default ``sys.argv[1:]``); return the exit code.

    Examples
    --------
    >>> main(["clusters"])  # doctest: +SKIP
    0
    """
    parser = build_parser()
    try:
        _refuse_moved(parser, sys.argv[1:] if argv is None else argv)
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
    _setup_logging(getattr(args, "verbose", 0))
    debug = getattr(args, "debug", False)

    def fail(code: int, message: str) -> int:
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"{PROG}: error: {' '.join(str(message).split())}\n")
        return code

    try:
        return int(args.func(args))
    except _UsageError as exc:
        return fail(EXIT_USAGE, f"{exc} (see {PROG} {args.command} --help)")
    except MilpParallelError as exc:
        prefix = next((_PREFIX[c] for c in type(exc).__mro__ if c in _PREFIX), "")
        return fail(exit_code(exc), f"{prefix}{exc}")
    except ImportError as exc:
        return fail(EXIT_FAILED, str(exc))
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except OSError as exc:  # a path the user gave that the OS refuses (exit 2), or another
        if exc.filename is None:
            return fail(EXIT_FAILED, str(exc))
        return fail(EXIT_USAGE, f"{exc.filename}: {(exc.strerror or str(exc)).lower()}; check "
                                "the path (give another one)")
    except Exception as exc:  # noqa: BLE001 - one line, traceback only with --debug
        return fail(EXIT_FAILED, f"internal error: {type(exc).__name__}: {exc} (run with "
                                 "--debug for the traceback and please report it)")


if __name__ == "__main__":
    sys.exit(main())
