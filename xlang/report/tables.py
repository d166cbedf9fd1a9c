"""The report's tables, computed from a Dataset (pandas).

Scores follow PTXBench. Per group of finished sample runs (n; the group is any set of axes: task, arch, lang,
model, docs, prompt variant, context, shape, D, gqa, and the turn limit), counting each sample's first `limit`
turns:
  correctness_rate        share of samples with a correct candidate (computed the function on fresh random
                          inputs at run time: xlang.verdict.scores' `correct`), whatever its census says
  correct_with_arch_rate  share of samples with a candidate correct *with the target instructions*: correct, the
                          required families in its SASS and executed at run time (scores' correct_with_target)
  best_speedup            the best vendor-baseline speedup among candidates correct with the target instructions
  best_speedup_correct    the best speedup among all correct candidates (its own column)
  best_peer_speedup       the best speedup over the task's fastest peer that ran (a public kernel timed the same
                          way, e.g. FA4, quack) among candidates correct with the target instructions; where none
                          of those had a peer timed, peer_note says why ("not run (FA4: ... not installed)")
and, always (no GPU needed): compile_rate, and static_rate (the required families present in the SASS).
Rates are over the samples whose runtime was available (n_runtime); when none was (e.g. no B200 here), the
runtime columns hold the reason, e.g. "not run (no sm_100a device)".

Intervals (95%): Wilson score intervals for rates; for a best speedup, a percentile bootstrap over the samples
(BOOTSTRAP resamples of the group's samples with replacement, fixed seed; a sample with no qualifying candidate
counts 0): the spread of "the best of n samples" had other samples been drawn. Shown only where n > 1.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from xlang.report import marks
from xlang.report.data import DONE, MISSING, Dataset

TURN_LIMITS = (1, 4, 8)
KEY = ["task", "arch", "lang", "model"]


BOOTSTRAP = 2000
RUN_AXES = ["task", "arch", "lang", "model", "docs", "prompt_variant", "context", "notes", "suite", "shape", "D", "gqa",
            "turns_limit"]
NO_REPLY = "no reply"  # a turn whose reply could not be obtained (provider error): no category
STAT_COLUMNS = ["n", "missing", "unfinished", "compile_rate", "static_rate", "runtime_ran", "runtime_note",
                "n_runtime", "n_correct", "correctness_rate", "correctness_lo", "correctness_hi",
                "n_correct_with_arch", "correct_with_arch_rate", "correct_with_arch_lo", "correct_with_arch_hi",
                "best_speedup", "best_speedup_lo", "best_speedup_hi", "n_speedup",
                "best_speedup_correct", "best_speedup_correct_lo", "best_speedup_correct_hi", "n_speedup_correct",
                "best_peer_speedup", "best_peer_speedup_lo", "best_peer_speedup_hi", "n_peer_speedup", "peer_note",
                "best_tflops", "best_gbps", "best_suite_geomean", "verdicts", "outcome"]


def wilson(k: int, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval of k successes in n trials ((nan, nan) when n == 0): scipy.stats."""
    if n == 0:
        return math.nan, math.nan
    from scipy.stats import binomtest

    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=0.95, method="wilson")
    return max(0.0, float(ci.low)), min(1.0, float(ci.high))


def bootstrap_max(values, resamples: int = BOOTSTRAP, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap (95%) of the best of the values (one per sample; nan, a sample with none, counts 0):
    scipy.stats.bootstrap, a fixed seed."""
    import warnings

    from scipy.stats import bootstrap

    v = np.nan_to_num(np.asarray(values, dtype=float), nan=0.0)
    if len(v) < 2:
        return math.nan, math.nan
    if np.all(v == v[0]):  # every resample's best is that value (scipy warns on such data)
        return float(v[0]), float(v[0])
    options = dict(n_resamples=resamples, method="percentile", confidence_level=0.95, vectorized=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's note that few distinct values make a coarse interval
        try:
            res = bootstrap((v,), np.max, rng=np.random.default_rng(seed), **options)
        except TypeError:  # scipy before 1.15 names the generator random_state
            res = bootstrap((v,), np.max, random_state=np.random.default_rng(seed), **options)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _sum(s: pd.Series) -> float:
    return s.sum(min_count=1)  # nan (unknown) rather than 0 when no turn reported it


def per_sample(ds: Dataset, limit: int | None = None) -> pd.DataFrame:
    """One row per finished sample run: its axes and what its first `limit` turns achieved (any turn), its best
    speedups, tokens and cost. A sample whose turn limit is below `limit` is left out (it never had those turns).
    runtime_available: some turn ran, or no turn was marked "not run" (a sample whose candidates never compiled
    on a machine with the GPU still counts, as 0 correct)."""
    if limit not in ds.cache:
        ds.cache[limit] = _per_sample(ds, limit)
    return ds.cache[limit]


def _per_sample(ds: Dataset, limit: int | None) -> pd.DataFrame:
    runs = ds.runs[ds.runs["status"] == DONE]
    if limit is not None:
        runs = runs[runs["turns_limit"] >= limit]
    turns = ds.turns[ds.turns["run_id"].isin(runs["run_id"])]
    if limit is not None:
        turns = turns[turns["turn"] <= limit]
    cols = ["compiled", "census_ok", "correct", "correct_with_arch", "runtime_ran", "any_not_run", "best_category",
            "best_speedup",
            "best_speedup_correct", "best_peer_speedup", "peer_note", "best_tflops", "best_gbps", "best_suite_geomean",
            "turns", "prompt_tokens", "completion_tokens",
            "reasoning_tokens", "cost_usd", "runtime_note"]
    if turns.empty:
        agg = pd.DataFrame(columns=cols, index=pd.Index([], dtype=object, name="run_id"))
    else:
        target = turns["correct_with_arch"].astype(bool)
        t = turns.assign(target_speedup=turns["speedup"].where(target),
                         target_peer_speedup=turns["peer_speedup"].where(target),
                         target_peer_note=turns["peer_note"].where(target, ""),
                         target_tflops=turns["tflops"].where(target), target_gbps=turns["gbps"].where(target),
                         target_suite=turns["suite_geomean"].where(target),
                         not_run=turns["runtime_note"].str.startswith("not run"))
        agg = t.groupby("run_id").agg(
            compiled=("compiled", "any"), census_ok=("census_ok", "any"), correct=("correct", "any"),
            correct_with_arch=("correct_with_arch", "any"), runtime_ran=("runtime_ran", "any"),
            any_not_run=("not_run", "any"), best_speedup=("target_speedup", "max"),
            best_speedup_correct=("speedup", "max"), best_peer_speedup=("target_peer_speedup", "max"),
            peer_note=("target_peer_note", _first_text), best_tflops=("target_tflops", "max"),
            best_gbps=("target_gbps", "max"), best_suite_geomean=("target_suite", "max"), turns=("turn", "count"),
            prompt_tokens=("prompt_tokens", _sum), completion_tokens=("completion_tokens", _sum),
            reasoning_tokens=("reasoning_tokens", _sum), cost_usd=("cost_usd", _sum),
            runtime_note=("runtime_note", _first_text))
        agg["best_category"] = _best_rows(turns).set_index("run_id")["category"]
    out = runs[["run_id", *RUN_AXES, "sample"]].merge(agg, left_on="run_id", right_index=True, how="left")
    for col in ("compiled", "census_ok", "correct", "correct_with_arch", "runtime_ran", "any_not_run"):
        out[col] = out[col].astype("boolean").fillna(False).astype(bool)
    out["runtime_available"] = out["runtime_ran"] | ~out["any_not_run"]
    out["runtime_note"] = out["runtime_note"].fillna("")
    out["best_category"] = out["best_category"].fillna("")
    out["peer_note"] = out["peer_note"].fillna("")
    out["turns"] = pd.to_numeric(out["turns"], errors="coerce").fillna(0).astype(int)
    for col in ("best_speedup", "best_speedup_correct", "best_peer_speedup", "best_tflops", "best_gbps",
                "best_suite_geomean", "prompt_tokens", "completion_tokens", "reasoning_tokens", "cost_usd"):
        out[col] = pd.to_numeric(out[col], errors="coerce")
    return out.reset_index(drop=True)


def _first_text(s: pd.Series) -> str:
    return next((x for x in s if isinstance(x, str) and x), "")


def _best(values: pd.Series, n: int) -> tuple[float, float, float, int]:
    """(best, lo, hi, samples that have one) of per-sample bests over the n samples that ran."""
    have = values.dropna()
    if not len(have):
        return math.nan, math.nan, math.nan, 0
    lo, hi = bootstrap_max(values.tolist()) if n > 1 else (math.nan, math.nan)
    return float(have.max()), lo, hi, len(have)


def _group_stats(done: pd.DataFrame, group_runs: pd.DataFrame) -> dict:
    n = len(done)
    ran = done[done["runtime_available"]]
    nr = len(ran)
    kc, kt = int(ran["correct"].sum()), int(ran["correct_with_arch"].sum())
    best, best_lo, best_hi, n_best = _best(ran["best_speedup"], nr)
    best_c, best_c_lo, best_c_hi, n_best_c = _best(ran["best_speedup_correct"], nr)
    best_p, best_p_lo, best_p_hi, n_best_p = _best(ran["best_peer_speedup"], nr)
    return {
        "n": n,
        "missing": bool(len(group_runs)) and bool((group_runs["status"] == MISSING).all()),
        "unfinished": int((~group_runs["status"].isin([DONE, MISSING])).sum()),
        "compile_rate": done["compiled"].mean() if n else math.nan,
        "static_rate": done["census_ok"].mean() if n else math.nan,
        "runtime_ran": nr > 0,
        "runtime_note": "" if nr else next((x for x in done["runtime_note"] if x), ""),
        "n_runtime": nr,
        "n_correct": kc, "correctness_rate": kc / nr if nr else math.nan,
        **dict(zip(("correctness_lo", "correctness_hi"), wilson(kc, nr))),
        "n_correct_with_arch": kt, "correct_with_arch_rate": kt / nr if nr else math.nan,
        **dict(zip(("correct_with_arch_lo", "correct_with_arch_hi"), wilson(kt, nr))),
        "best_speedup": best, "best_speedup_lo": best_lo, "best_speedup_hi": best_hi, "n_speedup": n_best,
        "best_speedup_correct": best_c, "best_speedup_correct_lo": best_c_lo, "best_speedup_correct_hi": best_c_hi,
        "n_speedup_correct": n_best_c,
        "best_peer_speedup": best_p, "best_peer_speedup_lo": best_p_lo, "best_peer_speedup_hi": best_p_hi,
        "n_peer_speedup": n_best_p,
        # Why no peer speedup where candidates correct with target were timed (e.g. the peer is not installed).
        "peer_note": "" if n_best_p else _first_text(ran["peer_note"]),
        # the fastest candidate correct with target: its TFLOP/s (task FLOPs over its median time) and GB/s (the
        # fewest bytes the task must move over that time; tasks without Task.min_bytes have none)
        "best_tflops": ran["best_tflops"].max() if nr else math.nan,
        "best_gbps": ran["best_gbps"].max() if nr else math.nan,
        # --suite: the best geomean speedup over the suite's shapes among candidates correct with target
        "best_suite_geomean": ran["best_suite_geomean"].max() if nr else math.nan,
        # each finished sample's best candidate's category, counted: 'static_ok ×2, compile_error'
        "verdicts": ", ".join(f"{c} ×{k}" if k > 1 else c
                              for c, k in done["best_category"].value_counts(sort=False).items() if c),
        "outcome": marks.worst(done["best_category"]),  # its mark: the worst sample decides
    }


def _groups(runs: pd.DataFrame, keys: list[str]):
    if not keys:
        yield (), runs
        return
    for key, group in runs.groupby(keys, sort=False, dropna=False):
        yield (key if isinstance(key, tuple) else (key,)), group


def score(ds: Dataset, by=KEY, limits=None) -> pd.DataFrame:
    """The PTXBench figures per group of `by` axes (any of data.AXES). With 'turns' in `by`, or limits given, one
    row per group and turn limit (default TURN_LIMITS): each sample counted on its first `limit` turns; a limit
    longer than a group's runs is left out for that group. Otherwise each sample's whole trajectory counts."""
    by = list(by)
    keys = suite_axis(ds, [k for k in by if k != "turns"])
    with_turns = "turns" in by or limits is not None
    limits = tuple(limits or TURN_LIMITS) if with_turns else (None,)
    order = [*keys, *(["turns"] if with_turns else [])]
    if ds.empty:
        return pd.DataFrame(columns=[*order, *STAT_COLUMNS])
    rows = []
    for limit in limits:
        samples = per_sample(ds, limit)
        for key, group in _groups(ds.runs, keys):
            stats = _group_stats(samples[samples["run_id"].isin(group["run_id"])], group)
            if with_turns and limit != limits[0] and stats["n"] == 0:
                continue
            rows.append({**dict(zip(keys, key)), **({"turns": limit} if with_turns else {}), **stats})
    return sort_cells(pd.DataFrame(rows, columns=[*order, *STAT_COLUMNS]), order)


def suite_axis(ds: Dataset, keys: list[str]) -> list[str]:
    """The keys with `suite` after `task` (first when there is no task) wherever any run has a shape suite: a run with
    a suite and one without are different cells, never one group of n=2 (so every table keeps them apart)."""
    if "suite" in keys or ds.empty or not (ds.runs["suite"] != "").any():
        return list(keys)
    at = keys.index("task") + 1 if "task" in keys else 0
    return [*keys[:at], "suite", *keys[at:]]


def cell_keys(ds: Dataset) -> list[str]:
    """task × arch × lang × model, the shape suite where any run has one (compare --suite), the shape where a cell
    was run at several (a --shape sweep), and the fix-note level where the runs have several (compare --notes
    none,bm25)."""
    swept = not ds.runs.empty and (ds.runs.groupby(KEY)["shape"].nunique() > 1).any()
    keys = suite_axis(ds, [*KEY[:1], *(["shape"] if swept else []), *KEY[1:]])
    return keys + (["notes"] if not ds.runs.empty and ds.runs["notes"].nunique() > 1 else [])


def cell_stats(ds: Dataset, limit: int | None = None) -> pd.DataFrame:
    """One row per task × arch × lang × model (× shape, in a sweep) with the PTXBench figures and their n (each
    sample's first `limit` turns; all of them when None)."""
    keys = cell_keys(ds)
    if limit is None:
        return score(ds, keys)
    return score(ds, keys, (limit,)).drop(columns=["turns"])


def sort_cells(df: pd.DataFrame, by=("task", "arch", "lang")) -> pd.DataFrame:
    """Sort by the given columns: architectures in registry order (h100, h200, b200), languages in the backend registry's order
    (Backend.rank), sizes and turn limits as numbers, anything else as text."""
    from xlang.archs import archs
    from xlang.backend import lang_names

    by = [c for c in by if c in df.columns]
    if df.empty or not by:
        return df.reset_index(drop=True)
    ranks = {"arch": {a: i for i, a in enumerate(archs())}, "lang": {lang: i for i, lang in enumerate(lang_names())}}

    def key(s: pd.Series) -> pd.Series:
        if s.name in ranks:
            return s.map(ranks[s.name]).fillna(99)
        if s.name in ("D", "gqa", "turns", "turn", "turns_limit"):
            return pd.to_numeric(s, errors="coerce").fillna(-1)
        if s.name == "shape":  # M=1024 before M=8192: sizes compared as numbers
            return s.astype(str).str.replace(r"\d+", lambda m: m.group().zfill(12), regex=True)
        return s.astype(str)

    return df.sort_values(by, kind="stable", key=key).reset_index(drop=True)


# ------------------------------------------------------------------------------------------------ display

COL_MARK = "mark"  # ✓ passed, ✗ finished but failed, ○ no verdict (xlang.report.marks: the worst sample decides)
COL_VERDICT = "verdict"  # each finished sample's best candidate's category, counted
COL_STATIC = "target instr. in SASS"
COL_CORRECT = "correct"
COL_TARGET = "correct with target instr."
COL_SPEED = "best speedup (correct with target)"
COL_SPEED_ALL = "best speedup (all correct)"
COL_SPEED_PEER = "best× peer (target)"  # over the fastest peer that ran, among candidates correct with target
COL_TFLOPS = "TFLOP/s (target)"  # the fastest candidate correct with target (cells table)
COL_GBPS = "GB/s (target)"
COL_SUITE = "suite geomean× (target)"  # --suite: over the suite's shapes, the best candidate correct with target
THROUGHPUT_COLUMNS = (COL_TFLOPS, COL_GBPS, COL_SUITE)
SPEED_COLUMNS = (COL_SPEED, COL_SPEED_ALL, COL_SPEED_PEER)
RATE_COLUMNS = ("compiled", COL_STATIC, COL_CORRECT, COL_TARGET)
AXIS_LABELS = {"prompt_variant": "prompt variant", "turns_limit": "turn limit (run)", "turns": "turns",
               "gqa": "GQA group"}


def model_label(model: str) -> str:
    """A model as a table shows it: 'replay:/abs/old.db#RUN' -> 'replay:old.db', 'file:/abs/dir/x.cu' -> 'file:x.cu'
    (the whole name goes in a footnote: a column holding the path left no room for the figures); others as they are."""
    kind, sep, rest = model.partition(":")
    if not sep or kind not in ("replay", "file"):
        return model
    return f"{kind}:{Path(rest.split('#', 1)[0]).name}"


def rate_text(k: int, n: int, lo: float = math.nan, hi: float = math.nan) -> str:
    """'50% (1/2) [9–91%]': the rate, k/n, and where n > 1 the 95% Wilson interval."""
    if n == 0:
        return "–"
    text = f"{k / n * 100:.0f}% ({k}/{n})"
    if n > 1 and not math.isnan(lo):
        text += f" [{lo * 100:.0f}–{hi * 100:.0f}%]"
    return text


def speed_text(best: float, n_with: int, n: int, lo: float = math.nan, hi: float = math.nan) -> str:
    """'1.10× (2/3) [0.80–1.10]': the best speedup, how many of the n samples had a qualifying candidate, and where
    n > 1 the 95% bootstrap interval of the best."""
    if n == 0:
        return "–"
    if not n_with or best is None or math.isnan(best):
        return f"none (0/{n})"
    text = f"{best:.2f}× ({n_with}/{n})"
    if n > 1 and not math.isnan(lo):
        text += f" [{lo:.2f}–{hi:.2f}]"
    return text


def peer_text(r: dict) -> str:
    """The peer column of a group whose runtime ran: the best speedup over the fastest peer, or, where candidates
    correct with target were timed but no peer ran beside them, "not run (why)". Old records lack the fields."""
    note = r.get("peer_note") or ""
    n_with = r.get("n_peer_speedup") or 0
    if not n_with and isinstance(note, str) and note:
        return note
    best = r.get("best_peer_speedup")
    return speed_text(math.nan if best is None else best, n_with, r["n_runtime"],
                      r.get("best_peer_speedup_lo", math.nan), r.get("best_peer_speedup_hi", math.nan))


def format_scores(stats: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """A score table as display strings (terminal, HTML, Markdown): the key columns, then n and the figures."""
    rows = []
    for r in stats.to_dict("records"):
        row = {AXIS_LABELS.get(k, k): ("–" if r[k] in ("", None) else str(r[k])) for k in keys}
        n_text = str(r["n"]) + (f" (+{r['unfinished']} unfinished)" if r["unfinished"] else "")
        if r["missing"]:
            row.update({"n": "0", **{c: "missing" for c in (*RATE_COLUMNS, *SPEED_COLUMNS)}})
        elif not r["n"]:
            row.update({"n": n_text, **{c: "–" for c in (*RATE_COLUMNS, *SPEED_COLUMNS)}})
        else:
            note = r["runtime_note"] or "not run"
            nr = r["n_runtime"]
            row.update({
                "n": n_text,
                "compiled": rate_text(round(r["compile_rate"] * r["n"]), r["n"]),
                COL_STATIC: rate_text(round(r["static_rate"] * r["n"]), r["n"]),
                COL_CORRECT: rate_text(r["n_correct"], nr, r["correctness_lo"], r["correctness_hi"])
                if r["runtime_ran"] else note,
                COL_TARGET: rate_text(r["n_correct_with_arch"], nr, r["correct_with_arch_lo"],
                                      r["correct_with_arch_hi"]) if r["runtime_ran"] else note,
                COL_SPEED: speed_text(r["best_speedup"], r["n_speedup"], nr, r["best_speedup_lo"],
                                      r["best_speedup_hi"]) if r["runtime_ran"] else note,
                COL_SPEED_ALL: speed_text(r["best_speedup_correct"], r["n_speedup_correct"], nr,
                                          r["best_speedup_correct_lo"], r["best_speedup_correct_hi"])
                if r["runtime_ran"] else note,
                COL_SPEED_PEER: peer_text(r) if r["runtime_ran"] else note,
            })
        rows.append(row)
    columns = [AXIS_LABELS.get(k, k) for k in keys] + ["n", *RATE_COLUMNS, *SPEED_COLUMNS]
    return pd.DataFrame(rows, columns=columns)


def format_cells(stats: pd.DataFrame) -> pd.DataFrame:
    """The per-cell table (task × arch × lang, the shape in a sweep, and model when there are several) as display
    strings, with the fastest target candidate's TFLOP/s and GB/s beside its speedup."""
    keys = ["task", *(["suite"] if "suite" in stats.columns else []), *(["shape"] if "shape" in stats.columns else []),
            "arch", "lang"] \
        + (["model"] if stats["model"].nunique() > 1 else []) + (["notes"] if "notes" in stats.columns else [])
    out = format_scores(stats, keys)
    records = stats.to_dict("records")
    at = out.columns.get_loc("n") + 1
    out.insert(at, COL_MARK, [marks.mark(marks.NONE if r["missing"] else r.get("outcome") or marks.NONE)
                              for r in records])
    out.insert(at + 1, COL_VERDICT, ["missing" if r["missing"] else r.get("verdicts") or "–" for r in records])
    if "shape" in out.columns:  # a sweep: show the sizes that vary within each task, not the ones all share
        for task in out["task"].unique():
            rows = out["task"] == task
            parts = [text.split(",") for text in out.loc[rows, "shape"]]
            common = set.intersection(*map(set, parts)) if len(parts) > 1 else set()
            out.loc[rows, "shape"] = [",".join(p for p in ps if p not in common) or ",".join(ps) for ps in parts]
    at = out.columns.get_loc(COL_SPEED) + 1
    for col, field, digits in ((COL_TFLOPS, "best_tflops", 0), (COL_GBPS, "best_gbps", 0)):
        values = [_throughput(r, field, digits, text) for r, text in zip(stats.to_dict("records"), out[COL_SPEED])]
        out.insert(at, col, values)
        at += 1
    if "suite" in stats.columns:  # the suite's geomean speedup over its shapes, beside the timed shape's figures
        out.insert(at, COL_SUITE, [_throughput(r, "best_suite_geomean", 3, text) if r.get("suite") else "–"
                                   for r, text in zip(stats.to_dict("records"), out[COL_SPEED])])
    return out


def _throughput(r: dict, field: str, digits: int, speed_text: str) -> str:
    value = r.get(field)
    if isinstance(value, (int, float)) and not math.isnan(value):
        return f"{value:.{digits}f}"
    return speed_text if speed_text in ("missing",) or speed_text.startswith("not run") else "–"


# ------------------------------------------------------------------------------------------ the article's tables


def main_table(ds: Dataset, limits=TURN_LIMITS) -> pd.DataFrame:
    """Model × task × arch × lang at each turn limit (1, 4, 8): the article's main table."""
    return score(ds, ["model", "task", "arch", "lang"], limits)


def turn_limit_table(ds: Dataset, limits=TURN_LIMITS) -> pd.DataFrame:
    """Model × arch × lang at each turn limit, the tasks pooled (the per-task figures are the main table's)."""
    return score(ds, ["model", "arch", "lang"], limits)


def docs_table(ds: Dataset) -> pd.DataFrame:
    """The docs-level ablation: model × task × arch × lang × docs level (none / params / templates / contracts)."""
    return score(ds, ["model", "task", "arch", "lang", "docs"])


def lead_model(ds: Dataset) -> str | None:
    """The model with the most sample runs (the default of the language × architecture table)."""
    if ds.empty:
        return None
    counts = ds.runs.groupby("model").size().sort_values(ascending=False, kind="stable")
    return str(counts.index[0])


def lang_arch_table(ds: Dataset, model: str | None = None) -> tuple[str | None, pd.DataFrame]:
    """Language vs architecture for one model (default: lead_model): rows task × lang, one column per
    architecture, each cell 'correct / correct with target / best speedup (correct with target)'."""
    model = model or lead_model(ds)
    if model is None:
        return None, pd.DataFrame(columns=["task", "lang"])
    stats = score(ds.filter({"model": [model]}), ["task", "lang", "arch"])
    archs = list(dict.fromkeys(stats["arch"]))
    keys = [k for k in ("task", "suite", "lang") if k in stats.columns]  # the suite where runs have one
    rows = {}
    for r in stats.to_dict("records"):
        row = rows.setdefault(tuple(r[k] for k in keys), {k: r[k] for k in keys})
        if r["missing"]:
            text = "missing"
        elif not r["n"]:
            text = "–"
        elif not r["runtime_ran"]:
            text = f"{r['runtime_note'] or 'not run'}; static {r['static_rate'] * 100:.0f}% (n={r['n']})"
        else:
            nr = r["n_runtime"]
            best = f"{r['best_speedup']:.2f}×" if r["n_speedup"] else "–"
            text = (f"{r['n_correct'] / nr * 100:.0f}% / {r['n_correct_with_arch'] / nr * 100:.0f}% / {best} "
                    f"(n={nr})")
        row[r["arch"]] = text
    table = pd.DataFrame(list(rows.values()), columns=[*keys, *archs]).fillna("–")
    return model, sort_cells(table, keys)


def shape_table(ds: Dataset) -> pd.DataFrame:
    """Head-dim / GQA generalisation: the attention runs per model × task × arch × lang × D × GQA group."""
    if ds.empty:
        return score(ds, ["model", "task", "arch", "lang", "D", "gqa"])
    attention = ds.runs.loc[ds.runs["D"] != "", "run_id"]
    return score(ds.filter({"run_id": list(attention)}) if len(attention) else ds.filter({"run_id": []}),
                 ["model", "task", "arch", "lang", "D", "gqa"])


def notes_table(ds: Dataset) -> pd.DataFrame:
    """The fix-note retrieval ablation: model × task × arch × lang × notes level (none / bm25 / bm25+kernel)."""
    return score(ds, ["model", "task", "arch", "lang", "notes"])


def best_turns(ds: Dataset) -> pd.DataFrame:
    """Each finished run's best candidate: correct with arch > correct > static ok > compiled, then speed."""
    return _best_rows(ds.turns[ds.turns["run_id"].isin(ds.runs.loc[ds.runs["status"] == DONE, "run_id"])])


def _best_rows(turns: pd.DataFrame) -> pd.DataFrame:
    """best_turns of these turns: per run the first of correct with arch > correct > static ok > compiled > speed."""
    turns = turns.copy()
    if turns.empty:
        return turns
    turns["_speed"] = turns["speedup"].fillna(0.0)
    turns["_late"] = -turns["turn"]
    turns = turns.sort_values(["run_id", "correct_with_arch", "correct", "census_ok", "compiled", "_speed", "_late"],
                              ascending=[True, False, False, False, False, False, False], kind="stable")
    return turns.groupby("run_id", sort=False).head(1).drop(columns=["_speed", "_late"]).reset_index(drop=True)
