"""Megatron-LM's Table 1 (SC'21): its own configurations priced by our model, and our optimum.

Run ``python -m benchmarks.megatron [--table FILE] [--csv OUT] [--rows 0,2] [--time-limit S]``.
``FILE`` has the columns of ``shared/reference/megatron/table1-dev.csv`` (default: that file,
found beside the repository as ``../shared/reference/megatron/``,
:data:`benchmarks.instances.MEGATRON_TABLE`):
``params_b, heads, hidden, layers, tp, pp, gpus, batch, micro_batch, interleaved_chunks,
measured_tflops_per_gpu``.

For every row (GPT, sequence 2048, vocabulary 51,200, 16-bit training, on ``gpus / 8`` nodes of
the ``selene`` preset with its 80 GB per GPU):

(a) Megatron-LM's configuration (tensor ``tp``, pipeline ``pp``, data ``gpus / (tp pp)``,
    micro-batch ``micro_batch``, interleaved 1F1B with ``interleaved_chunks``, full
    recomputation, no optimizer sharding, equal stages) priced by
    :func:`milp_parallel.pipeline.evaluate_configuration`; teraFLOP/s per GPU by Megatron's
    formula ``96 B s l h^2 (1 + s / 6h + V / 16 l h)`` over the predicted iteration time.
(b) our optimum on the same model, GPUs, batch and memory
    (:func:`milp_parallel.pipeline.solve_pipeline`, the default declared space with
    interleaving up to 4 chunks), its plan, its speedup over (a) and the search time.

Prints a table and writes one CSV row per input row: the input columns, then
``predicted_tflops_megatron_config``, ``predicted_tflops_optimum``, ``ratio_predicted_measured``,
``speedup_optimum``, ``search_seconds``, ``optimum_status``, ``optimum_untied_gap`` (how much
faster an untied plan of the same pipeline shape could at most be), ``optimum_plan``.

``--sensitivity`` (issue 26.2) prices only (a), once with every constant of
:mod:`milp_parallel.machine.constants` the step model reads at its cited value and then with
each at -15% and +15%, and prints the table of ``benchmarks/megatron.md``: per setting, the
least and the greatest predicted / measured ratio over the rows (``--sensitivity-csv OUT``
writes it).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import logging
import time
from contextlib import contextmanager
from pathlib import Path

from benchmarks.instances import MEGATRON_TABLE, write_csv
from milp_parallel import clusters
from milp_parallel.machine import constants
from milp_parallel.models.gpt import gpt, megatron_flops
from milp_parallel.pipeline import PipelineOptions, evaluate_configuration, solve_pipeline
from milp_parallel.pipeline.step_costs import StepPricer

log = logging.getLogger(__name__)

SEQ, VOCAB = 2048, 51200
COLUMNS = ("params_b", "heads", "hidden", "layers", "tp", "pp", "gpus", "batch", "micro_batch",
           "interleaved_chunks", "measured_tflops_per_gpu")


def read_table(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    missing = [c for c in COLUMNS if rows and c not in rows[0]]
    if missing:
        raise SystemExit(f"{path}: missing columns {missing}; expected {', '.join(COLUMNS)}")
    return rows


def plan_text(plan) -> str:
    """One line: the mesh, schedule and each distinct stage setting."""
    parts = [f"p={plan.pipeline} t={plan.tensor} d={plan.data} m={plan.micro_batches} "
             f"b={plan.micro_batch_size} {plan.schedule}"
             + (f" v={plan.chunks}" if plan.chunks > 1 else "")]
    for s in plan.stages:
        kinds = s.kinds
        layer = ",".join(f"{k}={kinds[k]}" for k in ("ln1", "qkv", "attn", "proj", "add1",
                                                      "fc1", "fc2", "add2") if k in kinds)
        parts.append(f"s{s.index}:{len(s.blocks)}blk/{s.recompute}/zero{s.zero}/{layer}")
    return "; ".join(parts)


def run_row(r: dict, time_limit: float | None = None) -> dict:
    heads, hidden, layers = int(r["heads"]), int(r["hidden"]), int(r["layers"])
    gpus, batch = int(r["gpus"]), int(r["batch"])
    graph = gpt(1, layers=layers, hidden=hidden, heads=heads, vocab=VOCAB, seq_len=SEQ)
    # Megatron-LM trained in 16-bit: the preset at its bf16 peak (presets default to fp32)
    topo = clusters.get("selene", nodes=-(-gpus // 8), dtype="bf16").with_devices(gpus)
    flops = megatron_flops(batch, layers, hidden, VOCAB, SEQ)
    # Megatron-LM's program: each received message is allocated as it arrives
    meg = evaluate_configuration(graph, topo, global_batch=batch, tensor=int(r["tp"]),
                                 pipeline=int(r["pp"]), micro_batch_size=int(r["micro_batch"]),
                                 chunks=int(r["interleaved_chunks"]), recompute="full", zero=0,
                                 options=PipelineOptions(receive_buffers="in_flight"))
    chunks = tuple(sorted({1, 2, 4, int(r["interleaved_chunks"])}))
    t0 = time.perf_counter()
    opt = solve_pipeline(graph, topo, global_batch=batch,
                         options=PipelineOptions(chunks=chunks, time_limit=time_limit,
                                                 receive_buffers="in_flight"))
    seconds = time.perf_counter() - t0
    tf_meg, tf_opt = meg.tflops_per_gpu(flops), opt.tflops_per_gpu(flops)
    measured = float(r["measured_tflops_per_gpu"])
    return {**{c: r[c] for c in COLUMNS},
            "predicted_tflops_megatron_config": round(tf_meg, 2),
            "predicted_tflops_optimum": round(tf_opt, 2),
            "ratio_predicted_measured": round(tf_meg / measured, 4),
            "speedup_optimum": round(meg.iteration_seconds / opt.iteration_seconds, 4),
            "megatron_config_fits": meg.search.get("fits"),
            "megatron_iteration_seconds": round(meg.iteration_seconds, 4),
            "optimum_iteration_seconds": round(opt.iteration_seconds, 4),
            "search_seconds": round(seconds, 1), "optimum_status": opt.status,
            "optimum_untied_gap": round(1 - opt.untied_lower_bound_seconds
                                        / opt.iteration_seconds, 4),
            "optimum_plan": plan_text(opt)}


#: The constants the transformer step model reads (``--sensitivity`` varies each).
SENSITIVE = ("GEMM_EFFICIENCY_16BIT", "MEMORY_EFFICIENCY", "KERNEL_LAUNCH_S",
             "NVLINK_LATENCY_S", "IB_LATENCY_S", "OPTIMIZER_BYTES_PER_PARAM",
             "SCORE_BYTES_DROPOUT")


@contextmanager
def _scaled(name: str, factor: float):
    """Temporarily ``constants.<name>`` times ``factor`` (read at call time by the model)."""
    old = getattr(constants, name)
    setattr(constants, name, dataclasses.replace(old, value=old.value * factor))
    try:
        yield
    finally:
        setattr(constants, name, old)


def _topology(gpus: int, scale: dict[str, float]):
    """Selene at bf16 with the NVLink / InfiniBand latencies scaled by ``scale``."""
    topo = clusters.get("selene", nodes=-(-gpus // 8), dtype="bf16").with_devices(gpus)
    factors = (scale.get("NVLINK_LATENCY_S", 1.0), scale.get("IB_LATENCY_S", 1.0))
    levels = tuple(dataclasses.replace(
        lv, latency_s=lv.latency_s * f,
        latency_steps=tuple((n, a * f) for n, a in lv.latency_steps))
        for lv, f in zip(topo.levels, factors))
    return dataclasses.replace(topo, levels=levels)


def megatron_ratio(r: dict, scale: dict[str, float] | None = None) -> float:
    """Predicted / measured TFLOP/s per GPU of Megatron's configuration in row ``r``.

    ``scale`` multiplies constants of :data:`SENSITIVE` (default: all at their cited value).
    """
    scale = scale or {}
    heads, hidden, layers = int(r["heads"]), int(r["hidden"]), int(r["layers"])
    gpus, batch = int(r["gpus"]), int(r["batch"])
    graph = gpt(1, layers=layers, hidden=hidden, heads=heads, vocab=VOCAB, seq_len=SEQ)
    topo = _topology(gpus, scale)
    with (_scaled("OPTIMIZER_BYTES_PER_PARAM", scale.get("OPTIMIZER_BYTES_PER_PARAM", 1.0)),
          _scaled("SCORE_BYTES_DROPOUT", scale.get("SCORE_BYTES_DROPOUT", 1.0))):
        pricer = StepPricer(
            topo, gemm_efficiency=min(1.0, constants.GEMM_EFFICIENCY_16BIT.value
                                      * scale.get("GEMM_EFFICIENCY_16BIT", 1.0)),
            memory_efficiency=min(1.0, constants.MEMORY_EFFICIENCY.value
                                  * scale.get("MEMORY_EFFICIENCY", 1.0)),
            kernel_seconds=constants.KERNEL_LAUNCH_S.value * scale.get("KERNEL_LAUNCH_S", 1.0))
        meg = evaluate_configuration(graph, topo, global_batch=batch, tensor=int(r["tp"]),
                                     pipeline=int(r["pp"]),
                                     micro_batch_size=int(r["micro_batch"]),
                                     chunks=int(r["interleaved_chunks"]), recompute="full",
                                     zero=0, pricer=pricer,
                                     options=PipelineOptions(receive_buffers="in_flight"))
    flops = megatron_flops(batch, layers, hidden, VOCAB, SEQ)
    return meg.tflops_per_gpu(flops) / float(r["measured_tflops_per_gpu"])


def sensitivity(rows: list[dict], delta: float = 0.15) -> list[dict]:
    """One row per setting: the cited values, then each constant at ``1 -+ delta``.

    Each row: ``constant``, ``value``, ``min_ratio``, ``max_ratio`` (predicted / measured over
    ``rows``), ``checked`` (whether the constant's figure was checked against its source).
    Efficiencies are capped at 1.
    """
    out = []
    settings = [("cited values", 1.0)] + [(n, f) for n in SENSITIVE
                                          for f in (1 - delta, 1 + delta)]
    for name, factor in settings:
        scale = {} if name == "cited values" else {name: factor}
        ratios = [megatron_ratio(r, scale) for r in rows]
        c = getattr(constants, name, None)
        v = None if c is None else c.value * factor
        if v is not None and "EFFICIENCY" in name:
            v = min(1.0, v)
        value = "" if v is None else f"{v:.4g}"
        out.append({"constant": name, "factor": round(factor, 2), "value": value,
                    "min_ratio": round(min(ratios), 3), "max_ratio": round(max(ratios), 3),
                    "checked": "" if c is None else c.checked})
        log.info("%s x%.2f: %.3f-%.3f", name, factor, min(ratios), max(ratios))
    return out


def sensitivity_markdown(table: list[dict]) -> str:
    head = ("| constant | factor | value | min predicted / measured | max | checked |\n"
            "|---|---|---|---|---|---|\n")
    return head + "".join(f"| {t['constant']} | {t['factor']} | {t['value']} | "
                          f"{t['min_ratio']:.3f} | {t['max_ratio']:.3f} | {t['checked']} |\n"
                          for t in table)


def markdown(rows: list[dict]) -> str:
    head = ("| params | TP | PP | GPUs | batch | measured TFLOP/s | Megatron config, predicted "
            "| predicted / measured | our optimum, predicted | speedup | search s | status |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    body = "".join(
        f"| {r['params_b']}B | {r['tp']} | {r['pp']} | {r['gpus']} | {r['batch']} | "
        f"{r['measured_tflops_per_gpu']} | {r['predicted_tflops_megatron_config']:.1f} | "
        f"{r['ratio_predicted_measured']:.3f} | {r['predicted_tflops_optimum']:.1f} | "
        f"{r['speedup_optimum']:.3f}x | {r['search_seconds']} | {r['optimum_status']} |\n"
        for r in rows)
    plans = "".join(f"- {r['params_b']}B: {r['optimum_plan']}\n" for r in rows)
    return head + body + "\nOur optimum's plan per row:\n\n" + plans


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=Path, default=MEGATRON_TABLE)
    ap.add_argument("--csv", type=Path, default=None, help="write the result rows here")
    ap.add_argument("--rows", default=None, help="comma-separated row indices (default all)")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds per search (default: until proven optimal)")
    ap.add_argument("--sensitivity", action="store_true",
                    help="price Megatron's configurations with each constant at -+15%%")
    ap.add_argument("--sensitivity-csv", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = read_table(args.table)
    if args.rows:
        rows = [rows[int(i)] for i in args.rows.split(",")]
    if args.sensitivity:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        table = sensitivity(rows)
        print(sensitivity_markdown(table))
        if args.sensitivity_csv:
            write_csv(args.sensitivity_csv, table)
        return 0
    out = []
    for r in rows:
        res = run_row(r, args.time_limit)
        out.append(res)
        print(f"{r['params_b']}B: measured {r['measured_tflops_per_gpu']} TFLOP/s, Megatron "
              f"config predicted {res['predicted_tflops_megatron_config']:.1f} "
              f"({res['ratio_predicted_measured']:.3f}x), optimum "
              f"{res['predicted_tflops_optimum']:.1f} ({res['speedup_optimum']:.3f}x faster, "
              f"{res['optimum_status']} in {res['search_seconds']} s)", flush=True)
    print()
    print(markdown(out))
    if args.csv:
        write_csv(args.csv, out)
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
