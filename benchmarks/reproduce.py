"""Regenerate ``benchmarks/RESULTS.md`` and its plots (``benchmarks/results/``).

Run ``python benchmarks/reproduce.py`` (about 15 minutes on 2 cores) or
``python benchmarks/reproduce.py --quick`` (CI, under 2 minutes). Every number in the report is
computed by the run; the published numbers it compares with live in ``data/`` with their
sources. See ``benchmarks/reproduction.py`` for what each section runs. ``milp-parallel
reproduce`` runs this script from a source checkout.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from reproduction import ReproduceConfig, reproduce  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the CI run (under 2 minutes)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks"),
                    help="directory of RESULTS.md (plots go to OUT/results)")
    ap.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s: %(message)s")
    from oracle_paradl import oracle_report
    cfg = ReproduceConfig.quick() if args.quick else ReproduceConfig.full()
    res = reproduce(args.out, cfg, oracle_report=oracle_report)
    print(f"wrote {res['report']} and {len(res['plots'])} plots in {res['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
