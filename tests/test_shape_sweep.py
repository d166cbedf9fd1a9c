"""Issue 37, item 7 (what tritonbench users expect): TFLOP/s and GB/s of each cell beside its speedup, and a
--shape sweep (a list or a range of values) giving one row per shape."""

from __future__ import annotations

import json

import pytest

from report_records import run as record, verdict
from xlang.errors import XlangError
from xlang.report import tables
from xlang.report.data import from_records
from xlang.task import get_task, parse_shape, parse_shapes


def test_shape_sweep_syntax():
    assert parse_shapes(None) == [{}]
    assert parse_shapes("M=1024,N=512") == [{"M": 1024, "N": 512}]
    assert parse_shapes("M=1024,2048,N=512") == [{"M": 1024, "N": 512}, {"M": 2048, "N": 512}]
    assert [s["M"] for s in parse_shapes("M=1024:8192:x2")] == [1024, 2048, 4096, 8192]
    assert [s["S"] for s in parse_shapes("S=1024:4096:1024")] == [1024, 2048, 3072, 4096]
    assert len(parse_shapes("M=1024,2048,K=1:3:1")) == 6
    for bad in ("M=a", "1024", "M=4096:1024:x2", "M=1:8:x1", "M=1,M=2", "M=1:100000:1"):
        with pytest.raises(XlangError):
            parse_shapes(bad)
    assert parse_shape("M=1024,N=512") == {"M": 1024, "N": 512}
    with pytest.raises(XlangError, match="only `xlang compare` sweeps"):
        parse_shape("M=1024,2048")


def test_cells_carry_tflops_and_gbps_beside_the_speedup():
    """The fastest candidate correct with target: its TFLOP/s, and GB/s = the task's fewest bytes over its time."""
    task = get_task("gemm")
    shape = task.shape({})
    ok = verdict("ok", "h100", "triton", "gemm", 0.99)
    ok["timing"].update(tflops=793.0, candidate_ms=task.flops(shape) / 793e12 * 1e3)
    ok["shape"] = shape
    recs = [record("g0", "gemm", "triton", "h100", 0, [ok]),
            record("b0", "gemm", "triton", "b200", 0, [verdict("static_ok", "b200", "triton", "gemm", ran=False)])]
    for r in recs:
        r["shape"] = shape
    display = tables.format_cells(tables.cell_stats(from_records(recs)))
    cols = list(display.columns)
    assert cols.index(tables.COL_TFLOPS) == cols.index(tables.COL_SPEED) + 1
    assert cols.index(tables.COL_GBPS) == cols.index(tables.COL_TFLOPS) + 1
    h100 = display[display["arch"] == "h100"].iloc[0]
    gbps = task.min_bytes(shape) / (task.flops(shape) / 793e12) / 1e9
    assert h100[tables.COL_TFLOPS] == "793" and h100[tables.COL_GBPS] == f"{gbps:.0f}"
    b200 = display[display["arch"] == "b200"].iloc[0]
    assert b200[tables.COL_TFLOPS].startswith("not run")


@pytest.mark.slow
def test_compare_sweep_gives_one_row_per_shape(xlang, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    db = tmp_path / "r.db"
    args = ["compare", "--arch", "b200", "--langs", "triton", "--tasks", "gemm", "--profiler", "none",
            "--shape", "M=1024:2048:x2", "--store", db, "--json"]
    code, out, err = xlang(*args)
    assert code == 0, err
    rows = json.loads(out)["table"]
    assert sorted(r["shape"] for r in rows) == ["M=1024,N=7168,K=5120", "M=2048,N=7168,K=5120"]
    assert "M=1024" in err and "M=2048" in err  # the printed table (stderr with --json) has a row for each
    code, out, err = xlang(*args)  # resumed: nothing run again, the same rows
    assert code == 0 and err.count("already stored") == 2
    assert sorted(r["shape"] for r in json.loads(out)["table"]) == sorted(r["shape"] for r in rows)
    code, _, err = xlang("run", "-t", "gemm", "-l", "triton", "-a", "b200", "-m", "reference", "--profiler", "none",
                         "--shape", "M=1024,2048", "--store", db)
    assert code == 2 and "only `xlang compare` sweeps" in err
