"""pass@k and fast_p (KernelBench's fast_p: correct and faster than p x the vendor) per group, with their intervals: the
metrics table of `xlang report`."""

from __future__ import annotations
import math
import numpy as np
import pandas as pd
from xlang.report.data import MISSING, Dataset
from xlang.report.tables import AXIS_LABELS, KEY, _first_text, _groups, cell_keys, per_sample, rate_text, sort_cells, wilson


PASS_K = (1, 5, 10)


FAST_P = (0.0, 0.8, 1.0, 1.2)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator of Chen et al. 2021 (Evaluating Large Language Models Trained on Code): the
    chance that k of the n samples drawn without replacement hold at least one of the c correct ones,
    1 - C(n-c, k) / C(n, k); nan when n < k."""
    if n < k or k < 1:
        return math.nan
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


PASS_K_DRAWS = 20000  # the pass@k interval's draws: its 2.5 percentile of a skewed posterior within about 0.01


def pass_at_k_interval(cells: list[tuple[int, int]], k: int, draws: int = PASS_K_DRAWS,
                       seed: int = 0) -> tuple[float, float]:
    """95% interval of the mean pass@k over cells [(n, c), ...] (those with n >= k): each cell's per-sample chance of
    success p drawn from its Jeffreys posterior Beta(c + 1/2, n - c + 1/2), pass@k = 1 - (1 - p)^k (what the
    unbiased estimator estimates), averaged over the cells; the 2.5 and 97.5 percentiles of `draws` draws (fixed
    seed). Unlike a bootstrap of the samples it does not collapse to a point when every sample passed or none did.
    (nan, nan) when no cell has two samples."""
    cells = [(n, c) for n, c in cells if n >= k]
    if not cells or all(n < 2 for n, _ in cells):
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    total = np.zeros(draws)
    for n, c in cells:
        chance = rng.beta(c + 0.5, n - c + 0.5, size=draws)
        total += 1.0 - (1.0 - chance) ** k
    means = total / len(cells)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


METRIC_COLUMNS = ["n", "cells", "state", "runtime_note",
                  *[f"{name}{suffix}" for k in PASS_K for name in (f"pass@{k}",) for suffix in ("", "_lo", "_hi")],
                  *[f"{name}{suffix}" for p in FAST_P for name in (f"fast_{p:g}",)
                    for suffix in ("", "_k", "_lo", "_hi")]]


def metrics_table(ds: Dataset, by=KEY) -> pd.DataFrame:
    """pass@k (PASS_K) and KernelBench's fast_p (FAST_P) per group of `by` axes, each sample's whole trajectory
    counted, over the samples whose runtime ran (n). A sample passes when one of its candidates is correct with the
    target instructions; it is fast_p when it passes and its best speedup over the vendor among those candidates
    is above p (fast_0: passes). pass@k: the unbiased estimator per cell (task × arch × lang × model, and the shape
    in a sweep) averaged over the group's cells with at least k samples, with a Jeffreys interval
    (pass_at_k_interval); fast_p: the share of the group's samples, with a Wilson interval. state: "missing" (no
    expert solution), "unfinished" (no finished sample) or "" (figures below)."""
    by = list(by)
    cols = [*by, *METRIC_COLUMNS]
    if ds.empty:
        return pd.DataFrame(columns=cols)
    samples = per_sample(ds)
    cell = cell_keys(ds)
    rows = []
    for key, group in _groups(ds.runs, by):
        s = samples[samples["run_id"].isin(group["run_id"])]
        ran = s[s["runtime_available"]]
        row = {**dict(zip(by, key)), "n": len(ran), "runtime_note": "" if len(ran) else _first_text(s["runtime_note"]),
               "state": "missing" if len(group) and (group["status"] == MISSING).all() else
               "unfinished" if not len(s) else ""}
        counts = [(len(g), int(g["correct_with_arch"].sum())) for _, g in _groups(ran, cell)] if len(ran) else []
        row["cells"] = len(counts)
        for k in PASS_K:
            values = [pass_at_k(n, c, k) for n, c in counts if n >= k]
            row[f"pass@{k}"] = float(np.mean(values)) if values else math.nan
            row[f"pass@{k}_lo"], row[f"pass@{k}_hi"] = pass_at_k_interval(counts, k)
        for p in FAST_P:
            speed = ran["best_speedup"]
            fast = ran["correct_with_arch"] & ((p == 0) | (speed.fillna(0.0) > p))
            hits = int(fast.sum())
            name = f"fast_{p:g}"
            row[name], row[f"{name}_k"] = (hits / len(ran) if len(ran) else math.nan), hits
            row[f"{name}_lo"], row[f"{name}_hi"] = wilson(hits, len(ran))
        rows.append(row)
    return sort_cells(pd.DataFrame(rows, columns=cols), by)


def format_metrics(stats: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The pass@k / fast_p table as display strings: 'pass@k' as a share with its interval ('–' where no cell has k
    samples), fast_p as a rate with k/n and its Wilson interval."""
    rows = []
    for r in stats.to_dict("records"):
        row = {AXIS_LABELS.get(k, k): ("–" if r[k] in ("", None) else str(r[k])) for k in keys}
        row["n"], row["cells"] = str(r["n"]), str(r["cells"])
        empty = {"missing": "missing", "unfinished": "–"}.get(r["state"]) or r["runtime_note"] or "not run"
        for k in PASS_K:
            v, lo, hi = r[f"pass@{k}"], r[f"pass@{k}_lo"], r[f"pass@{k}_hi"]
            if not r["n"]:
                text = empty
            elif math.isnan(v):
                text = f"– (n < {k})"
            else:
                text = f"{v * 100:.0f}%" + (f" [{lo * 100:.0f}–{hi * 100:.0f}%]" if not math.isnan(lo) else "")
            row[f"pass@{k}"] = text
        for p in FAST_P:
            name = f"fast_{p:g}"
            row[name] = rate_text(r[f"{name}_k"], r["n"], r[f"{name}_lo"], r[f"{name}_hi"]) if r["n"] else empty
        rows.append(row)
    columns = [AXIS_LABELS.get(k, k) for k in keys] + ["n", "cells", *[f"pass@{k}" for k in PASS_K],
                                                        *[f"fast_{p:g}" for p in FAST_P]]
    return pd.DataFrame(rows, columns=columns)
