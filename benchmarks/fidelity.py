"""Predicted vs simulated step times over the zoo, OptCNN's experiment re-run with the current
cost model, and which constant moves which number (a sensitivity run).

Three tables, every number computed by this run (nothing is typed in):

1. **Predicted vs simulated** (``milp_parallel.costs.simulator``): for each zoo model on the
   ``optcnn`` preset (batch 32 per GPU), the layer-wise optimum and the data / model / OWT
   baselines, their separable prediction and their simulated step, and the ratio.
2. **OptCNN's experiment** (AlexNet, VGG-16, Inception-v3 on 1 and 16 GPUs of the ``optcnn``
   preset, 32 per GPU): the gain of layer-wise parallelism over the best of data, model and
   OWT at 16 GPUs, predicted and simulated, the 1 -> 16 GPU speedups, beside the published
   (unverified, ``data/optcnn_published.json``) figures; and the gain after re-ranking the
   ``--rerank`` best plans by simulated time.
3. **Sensitivity**: the predicted 16-GPU gain of each model when one constant at a time is
   changed (dense efficiency, memory efficiency, launch time, GEMM tile, NVLink and
   InfiniBand bandwidth, InfiniBand latency, network cards per node, gradient bucket, overlap
   credit, collective algorithm). The cause of each model's difference from the paper is
   written from this table: the constants that move its gain most.

Run from the repository root (about 5-10 minutes on 2 cores; ``--quick`` about 1-2)::

    .venv/bin/python -m benchmarks.fidelity [--quick] [--json out.json] [--md out.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import milp_parallel as mp
from benchmarks.instances import DATA_DIR
from milp_parallel import clusters
from milp_parallel.costs import CostModel
from milp_parallel.machine.roofline import RooflineParams
from milp_parallel.machine.topology import Topology

OTHERS = ("data", "model", "owt")
PAPER_MODELS = ("alexnet", "vgg16", "inception_v3")
PER_GPU = 32


def _topo(devices: int) -> Topology:
    return clusters.get("optcnn", nodes=max(1, -(-devices // 4))).with_devices(devices)


def _solve(model: str, topo: Topology, cost_model: CostModel | None = None, rerank=None):
    return mp.solve(model, topo, batch_size=PER_GPU * topo.n_devices, solver="dp",
                    cross_check=False, cost_model=cost_model, rerank=rerank,
                    memory_limit=float("inf"))


def _best_other(plan, simulated: bool = False):
    key = "simulated_step_seconds" if simulated else "step_seconds"
    name = min(OTHERS, key=lambda n: getattr(plan.baselines[n], key))
    return name, getattr(plan.baselines[name], key)


# ---------------------------------------------------------------------- table 1
def predicted_vs_simulated(models, devices) -> list[dict]:
    rows = []
    for model in models:
        for p in devices:
            plan = _solve(model, _topo(p))
            entries = [("layer-wise", plan.step_seconds, plan.simulated_step_seconds)]
            entries += [(n, plan.baselines[n].step_seconds,
                         plan.baselines[n].simulated_step_seconds) for n in OTHERS]
            for name, pred, sim in entries:
                rows.append({"model": model, "gpus": p, "strategy": name,
                             "predicted_s": pred, "simulated_s": sim,
                             "simulated_over_predicted": sim / pred if pred else float("nan")})
    return rows


# ---------------------------------------------------------------------- table 2
def optcnn_experiment(rerank: int) -> list[dict]:
    published = json.loads((DATA_DIR / "optcnn_published.json").read_text())
    out = []
    for model in PAPER_MODELS:
        one = _solve(model, _topo(1))
        sixteen = _solve(model, _topo(16))
        rr = _solve(model, _topo(16), rerank=rerank) if rerank > 1 else sixteen
        other, other_pred = _best_other(sixteen)
        other_sim_name, other_sim = _best_other(sixteen, simulated=True)
        other1 = min(getattr(one.baselines[n], "step_seconds") for n in OTHERS)
        tput = lambda plan, step: plan.batch_size / step  # noqa: E731
        out.append({
            "model": model,
            "gain_predicted": other_pred / sixteen.step_seconds, "best_other": other,
            "gain_simulated": other_sim / sixteen.simulated_step_seconds,
            "best_other_simulated": other_sim_name,
            "speedup_layerwise": tput(sixteen, sixteen.step_seconds)
            / tput(one, one.step_seconds),
            "speedup_best_other": tput(sixteen, other_pred) / tput(one, other1),
            "gain_reranked_simulated": other_sim / rr.simulated_step_seconds,
            "reranked_choice": next(
                (f"#{c['rank'] + 1} by prediction" if c["rank"] is not None
                 else f"the {c['baseline']} baseline") for c in rr.rerank if c["chosen"])
            if rr.rerank else "not re-ranked",
            "published_gain": published["gain_at_16_gpus"][model],
            "published_gain_implied": published["gain_at_16_gpus"]["implied_by_speedups"][model],
            "published_speedup_layerwise": published["speedup_1_to_16_gpus"]["layerwise"][model],
            "published_speedup_best_other":
                published["speedup_1_to_16_gpus"]["best_other"][model]})
    return out


# ---------------------------------------------------------------------- table 3
def _variants():
    """(name, what changes, function topology -> (topology, CostModel kwargs))."""
    def dev(**kw):
        def f(t):
            return Topology(dataclasses.replace(t.device, **kw), t.levels, t.name), {}
        return f

    def level(i, **kw):
        def f(t):
            if i >= len(t.levels):
                return t, {}
            lv = list(t.levels)
            lv[i] = dataclasses.replace(lv[i], **kw)
            return Topology(t.device, tuple(lv), t.name), {}
        return f

    def cost(**kw):
        return lambda t: (t, kw)
    base = _topo(16)
    d, nv, ib = base.device, base.levels[0], base.levels[1]
    # one sensitivity run per row: (label, change, how to apply it)
    return [
        ("dense efficiency x0.5", "Device.efficiency 0.5 -> 0.25", dev(efficiency=d.efficiency / 2)),
        ("dense efficiency x2", "Device.efficiency 0.5 -> 1.0", dev(efficiency=min(1.0, d.efficiency * 2))),
        ("HBM bandwidth x0.5", "732 -> 366 GB/s", dev(memory_bandwidth_bytes_per_s=d.memory_bandwidth_bytes_per_s / 2)),
        ("launch time x0 ", "4 us -> 0 per kernel", dev(kernel_launch_s=0.0)),
        ("launch time x4", "4 -> 16 us per kernel", dev(kernel_launch_s=d.kernel_launch_s * 4)),
        ("no tile quantization", "gemm_tile 128 -> 0", cost(roofline=RooflineParams(gemm_tile=0))),
        ("NVLink x0.5", "20 -> 10 GB/s", level(0, bandwidth_bytes_per_s=nv.bandwidth_bytes_per_s / 2)),
        ("NVLink x4", "20 -> 80 GB/s", level(0, bandwidth_bytes_per_s=nv.bandwidth_bytes_per_s * 4)),
        ("InfiniBand x0.5", "12.5 -> 6.25 GB/s", level(1, bandwidth_bytes_per_s=ib.bandwidth_bytes_per_s / 2)),
        ("InfiniBand x4", "12.5 -> 50 GB/s", level(1, bandwidth_bytes_per_s=ib.bandwidth_bytes_per_s * 4)),
        ("IB latency x4", "40 -> 161 us", level(1, latency_s=ib.latency_s * 4)),
        ("4 NICs per node", "uplinks 1 -> 4", level(1, uplinks=4)),
        ("no buckets", "25 MiB buckets -> a per-layer all-reduce", cost(gradient_bucket_bytes=None)),
        ("no overlap credit", "sync_overlap 1 -> 0", cost(sync_overlap=0.0)),
        ("ring only", "collective auto -> ring", cost(collective="ring")),
    ]


def sensitivity(models) -> list[dict]:
    base_topo = _topo(16)
    rows = []
    base = {}
    for model in models:
        plan = _solve(model, base_topo)
        base[model] = _best_other(plan)[1] / plan.step_seconds
        rows.append({"variant": "baseline", "change": "the optcnn preset as shipped",
                     "model": model, "gain": base[model], "delta": 0.0})
    for name, change, fn in _variants():
        topo, kw = fn(base_topo)
        for model in models:
            plan = _solve(model, topo, cost_model=CostModel(topo, **kw))
            g = _best_other(plan)[1] / plan.step_seconds
            rows.append({"variant": name.strip(), "change": change, "model": model,
                         "gain": g, "delta": g - base[model]})
    return rows


def _causes(sens: list[dict], model: str, k: int = 3) -> str:
    mine = [r for r in sens if r["model"] == model and r["variant"] != "baseline"]
    if not mine:
        return "not in this run's sensitivity table"
    mine.sort(key=lambda r: -abs(r["delta"]))
    base = next(r["gain"] for r in sens if r["model"] == model and r["variant"] == "baseline")
    parts = [f"{r['variant']} ({r['change']}): {base:.2f}x -> {r['gain']:.2f}x"
             for r in mine[:k]]
    return "; ".join(parts)


# ---------------------------------------------------------------------- report
def render(t1, t2, t3) -> str:
    md = ["## Predicted vs simulated step time (optcnn preset, 32 samples per GPU)", "",
          "| model | GPUs | strategy | predicted ms | simulated ms | simulated / predicted |",
          "|---|---:|---|---:|---:|---:|"]
    for r in t1:
        md.append(f"| {r['model']} | {r['gpus']} | {r['strategy']} | "
                  f"{1e3 * r['predicted_s']:.3f} | {1e3 * r['simulated_s']:.3f} | "
                  f"{r['simulated_over_predicted']:.3f} |")
    ratios = [r["simulated_over_predicted"] for r in t1]
    md += ["", f"simulated / predicted over {len(ratios)} plans: min {min(ratios):.3f}, "
           f"median {sorted(ratios)[len(ratios) // 2]:.3f}, max {max(ratios):.3f}.", "",
           "## OptCNN's experiment with the current cost model (16 GPUs vs 1)", "",
           "| model | gain predicted (best other) | gain simulated (best other) | "
           "simulated gain after rerank (choice) | "
           "speedup 1->16 layer-wise / best other | published gain (implied by its "
           "speedups) | published speedups (unverified) |", "|---|---|---|---|---|---|---|"]
    for r in t2:
        md.append(f"| {r['model']} | {r['gain_predicted']:.2f}x ({r['best_other']}) | "
                  f"{r['gain_simulated']:.2f}x ({r['best_other_simulated']}) | "
                  f"{r['gain_reranked_simulated']:.2f}x ({r['reranked_choice']}) | "
                  f"{r['speedup_layerwise']:.1f}x / {r['speedup_best_other']:.1f}x | "
                  f"{r['published_gain']}x ({r['published_gain_implied']}x) | "
                  f"{r['published_speedup_layerwise']}x / {r['published_speedup_best_other']}x"
                  f" |")
    md += ["", "## Sensitivity: the predicted 16-GPU gain when one constant changes", "",
           "| change | " + " | ".join(PAPER_MODELS) + " |",
           "|---|" + "---:|" * len(PAPER_MODELS)]
    variants = []
    for r in t3:
        if r["variant"] not in variants:
            variants.append(r["variant"])
    for v in variants:
        cells = []
        for m in PAPER_MODELS:
            r = next((x for x in t3 if x["variant"] == v and x["model"] == m), None)
            cells.append("-" if r is None else f"{r['gain']:.2f}x")
        change = next(x["change"] for x in t3 if x["variant"] == v)
        md.append(f"| {v} ({change}) | " + " | ".join(cells) + " |")
    md += ["", "## Why each model differs from the paper (from the runs above)", ""]
    for r in t2:
        md.append(f"- **{r['model']}**: predicted gain {r['gain_predicted']:.2f}x, simulated "
                  f"{r['gain_simulated']:.2f}x, published (unverified) {r['published_gain']}x. "
                  f"The constants that move it most: {_causes(t3, r['model'])}.")
    return "\n".join(md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer models and GPU counts")
    ap.add_argument("--rerank", type=int, default=4, help="k best plans re-ranked (1: off)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--md", help="write the markdown here")
    args = ap.parse_args()
    start = time.perf_counter()
    zoo = (("lenet5", "alexnet") if args.quick else
           ("lenet5", "alexnet", "vgg16", "resnet18", "resnet50", "inception_v3",
            "mobilenet_v2"))
    devices = (4,) if args.quick else (4, 16)
    t1 = predicted_vs_simulated(zoo, devices)
    t2 = optcnn_experiment(1 if args.quick else args.rerank)
    t3 = sensitivity(PAPER_MODELS[:1] if args.quick else PAPER_MODELS)
    md = render(t1, t2, t3)
    md += f"\n\n(run in {time.perf_counter() - start:.0f} s)"
    print(md)
    if args.md:
        Path(args.md).write_text(md + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"predicted_vs_simulated": t1,
                                               "optcnn": t2, "sensitivity": t3}, indent=1))


if __name__ == "__main__":
    main()
