"""The report's tables, computed from a Dataset (pandas).

Cells follow PTXBench: per task × language × architecture, over the finished sample runs (n):
  correctness_rate        share of runs with a correct candidate within the turn limit (fresh random inputs,
                          checked at run time: categories in verdict.CORRECT)
  correct_with_arch_rate  share of runs with a candidate that was correct *and* executed the architecture's
                          required instruction families at run time (verdict.CORRECT_WITH_ARCH)
  best_speedup            the best vendor-baseline speedup of a correct candidate (n: runs that have one)
and, always (no GPU needed): compile_rate, and static_rate (the required families present in the SASS).
When no run of a cell reached the GPU, the runtime columns hold the reason, e.g. "not run (no sm_100a device)".
"""

from __future__ import annotations

import math
import re

import pandas as pd

from xlang.report.data import DONE, MISSING, Dataset

TURN_LIMITS = (1, 4, 8)
KEY = ["task", "arch", "lang", "model"]

MIX_CLASSES = [
    ("tensor core: wgmma / tcgen05", r"^(HGMMA|IGMMA|QGMMA|BGMMA|UTC[A-Z]*MMA)$"),
    ("tensor core: mma.sync", r"^(HMMA|IMMA|DMMA|QMMA|OMMA)$"),
    ("TMA and bulk copies", r"^(UTMA[A-Z]*|UBLKCP|UBLKRED|UBLKPF)$"),
    ("tensor memory", r"^(LDTM|STTM|UTCATOMSWS|UTCCP|UTCBAR|UTCSHIFT)$"),
    ("shared memory", r"^(LDS|STS|LDSM|STSM|LDGSTS|ATOMS)$"),
    ("global memory", r"^(LDG|STG|LD|ST|ATOMG|ATOM|RED|REDG|LDGDEPBAR)$"),
    ("barriers and sync", r"^(SYNCS|BAR|MEMBAR|WARPGROUP|DEPBAR|FENCE|ARRIVES|ERRBAR|CCTL|CCTLL|WARPSYNC|ELECT|"
                          r"VOTE|VOTEU|REDUX|USETMAXREG|ACQBULK|UCGABAR_ARV|UCGABAR_WAIT|CGAERRBAR)$"),
    ("fp arithmetic", r"^(FFMA|FADD|FMUL|FMNMX|MUFU|HFMA2|HADD2|HMUL2|HMNMX2|F2F|F2FP|FSEL|FSETP|FCHK|F2I|I2F|"
                      r"FRND|FSWZADD|DADD|DFMA|DMUL)$"),
    ("control", r"^(BRA|BRX|EXIT|BSSY|BSYNC|CALL|RET|NOP|YIELD|JMP|JMX|BPT|BREAK|KILL|NANOSLEEP|WARPSYNC|"
                r"ENDCOLLECTIVE|PMTRIG)$"),
]
MIX_OTHER = "integer, address and other"
MIX_ORDER = [name for name, _ in MIX_CLASSES] + [MIX_OTHER]
_MIX_RE = [(name, re.compile(p)) for name, p in MIX_CLASSES]


def mix_class(opcode: str) -> str:
    for name, rx in _MIX_RE:
        if rx.match(opcode):
            return name
    return MIX_OTHER


def _runs_upto(ds: Dataset, limit: int | None) -> pd.DataFrame:
    """Per finished run: what its first `limit` turns achieved (any turn), best speedup, runtime facts."""
    runs = ds.runs[ds.runs["status"] == DONE]
    if limit is not None:
        runs = runs[runs["turns_limit"] >= limit]
    turns = ds.turns[ds.turns["run_id"].isin(runs["run_id"])]
    if limit is not None:
        turns = turns[turns["turn"] <= limit]
    agg = turns.groupby("run_id").agg(
        compiled=("compiled", "any"), census_ok=("census_ok", "any"), correct=("correct", "any"),
        correct_with_arch=("correct_with_arch", "any"), runtime_ran=("runtime_ran", "any"),
        best_speedup=("speedup", "max"), turns=("turn", "count"),
        runtime_note=("runtime_note", lambda s: next((x for x in s if x), "")),
    ) if not turns.empty else pd.DataFrame(
        columns=["compiled", "census_ok", "correct", "correct_with_arch", "runtime_ran", "best_speedup", "turns",
                 "runtime_note"])
    out = runs[["run_id", *KEY, "sample"]].merge(agg, left_on="run_id", right_index=True, how="left")
    for col in ("compiled", "census_ok", "correct", "correct_with_arch", "runtime_ran"):
        out[col] = out[col].astype("boolean").fillna(False).astype(bool)
    out["runtime_note"] = out["runtime_note"].fillna("")
    out["best_speedup"] = pd.to_numeric(out["best_speedup"], errors="coerce")
    return out


def cell_stats(ds: Dataset, limit: int | None = None) -> pd.DataFrame:
    """One row per task × arch × lang × model with the PTXBench figures and their n."""
    cols = [*KEY, "n", "missing", "unfinished", "compile_rate", "static_rate", "runtime_ran", "runtime_note",
            "n_runtime", "correctness_rate", "correct_with_arch_rate", "best_speedup", "n_speedup"]
    if ds.empty:
        return pd.DataFrame(columns=cols)
    per_run = _runs_upto(ds, limit)
    rows = []
    for key, group in ds.runs.groupby(KEY, sort=False):
        done = per_run[(per_run[KEY] == pd.Series(key, index=KEY)).all(axis=1)]
        n = len(done)
        ran = done[done["runtime_ran"]]
        speedups = done["best_speedup"].dropna()
        rows.append({
            **dict(zip(KEY, key)),
            "n": n,
            "missing": bool((group["status"] == MISSING).all()),
            "unfinished": int((~group["status"].isin([DONE, MISSING])).sum()),
            "compile_rate": done["compiled"].mean() if n else math.nan,
            "static_rate": done["census_ok"].mean() if n else math.nan,
            "runtime_ran": bool(len(ran)),
            "runtime_note": "" if len(ran) else next((x for x in done["runtime_note"] if x), ""),
            "n_runtime": len(ran),
            "correctness_rate": ran["correct"].mean() if len(ran) else math.nan,
            "correct_with_arch_rate": ran["correct_with_arch"].mean() if len(ran) else math.nan,
            "best_speedup": speedups.max() if len(speedups) else math.nan,
            "n_speedup": len(speedups),
        })
    out = pd.DataFrame(rows, columns=cols)
    return sort_cells(out)


def sort_cells(df: pd.DataFrame, by=("task", "arch", "lang")) -> pd.DataFrame:
    """Sort by task name, architecture (registry order) and language (h100, h200, b200; triton, cuda_ptx, cutedsl)."""
    from xlang.archs import archs
    from xlang.backend import LANGS

    ranks = {"arch": {a: i for i, a in enumerate(archs())}, "lang": {lang: i for i, lang in enumerate(LANGS)}}

    def key(s: pd.Series) -> pd.Series:
        return s.map(ranks[s.name]).fillna(99) if s.name in ranks else s

    return df.sort_values(list(by), kind="stable", key=key).reset_index(drop=True)


def _rate(rate: float, n: int) -> str:
    if n == 0 or (isinstance(rate, float) and math.isnan(rate)):
        return "–"
    return f"{rate * 100:.0f}% ({round(rate * n)}/{n})"


def format_cells(stats: pd.DataFrame) -> pd.DataFrame:
    """The main table as display strings (terminal, HTML, Markdown)."""
    rows = []
    for r in stats.itertuples(index=False):
        row = {"task": r.task, "arch": r.arch, "lang": r.lang}
        if len(stats["model"].unique()) > 1:
            row["model"] = r.model
        if r.missing:
            row.update({"n": "0", "compiled": "missing", "arch instructions (static)": "missing",
                        "correct": "missing", "correct with arch instructions": "missing", "best speedup": "missing"})
        else:
            note = (r.runtime_note or "not run") if r.n else "–"
            row.update({
                "n": str(r.n) + (f" (+{r.unfinished} unfinished)" if r.unfinished else ""),
                "compiled": _rate(r.compile_rate, r.n),
                "arch instructions (static)": _rate(r.static_rate, r.n),
                "correct": _rate(r.correctness_rate, r.n_runtime) if r.runtime_ran else note,
                "correct with arch instructions": (_rate(r.correct_with_arch_rate, r.n_runtime)
                                                   if r.runtime_ran else note),
                "best speedup": (f"{r.best_speedup:.2f}× (n={r.n_speedup})" if r.n_speedup else
                                 ("– (n=0)" if r.runtime_ran else note)),
            })
        rows.append(row)
    return pd.DataFrame(rows)


def turn_limit_table(ds: Dataset, limits=TURN_LIMITS) -> pd.DataFrame:
    """Correctness and correct-with-instructions rates against the turn limit, per arch × lang (all tasks)."""
    rows = []
    for limit in limits:
        per_run = _runs_upto(ds, limit)
        for (arch, lang), g in per_run.groupby(["arch", "lang"], sort=False):
            ran = g[g["runtime_ran"]]
            rows.append({
                "arch": arch, "lang": lang, "turn_limit": limit, "n": len(g), "n_runtime": len(ran),
                "static_rate": g["census_ok"].mean() if len(g) else math.nan,
                "correctness_rate": ran["correct"].mean() if len(ran) else math.nan,
                "correct_with_arch_rate": ran["correct_with_arch"].mean() if len(ran) else math.nan,
            })
    df = pd.DataFrame(rows, columns=["arch", "lang", "turn_limit", "n", "n_runtime", "static_rate",
                                     "correctness_rate", "correct_with_arch_rate"])
    return sort_cells(df, ("arch", "lang", "turn_limit"))


def best_turns(ds: Dataset) -> pd.DataFrame:
    """Each finished run's best candidate: correct with arch > correct > static ok > compiled, then speed."""
    turns = ds.turns[ds.turns["run_id"].isin(ds.runs.loc[ds.runs["status"] == DONE, "run_id"])].copy()
    if turns.empty:
        return turns
    turns["_speed"] = turns["speedup"].fillna(0.0)
    turns["_late"] = -turns["turn"]
    turns = turns.sort_values(["run_id", "correct_with_arch", "correct", "census_ok", "compiled", "_speed", "_late"],
                              ascending=[True, False, False, False, False, False, False], kind="stable")
    return turns.groupby("run_id", sort=False).head(1).drop(columns=["_speed", "_late"]).reset_index(drop=True)


def instruction_mix(ds: Dataset) -> pd.DataFrame:
    """SASS instruction mix (static census of each run's best compiled candidate), per arch × lang:
    the share of instructions in each class, with the number of candidates and instructions behind it."""
    best = best_turns(ds)
    rows = []
    if best.empty:
        return pd.DataFrame(columns=["arch", "lang", "candidates", "instructions", *MIX_ORDER])
    best = best[best["compiled"]]
    for (arch, lang), g in best.groupby(["arch", "lang"], sort=False):
        counts = {name: 0 for name in MIX_ORDER}
        candidates = 0
        for r in g.itertuples(index=False):
            ops = ds.opcodes.get((r.run_id, r.turn))
            if not ops:
                continue
            candidates += 1
            for op, n in ops.items():
                counts[mix_class(op)] += n
        total = sum(counts.values())
        if not total:
            continue
        rows.append({"arch": arch, "lang": lang, "candidates": candidates, "instructions": total,
                     **{k: v / total for k, v in counts.items()}})
    df = pd.DataFrame(rows, columns=["arch", "lang", "candidates", "instructions", *MIX_ORDER])
    return sort_cells(df, ("arch", "lang"))


def not_run(ds: Dataset) -> pd.DataFrame:
    """What was not run, and why: runtime on architectures without a device, missing expert solutions,
    runs that never finished."""
    rows = []
    stats = cell_stats(ds)
    for r in stats.itertuples(index=False):
        if r.missing:
            rows.append({"what": "candidate", "task": r.task, "arch": r.arch, "lang": r.lang,
                         "reason": f"missing: no expert solution for {r.lang} ({r.model})" if r.model == "reference"
                         else "missing"})
        elif r.n and not r.runtime_ran:
            rows.append({"what": "runtime", "task": r.task, "arch": r.arch, "lang": r.lang,
                         "reason": r.runtime_note or "not run"})
        if r.unfinished:
            rows.append({"what": "run", "task": r.task, "arch": r.arch, "lang": r.lang,
                         "reason": f"{r.unfinished} sample run(s) not finished (re-run the same compare to resume)"})
    return pd.DataFrame(rows, columns=["what", "task", "arch", "lang", "reason"])


def runtime_banners(ds: Dataset) -> list[str]:
    """One line per registered architecture whose runtime was not run (never silent about Blackwell)."""
    from xlang.archs import archs

    lines = []
    for arch in archs().values():
        turns = ds.turns[ds.turns["arch"] == arch.name] if not ds.turns.empty else ds.turns
        in_data = not ds.runs.empty and (ds.runs["arch"] == arch.name).any()
        if in_data and len(turns) and turns["runtime_ran"].any():
            continue
        label = f"{arch.name} ({arch.generation.capitalize()}, {arch.sm})"
        if not in_data:
            if arch.generation == "blackwell":
                lines.append(f"{label}: not in this comparison; {arch.generation.capitalize()} runtime was not run.")
            continue
        notes = sorted({re.sub(r"^not run\s*", "", n).strip("() ") for n in turns["runtime_note"] if n}) \
            if len(turns) else []
        why = f" ({'; '.join(notes)})" if notes else ""
        lines.append(f"{label}: {arch.generation.capitalize()} runtime was not run{why}. "
                     f"Its columns come from compilation and the static SASS census only.")
    return lines


def environment_table(ds: Dataset) -> pd.DataFrame:
    """The distinct environment fingerprints as rows of (fingerprint #, key, value)."""
    rows = []
    for i, env in enumerate(ds.environments, 1):
        for k, v in _flatten(env).items():
            rows.append({"fingerprint": i, "key": k, "value": v})
    return pd.DataFrame(rows, columns=["fingerprint", "key", "value"])


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, name + "."))
        elif isinstance(v, (list, tuple)):
            out[name] = ", ".join(map(str, v))
        else:
            out[name] = "" if v is None else str(v)
    return out
