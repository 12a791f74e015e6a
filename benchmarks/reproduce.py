"""Regenerate ``benchmarks/RESULTS.md`` and its plots (``benchmarks/results/``).

Run ``python -m benchmarks.reproduce`` from the repository's root (about 15 minutes on 2
cores) or ``python -m benchmarks.reproduce --quick --out DIR`` (CI, under 2 minutes). Every
number in the report is computed by the run; the published numbers it compares with live in
``data/`` with their sources. See ``benchmarks/reproduction.py`` for what each section runs.
The installed package has no command for this: the reproduction needs the source tree.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from benchmarks.reproduction import ReproduceConfig, reproduce


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the CI run (under 2 minutes)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent),
                    help="directory of RESULTS.md (plots go to OUT/results; default: "
                         "benchmarks/)")
    ap.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s: %(message)s")
    cfg = ReproduceConfig.quick() if args.quick else ReproduceConfig.full()
    res = reproduce(args.out, cfg)
    print(f"wrote {res['report']} and {len(res['plots'])} plots in {res['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
