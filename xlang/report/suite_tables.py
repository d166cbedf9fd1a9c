"""The report's shape-suite tables (xlang/suites.py, `--suite`): per cell the one candidate shown (the best suite geomean
among candidates correct with the target instructions), its suite summary and its per-shape figures."""

from __future__ import annotations
import pandas as pd
from xlang.report.data import SUITE_SHAPE_COLUMNS, Dataset
from xlang.report.tables import sort_cells


SUITE_KEY = ["task", "suite", "arch", "lang", "model"]


SUITE_COLUMNS = [*SUITE_KEY, "candidate", "with target", "shapes", "geomean× vendor", "time-weighted× vendor",
                 "worst shape", "TFLOP/s (min–max)"]


SUITE_SHAPE_TABLE_COLUMNS = [*SUITE_KEY, "layer", "shape", "ms", "vendor ms", "TFLOP/s", "vendor TFLOP/s", "GB/s",
                             "× vendor"]


def suite_candidates(ds: Dataset) -> pd.DataFrame:
    """Per task × suite × arch × lang × model, the one candidate the suite tables show: the best suite geomean
    among candidates correct with the target instructions, else among the correct ones (with target: False).
    Columns: the key, run_id, turn, with_target, suite_geomean, suite_worst."""
    cols = [*SUITE_KEY, "run_id", "turn", "with_target", "suite_geomean", "suite_worst"]
    if ds.empty or ds.turns.empty:
        return pd.DataFrame(columns=cols)
    turns = ds.turns[ds.turns["suite_geomean"].notna()]
    if turns.empty:
        return pd.DataFrame(columns=cols)
    turns = turns.merge(ds.runs[["run_id", "suite"]], on="run_id", how="left")
    turns = turns.assign(with_target=turns["correct_with_arch"].astype(bool))
    turns = turns.sort_values(["with_target", "suite_geomean"], ascending=[False, False], kind="stable")
    best = turns.groupby(SUITE_KEY, sort=False, dropna=False).head(1)
    return sort_cells(best[cols], SUITE_KEY)


def suite_table(ds: Dataset) -> pd.DataFrame:
    """One row per task × suite × arch × lang × model: its shown candidate's suite summary (geomean and
    time-weighted speedup over the vendor, the worst shape, the range of TFLOP/s over the suite's shapes)."""
    rows = []
    for r in suite_candidates(ds).to_dict("records"):
        shapes = ds.suite_shapes[(ds.suite_shapes["run_id"] == r["run_id"]) & (ds.suite_shapes["turn"] == r["turn"])]
        c_ms = pd.to_numeric(shapes["candidate_ms"], errors="coerce")
        b_ms = pd.to_numeric(shapes["baseline_ms"], errors="coerce")
        tflops = pd.to_numeric(shapes["tflops"], errors="coerce").dropna()
        rows.append({**{k: r[k] for k in SUITE_KEY}, "candidate": f"{r['run_id']} turn {r['turn']}",
                     "with target": "yes" if r["with_target"] else "no (correct only)", "shapes": str(len(shapes)),
                     "geomean× vendor": f"{r['suite_geomean']:.3f}",
                     "time-weighted× vendor": f"{b_ms.sum() / c_ms.sum():.3f}" if len(shapes) and c_ms.sum() else "–",
                     "worst shape": r["suite_worst"] or "–",
                     "TFLOP/s (min–max)": f"{tflops.min():.0f}–{tflops.max():.0f}" if len(tflops) else "–"})
    return pd.DataFrame(rows, columns=SUITE_COLUMNS)


def suite_shape_points(ds: Dataset) -> pd.DataFrame:
    """The shown candidates' per-shape figures as numbers (Dataset.suite_shapes rows, the key's suite and model
    from their cell), in suite order: what the per-shape table and plot show."""
    parts = []
    for r in suite_candidates(ds).to_dict("records"):
        shapes = ds.suite_shapes[(ds.suite_shapes["run_id"] == r["run_id"]) & (ds.suite_shapes["turn"] == r["turn"])]
        parts.append(shapes.assign(**{k: r[k] for k in SUITE_KEY}))
    if not parts:
        return pd.DataFrame(columns=SUITE_SHAPE_COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    for col in ("candidate_ms", "baseline_ms", "speedup", "tflops", "baseline_tflops", "gbps"):
        out[col] = pd.to_numeric(out[col], errors="coerce")
    return out


def suite_shape_table(ds: Dataset) -> pd.DataFrame:
    """The per-shape view (tritonbench's): for each shown candidate (suite_candidates), one row per suite shape
    with its latency, the vendor's, TFLOP/s, GB/s (Task.min_bytes over the latency) and the speedup."""
    def num(x, digits):
        return "–" if pd.isna(x) else f"{x:.{digits}f}"

    rows = [{**{k: s[k] for k in SUITE_KEY}, "layer": s["label"], "shape": s["shape"],
             "ms": num(s["candidate_ms"], 4), "vendor ms": num(s["baseline_ms"], 4), "TFLOP/s": num(s["tflops"], 1),
             "vendor TFLOP/s": num(s["baseline_tflops"], 1), "GB/s": num(s["gbps"], 0),
             "× vendor": num(s["speedup"], 3)} for s in suite_shape_points(ds).to_dict("records")]
    return pd.DataFrame(rows, columns=SUITE_SHAPE_TABLE_COLUMNS)
