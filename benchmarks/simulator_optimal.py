"""Issue 26.1: the plan solve() returns against the baselines under the step simulator, with
its certificate (proved simulator-optimal, or the gap to the separable lower bound).

Per zoo case: the plan's predicted and simulated step, the best baseline's simulated step,
the certificate, the assignments enumerated by the bound, and the seconds solve() took (the
certificate's own seconds beside). Writes ``benchmarks/results/simulator_optimal.csv``.

Run from the repository root::

    .venv/bin/python -m benchmarks.simulator_optimal [--certify K] [--out path.csv]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import logging
import platform
import time
from pathlib import Path

import milp_parallel as mp

logger = logging.getLogger(__name__)

#: (model, cluster, devices, batch_size or None): the issue's three and the README's / tests'.
CASES = (("resnet50", "abci", 16, None), ("inception_v3", "optcnn", 16, None),
         ("bert_base", "abci", 16, None), ("alexnet", "optcnn", 16, None),
         ("vgg16", "optcnn", 4, 128), ("vgg16", "optcnn", 16, None),
         ("lenet5", "abci", 4, None), ("resnet50", "abci", 4, None))

OUT = Path(__file__).resolve().parent / "results" / "simulator_optimal.csv"


def run(certify: int) -> list[dict]:
    """One row per case."""
    rows = []
    for model, cluster, devices, batch in CASES:
        start = time.perf_counter()
        plan = mp.solve(model, cluster, devices=devices, batch_size=batch, certify=certify)
        seconds = time.perf_counter() - start
        cert = plan.simulator_certificate
        base = min((b for b in plan.baselines.values()
                    if b.feasible and b.simulated_step_seconds is not None),
                   key=lambda b: b.simulated_step_seconds)
        rows.append({
            "case": f"{model}/{cluster}/{devices}" + (f"/b{batch}" if batch else ""),
            "predicted_ms": round(plan.step_seconds * 1e3, 4),
            "simulated_ms": round(plan.simulated_step_seconds * 1e3, 4),
            "best_baseline": base.name,
            "best_baseline_simulated_ms": round(base.simulated_step_seconds * 1e3, 4),
            "chosen": cert.chosen, "certificate": cert.status,
            "bound_ms": round(cert.bound_seconds * 1e3, 4), "gap": round(cert.gap, 4),
            "enumerated": cert.enumerated, "certificate_seconds": round(cert.seconds, 2),
            "solve_seconds": round(seconds, 2), "certify": certify,
            "machine": f"{platform.node()} {platform.machine()} (2 cores shared)",
            "date": datetime.date.today().isoformat()})
        logger.info("%s", rows[-1])
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--certify", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows = run(args.certify)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
