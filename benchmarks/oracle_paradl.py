"""Regenerate ParaDL's scaling tables on ABCI and compare projections with measured times.

Run ``python -m benchmarks.oracle_paradl``. The functions return rows and markdown so the
reproduction report can include them (``oracle_report()``).

- Scaling tables (paradl mode, HPDC'21 latency): ResNet-50 (64 samples per GPU) and VGG16
  (32) for data parallelism on 2-2048 GPUs, filter and channel on 2-64, data+filter on 4-2048.
- Projected vs measured seconds per epoch (ResNet-50, ``data/paradl_measured.csv``, from the
  tech report / HPDC'21): data+spatial with ``spatial_resnet.lc`` and 256 samples per group,
  data+filter with ``filter_resnet.lc`` and 64, the settings of ParaDL's own ranking logs.
  Three projections: paradl mode with ParaDL's current ``parallel_analysis.py``
  (``ds_source="code"``), paradl mode as the repository's published data+spatial log
  (``ds_source="log"``), and the default mode (ChainerMN-X's implementations priced on the
  ``abci`` preset, ``milp_parallel.oracle.implementation``; ``gpudirect=False``: the measured
  runs sent halos with ChainerMN's MPI point-to-point, staged through host memory). Two
  accuracies: ParaDL's, projected / measured (ParaDL reports 86.74% on average, 97.57% for
  data parallelism), which rewards over-projection; and the symmetric min / max of the two,
  which does not.
"""

from __future__ import annotations

import csv

from benchmarks.instances import DATA_DIR
from milp_parallel import oracle

DATA = DATA_DIR / "paradl"
PLAT = DATA / "ABCI.plat"
NETS = {"ResNet-50": (DATA / "RESNET50_ImageNet_profall.net_sc", 64, "resnet"),
        "VGG16": (DATA / "VGG_ImageNet_profall.net_sc", 32, "vgg")}


def scaling_tables() -> list[dict]:
    """ParaDL's SUMMARY rows for data (2-2048), filter and channel (2-64), data+filter."""
    rows = []
    for model, (net, b, short) in NETS.items():
        for codes, maxp, lc in (("d", 2048, None), ("f", 64, "filter"), ("c", 64, "filter"),
                                ("df", 2048, "filter")):
            mask = DATA / f"{lc}_{short}.lc" if lc else None
            for r in oracle.paradl_summary(net, PLAT, codes, max_devices=maxp,
                                           max_batch=262144, batch_per_device=b,
                                           layer_mask=mask):
                if r["name"] in ("filter1", "chan1"):
                    continue
                rows.append({"model": model, **r})
    return rows


def _accuracies(projected: float, measured: float) -> tuple[float, float]:
    return projected / measured, min(projected, measured) / max(projected, measured)


def measured_comparison() -> list[dict]:
    """Projected (three ways) vs measured seconds per epoch, per row of the CSV."""
    from milp_parallel import clusters
    out = []
    with open(DATA_DIR / "paradl_measured.csv") as f:
        for m in csv.DictReader(f):
            net, _, short = NETS[m["model"]]
            if m["strategy"] == "data+spatial":
                code, b, mask = "ds", 256, DATA / f"spatial_{short}.lc"
            else:
                code, b, mask = "df", 64, DATA / f"filter_{short}.lc"
            p = int(m["gpus"])
            meas = float(m["total_s"])
            row = {"model": m["model"], "strategy": m["strategy"], "gpus": p,
                   "measured_comp_s": float(m["comp_s"]),
                   "measured_comm_s": float(m["comm_s"]), "measured_s": meas}
            for tag, src in (("paradl", "code"), ("paradl_log", "log")):
                rows = oracle.paradl_summary(net, PLAT, code, max_devices=p, max_batch=262144,
                                             batch_per_device=b, layer_mask=mask,
                                             ds_source=src)
                r = next(x for x in rows if x["p"] == p)
                ratio, sym = _accuracies(r["time_s"], meas)
                row.update({f"{tag}_comp_s": r["comp_s"], f"{tag}_comm_s": r["comm_s"],
                            f"{tag}_s": r["time_s"], f"{tag}_ratio": ratio,
                            f"{tag}_accuracy": sym})
            topo = clusters.get("abci", nodes=max(1, p // 4))
            d = oracle.project(net, topo, m["strategy"], devices=[p], batch_per_device=b,
                               layer_mask=mask, gpudirect=False).rows[0]
            ratio, sym = _accuracies(d.total_s, meas)
            row.update({"default_comp_s": d.compute_s, "default_comm_s": d.comm_s,
                        "default_halo_s": d.halo_s, "default_allreduce_s": d.allreduce_s,
                        "default_allgather_s": d.allgather_s, "default_s": d.total_s,
                        "default_ratio": ratio, "default_accuracy": sym})
            # kept for the reproduction report: ParaDL's projection and its accuracy
            row.update({"projected_comp_s": row["paradl_comp_s"],
                        "projected_comm_s": row["paradl_comm_s"],
                        "projected_s": row["paradl_s"], "accuracy": row["paradl_ratio"]})
            out.append(row)
    return out


def _ranking_matches(rows: list[dict]) -> tuple[bool, list[str]]:
    notes, ok = [], True
    for p in sorted({r["gpus"] for r in rows}):
        at = [r for r in rows if r["gpus"] == p]
        best_m = min(at, key=lambda r: r["measured_s"])["strategy"]
        best_p = min(at, key=lambda r: r["projected_s"])["strategy"]
        ok &= best_m == best_p
        notes.append(f"{p} GPUs: measured best {best_m}, projected best {best_p}")
    return ok, notes


def oracle_report() -> dict:
    """Rows and markdown of both tables (for the reproduction report)."""
    scal = scaling_tables()
    comp = measured_comparison()
    n = len(comp)
    means = {k: sum(r[k] for r in comp) / n for k in (
        "paradl_ratio", "paradl_accuracy", "paradl_log_ratio", "paradl_log_accuracy",
        "default_ratio", "default_accuracy")}
    match, notes = _ranking_matches(comp)
    dmatch, dnotes = _ranking_matches([{**r, "projected_s": r["default_s"]} for r in comp])
    md = ["### ParaDL scaling tables (ABCI, paradl mode)", "",
          "| model | strategy | B | GPUs | memory GB | compute s | comm s | total s |",
          "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in scal:
        md.append(f"| {r['model']} | {r['name']} | {r['B']:g} | {r['p']} | "
                  f"{r['mem_bytes'] / 1e9:.2f} | {r['comp_s']:.1f} | {r['comm_s']:.1f} | "
                  f"{r['time_s']:.1f} |")
    md += ["", "### Projected vs measured seconds per epoch (ResNet-50)", "",
           "Measured: `data/paradl_measured.csv`. Projections: ParaDL's current code (paradl "
           "mode), the version behind its published data+spatial log, and our default mode "
           "(ChainerMN-X's implementations on the `abci` preset, halos through host memory). "
           "Accuracy: projected / measured (ParaDL's) and min / max (symmetric).", "",
           "| strategy | GPUs | measured comp/comm/total | ParaDL code total (ratio, sym) | "
           "ParaDL log total (ratio, sym) | default comp/comm/total (ratio, sym) |",
           "|---|---:|---|---|---|---|"]
    for r in comp:
        md.append(f"| {r['strategy']} | {r['gpus']} | {r['measured_comp_s']:.0f} / "
                  f"{r['measured_comm_s']:.0f} / {r['measured_s']:.0f} | "
                  f"{r['paradl_s']:.0f} ({100 * r['paradl_ratio']:.1f}%, "
                  f"{100 * r['paradl_accuracy']:.1f}%) | {r['paradl_log_s']:.0f} "
                  f"({100 * r['paradl_log_ratio']:.1f}%, {100 * r['paradl_log_accuracy']:.1f}%)"
                  f" | {r['default_comp_s']:.0f} / {r['default_comm_s']:.0f} / "
                  f"{r['default_s']:.0f} ({100 * r['default_ratio']:.1f}%, "
                  f"{100 * r['default_accuracy']:.1f}%) |")
    md += ["", f"Average, projected / measured: ParaDL's current code "
           f"{100 * means['paradl_ratio']:.1f}%, its published log "
           f"{100 * means['paradl_log_ratio']:.1f}%, default mode "
           f"{100 * means['default_ratio']:.1f}% (ParaDL reports 86.74% on average, 97.57% for "
           "data parallelism, over all its experiments).",
           f"Average, symmetric (min / max): ParaDL's current code "
           f"{100 * means['paradl_accuracy']:.1f}%, its published log "
           f"{100 * means['paradl_log_accuracy']:.1f}%, default mode "
           f"{100 * means['default_accuracy']:.1f}%.",
           f"Ranking of strategies matches the measurements at every GPU count: ParaDL "
           f"{'yes' if match else 'no'}; default mode {'yes' if dmatch else 'no'} "
           f"({'; '.join(dnotes)})."]
    return {"scaling": scal, "measured": comp, "mean_accuracy": means["paradl_ratio"],
            "means": means, "ranking_matches": match, "default_ranking_matches": dmatch,
            "markdown": "\n".join(md)}


if __name__ == "__main__":
    print(oracle_report()["markdown"])
