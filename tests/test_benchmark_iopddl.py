"""The IOPDDL benchmark's driver (benchmarks/iopddl.py) on a small instance laid out as the
contest's folder: rows timed from the load, copies run side by side, --resume by copies."""

from __future__ import annotations

import csv
import gzip
import shutil
from pathlib import Path

import pytest

from benchmarks import iopddl

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def folder(tmp_path):
    d = tmp_path / "iopddl"
    d.mkdir()
    with open(ROOT / "data" / "iopddl_example.json", "rb") as src, \
            gzip.open(d / "asplos-2025-iopddl-G.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    (d / "contest-final-results.csv").write_text("TEAM #,G\nteam01,1000\nteam02,900\n")
    return d


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_copies_run_side_by_side_each_its_own_row_and_resume_tells_them_apart(folder,
                                                                              tmp_path):
    out = tmp_path / "rows.csv"
    iopddl.run(["G"], ["auto"], 0.05, 1, out, False, folder)
    iopddl.run(["G"], ["auto"], 0.05, 1, out, True, folder, beside=1)
    rows = _rows(out)
    assert [r["copies"] for r in rows] == ["1", "2", "2"]
    for r in rows:
        assert r["status"] == "optimal" and float(r["load_s"]) > 0
        assert float(r["ratio_to_best"]) == pytest.approx(float(r["cost"]) / 900)
    # both kinds of row are in the CSV now: --resume skips both
    assert iopddl.done_keys(out) == {("G", "auto", "6", "1", "1"), ("G", "auto", "6", "1", "2")}
    iopddl.run(["G"], ["auto"], 0.05, 1, out, True, folder, beside=1)
    assert len(_rows(out)) == 3


def test_a_csv_from_before_the_copies_column_reads_as_one_copy(folder, tmp_path):
    out = tmp_path / "old.csv"
    iopddl.run(["G"], ["auto"], 0.05, 1, out, False, folder)
    old = [f for f in iopddl.FIELDS if f != "copies"]
    rows = _rows(out)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=old, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    assert iopddl.done_keys(out) == {("G", "auto", "6", "1", "1")}
    iopddl.upgrade_header(out)
    assert _rows(out)[0]["copies"] == ""
