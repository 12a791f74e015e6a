"""Measured vs estimated compute time (roofline and FLOP models), and how the plan changes.

On this machine's CPU: time ResNet-50's tiles with torch (``milp_parallel.measure.profile``),
compare forward+backward with the cost model's two estimates: the per-op roofline (the default:
``milp_parallel.machine.roofline``, on a device whose dense FLOP/s, copy bandwidth and per-op
time are measured on this CPU by ``milp_parallel.measure.calibrate.measure_device``) and the
older FLOP model (``compute_model="flops"``: FLOPs / FLOP/s, backward = 2x forward for layers
with weights, 1x otherwise). It reports measured / estimated per op class for both (the
roofline's error per op class), then solves the plan under the roofline and under the measured
costs and reports how many layers change configuration and the predicted step times (each plan
also evaluated under the measured costs). No GPU here: the per-op CUDA table of the issue needs
one (``--device cuda`` of ``milp-parallel profile``).

The "cluster" is this CPU replicated ``--devices`` times behind the links of the ``pcie_box``
preset, so that estimates and measurements describe the same device.

Run (about 1-3 minutes on a 2-core machine with the defaults)::

    .venv/bin/python -m benchmarks.profile_vs_flops
    .venv/bin/python -m benchmarks.profile_vs_flops --image-size 224 --batch-size 16 --out r.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict

import numpy as np
import torch

from milp_parallel import clusters, models
from milp_parallel.costs import CostModel
from milp_parallel.costs.build import build
from milp_parallel.costs.configs import config_label, enumerate_configs, tile_extent
from milp_parallel.machine.topology import Device, Topology
from milp_parallel.measure.calibrate import measure_device
from milp_parallel.measure.profile import profile_layers
from milp_parallel.plan import solve


def cpu_matmul_flops(n: int = 1024, repeats: int = 5) -> float:
    """fp32 FLOP/s of a square matmul on this CPU (the best of ``repeats``)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--solver", default="dp")
    ap.add_argument("--out", help="write the numbers as JSON here")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    graph = models.get(args.model, batch_size=args.batch_size, image_size=args.image_size)
    flops = cpu_matmul_flops()
    cpu = measure_device(threads=args.threads)
    base = clusters.get("pcie_box")
    topo = Topology(Device("this-cpu", 64e9, flops, 1.0, cpu.memory_bandwidth_bytes_per_s,
                           cpu.kernel_launch_s), base.levels,
                    name="cpu-x" + str(base.n_devices)).with_devices(args.devices)
    print(f"{args.model}: {len(graph)} layers, batch {args.batch_size}, image "
          f"{args.image_size}; CPU matmul {flops / 1e9:.1f} GFLOP/s, copy "
          f"{cpu.memory_bandwidth_bytes_per_s * 0.8 / 1e9:.1f} GB/s, "
          f"{cpu.kernel_launch_s * 1e6:.1f} us per op, "
          f"{torch.get_num_threads()} threads; {args.devices} devices")

    t0 = time.perf_counter()
    table = profile_layers(graph, topo, repeats=args.repeats, warmup=args.warmup,
                           threads=args.threads)
    profile_s = time.perf_counter() - t0
    print(f"profiled {len(table)} distinct tiles in {profile_s:.1f} s")

    estimate = CostModel(topo)
    flop_model = CostModel(topo, compute_model="flops")

    def fwd_bwd(cm, layer, cfg):
        f, b, _ = cm.compute_phases(layer, cfg)
        return f + b
    # ratio table: a few layers x a few configurations
    picks = [L for L in graph.layers if L.op != "input"]
    wanted = {"conv": 3, "batchnorm": 1, "elementwise": 1, "add": 1, "pool": 1,
              "global_pool": 1, "linear": 1}
    seen = defaultdict(int)
    rows = []
    for layer in picks:
        if seen[layer.op] >= wanted.get(layer.op, 0):
            continue
        seen[layer.op] += 1
        cfg = enumerate_configs(layer, args.devices)
        est = fwd_bwd(estimate, layer, cfg)
        ext = tile_extent(np.asarray(layer.output_shape), cfg)
        chosen = sorted({0, len(cfg) - 1, int(np.argmax(cfg[:, 0])), len(cfg) // 2})
        for k in chosen:
            meas = table.lookup(layer, tuple(int(x) for x in ext[k]))
            rows.append({"layer": layer.name, "op": layer.op,
                         "config": config_label(layer, cfg[k]),
                         "tile": [int(x) for x in ext[k]], "estimate_s": float(est[k]),
                         "measured_s": meas,
                         "ratio": None if meas is None or est[k] == 0 else meas / est[k]})
    print(f"\n{'layer':<22}{'op':<13}{'config':<12}{'estimate ms':>12}{'measured ms':>13}"
          f"{'ratio':>8}")
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        meas = "-" if r["measured_s"] is None else f"{r['measured_s'] * 1e3:.3f}"
        print(f"{r['layer']:<22}{r['op']:<13}{r['config']:<12}{r['estimate_s'] * 1e3:>12.3f}"
              f"{meas:>13}{ratio:>8}")

    # per-op geometric mean of measured / estimated over every profiled tile, both models
    per_op = {"roofline": defaultdict(list), "flops": defaultdict(list)}
    for layer in picks:
        cfg = enumerate_configs(layer, args.devices)
        ests = {"roofline": fwd_bwd(estimate, layer, cfg), "flops": fwd_bwd(flop_model, layer,
                                                                           cfg)}
        ext = tile_extent(np.asarray(layer.output_shape), cfg)
        for k in range(len(cfg)):
            meas = table.lookup(layer, tuple(int(x) for x in ext[k]))
            for name, est in ests.items():
                if meas and est[k] > 0:
                    per_op[name][layer.op].append(meas / est[k])
    print("\nmeasured / estimated, geometric mean over all tiles (1.00 = exact):")
    print(f"  {'op':<13}{'roofline':>10}{'flops':>10}  tiles")
    summary = {name: {op: float(np.exp(np.mean(np.log(v)))) for op, v in sorted(d.items())}
               for name, d in per_op.items()}
    for op in summary["roofline"]:
        print(f"  {op:<13}{summary['roofline'][op]:10.2f}{summary['flops'].get(op, 0):10.2f}"
              f"  {len(per_op['roofline'][op])}")

    # plans under both cost models
    measured = CostModel(topo, profile=table)
    t0 = time.perf_counter()
    plan_est = solve(graph, topo, solver=args.solver, cross_check=False,
                     memory_limit=math.inf, cost_model=estimate)
    plan_meas = solve(graph, topo, solver=args.solver, cross_check=False,
                      memory_limit=math.inf, cost_model=measured)
    solve_s = time.perf_counter() - t0
    conf_est = {c.name: c.config for c in plan_est.layers}
    conf_meas = {c.name: c.config for c in plan_meas.layers}
    changed = sorted(n for n in conf_est if conf_meas.get(n) != conf_est[n])
    # the estimate's plan, evaluated under the measured costs
    built = build(graph, topo, cost_model=CostModel(topo, profile=table),
                  memory_limit=math.inf)
    prob = built.problem
    assignment = np.array([prob.config_labels[i].index(conf_est[name])
                           for i, name in enumerate(prob.node_names)])
    est_plan_under_meas = float(prob.evaluate(assignment).cost)
    print(f"\nplans ({args.solver}, {solve_s:.1f} s for both):")
    print(f"  estimated costs: predicted step {plan_est.step_seconds * 1e3:.2f} ms")
    print(f"  measured costs:  predicted step {plan_meas.step_seconds * 1e3:.2f} ms")
    print(f"  estimate's plan under measured costs: {est_plan_under_meas * 1e3:.2f} ms "
          f"({est_plan_under_meas / plan_meas.step_seconds:.3f}x the measured optimum)")
    print(f"  layers whose configuration changes: {len(changed)} of {len(conf_est)}")
    for n in changed[:12]:
        print(f"    {n:<24}{conf_est[n]:<14}-> {conf_meas[n]}")
    print(f"  profile lookups: {measured.profile_stats}")

    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "cpu_flops": flops, "profile_seconds": profile_s,
                       "entries": len(table), "rows": rows, "per_op_ratio": summary,
                       "step_estimated_s": plan_est.step_seconds,
                       "step_measured_s": plan_meas.step_seconds,
                       "estimate_plan_under_measured_s": est_plan_under_meas,
                       "changed_layers": changed, "profile_meta": dict(table.meta)},
                      f, indent=1)


if __name__ == "__main__":
    main()
