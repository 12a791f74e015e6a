"""benchmarks/megatron.py end to end on a small table of the same format."""

from __future__ import annotations

import csv

from benchmarks import megatron as bench


def test_benchmark_reads_a_table_and_writes_one_row_per_input_row(tmp_path, capsys):
    table = tmp_path / "t.csv"
    table.write_text(",".join(bench.COLUMNS) + "\n" + "0.01,4,64,4,2,2,8,16,1,1,100\n")
    out = tmp_path / "out.csv"
    assert bench.main(["--table", str(table), "--csv", str(out)]) == 0
    rows = list(csv.DictReader(open(out)))
    assert len(rows) == 1
    r = rows[0]
    assert all(c in r for c in bench.COLUMNS)
    meg, opt = float(r["predicted_tflops_megatron_config"]), float(r["predicted_tflops_optimum"])
    assert 0 < meg <= opt * (1 + 1e-9)              # never slower than Megatron's config
    assert r["optimum_status"] == "optimal"
    assert abs(float(r["ratio_predicted_measured"]) - meg / 100) < 1e-3
    printed = capsys.readouterr().out
    assert "| params |" in printed and "0.01B" in printed
