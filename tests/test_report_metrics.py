"""pass@k (Chen et al. 2021's unbiased estimator) and KernelBench's fast_p in the report, per cell and per model,
on a scripted store whose values are known by hand; and the notes axis (a standing table with two notes levels)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from report_records import verdict
from xlang.report import metrics, source, tables
from xlang.store import Store

H = "h100"
# (run_id, model, lang, notes level, per-sample turns: (category, speedup) ...)
# m1 · gemm · h100 · triton, 5 samples: three correct with target (best speedups 1.3, 0.9, 0.5), one correct without
# executing the target families (2.0x: counts for nothing here), one never correct -> n 5, c 3.
# m1 · gemm · h100 · cuda_ptx, 2 samples: one ok at 1.25x, one incorrect -> n 2, c 1.
# m2 · gemm · h100 · triton, 1 sample, incorrect -> n 1, c 0.
RUNS = [
    ("m1-t", "m1", "triton", "none", [[("incorrect", None), ("ok", 1.3)], [("ok", 0.7), ("ok", 0.9)],
                                      [("ok", 0.5)], [("not_executed", 2.0)], [("incorrect", None)]]),
    ("m1-c", "m1", "cuda_ptx", "bm25", [[("ok", 1.25)], [("incorrect", None)]]),
    ("m2-t", "m2", "triton", "none", [[("incorrect", None)]]),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = tmp_path_factory.mktemp("metrics") / "m.db"
    with Store(db) as s:
        for run_id, model, lang, notes, samples in RUNS:
            s.create_run(run_id, task="gemm", lang=lang, arch=H, model=model, source="llm", docs_level="contracts",
                         turns_limit=2, samples=len(samples), notes_level=notes)
            for k, turns in enumerate(samples):
                s.start_sample(run_id, k)
                for i, (cat, speed) in enumerate(turns, 1):
                    v = verdict(cat, H, lang, "gemm", speed)
                    s.add_turn(run_id, k, i, messages=[], verdict=v, build=v["build"])
                s.update_sample(run_id, k, status="done")
            s.finish_run(run_id)
    return db


def test_pass_at_k_is_the_unbiased_estimator():
    assert metrics.pass_at_k(5, 3, 1) == pytest.approx(0.6)
    assert metrics.pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)  # 1 - C(7,5)/C(10,5)
    assert metrics.pass_at_k(5, 3, 5) == 1.0 and metrics.pass_at_k(4, 0, 2) == 0.0
    assert math.isnan(metrics.pass_at_k(4, 4, 5))
    lo, hi = metrics.pass_at_k_interval([(5, 3)], 1)
    assert 0.0 <= lo < 0.6 < hi <= 1.0
    # One cell: the Jeffreys interval of p (k = 1), mapped through 1 - (1 - p)^k for k > 1; it does not collapse to a
    # point when every sample passed.
    from scipy.stats import beta

    lo5, hi5 = metrics.pass_at_k_interval([(5, 5)], 1)
    assert lo5 == pytest.approx(beta.ppf(0.025, 5.5, 0.5), abs=0.02) and lo5 < 1.0 and hi5 > 0.999
    lo, hi = metrics.pass_at_k_interval([(10, 3)], 5)
    assert lo == pytest.approx(1 - (1 - beta.ppf(0.025, 3.5, 7.5)) ** 5, abs=0.02)
    assert hi == pytest.approx(1 - (1 - beta.ppf(0.975, 3.5, 7.5)) ** 5, abs=0.02)
    assert all(math.isnan(x) for x in metrics.pass_at_k_interval([(1, 1)], 1))  # one sample: no interval


def test_metrics_per_cell_and_per_model(store):
    ds = source.load(store)
    cells = metrics.metrics_table(ds, tables.cell_keys(ds)).set_index(["model", "lang"])
    t = cells.loc[("m1", "triton")]
    assert t["n"] == 5 and t["pass@1"] == pytest.approx(0.6) and t["pass@5"] == 1.0 and math.isnan(t["pass@10"])
    assert [t[f"fast_{p:g}_k"] for p in metrics.FAST_P] == [3, 2, 1, 1]
    assert t["fast_0.8"] == pytest.approx(0.4) and t["fast_1.2"] == pytest.approx(0.2)
    assert t["fast_1.2_lo"] < 0.2 < t["fast_1.2_hi"]  # the Wilson interval of 1 in 5
    c = cells.loc[("m1", "cuda_ptx")]
    assert c["pass@1"] == 0.5 and [c[f"fast_{p:g}_k"] for p in metrics.FAST_P] == [1, 1, 1, 1]
    models = metrics.metrics_table(ds, ["model"]).set_index("model")
    m1 = models.loc["m1"]
    assert m1["n"] == 7 and m1["cells"] == 2
    assert m1["pass@1"] == pytest.approx((0.6 + 0.5) / 2) and m1["pass@5"] == 1.0  # pass@5: the 5-sample cell only
    assert m1["fast_1.2"] == pytest.approx(2 / 7) and m1["fast_0"] == pytest.approx(4 / 7)
    assert models.loc["m2", "pass@1"] == 0.0 and models.loc["m2", "fast_0_k"] == 0
    shown = metrics.format_metrics(metrics.metrics_table(ds, ["model"]), ["model"]).set_index("model")
    assert shown.loc["m1", "pass@10"] == "– (n < 10)" and shown.loc["m1", "fast_1.2"].startswith("29% (2/7) [")
    assert shown.loc["m1", "pass@1"].startswith("55% [")


def test_report_command_writes_metrics_and_the_notes_table(store, tmp_path):
    from xlang.cli import app

    out = tmp_path / "rep"
    res = CliRunner().invoke(app, ["report", "--store", str(store), "--out", str(out)], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "pass@k and fast_p per model" in res.output and "29% (2/7)" in res.output
    md = (out / "report.md").read_text()
    assert "## pass@k and fast_p per cell" in md and "## pass@k and fast_p per model" in md
    assert "## Fix-note retrieval ablation" in md  # two notes levels in the store
    metrics = pd.read_csv(out / "data" / "metrics_models.csv").set_index("model")
    assert metrics.loc["m1", "pass@1"] == pytest.approx(0.55)
    notes = pd.read_csv(out / "data" / "notes.csv")
    assert set(notes["notes"]) == {"none", "bm25"}
    by = CliRunner().invoke(app, ["report", "--store", str(store), "--out", str(out), "--by", "model,notes"],
                            env={"COLUMNS": "250"})
    assert by.exit_code == 0 and "bm25" in by.output
    help_text = CliRunner().invoke(app, ["report", "--help"], env={"COLUMNS": "250"}).output
    assert "notes" in help_text


def test_one_notes_level_shows_no_notes_table(tmp_path):
    from report_records import records
    from xlang.report import write_report
    from xlang.report.data import from_records

    rep = write_report(from_records(records()), tmp_path / "r")
    assert "Fix-note retrieval ablation" not in rep.markdown.read_text()
    shown = rep.tables["metrics_display"].set_index(["task", "arch", "lang"])
    assert shown.loc[("attn_fwd", "h100", "cuda_ptx"), "pass@1"] == "missing"  # no expert solution
    assert shown.loc[("attn_fwd", "h100", "triton"), "fast_0"] == "–"  # its one sample never finished
    assert shown.loc[("gemm", "b200", "triton"), "pass@1"] == "not run (no sm_100a device)"
    assert (tmp_path / "r" / "data" / "metrics.csv").is_file()
