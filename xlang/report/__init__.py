"""Reports: the language × architecture tables (pandas), plots (matplotlib), index.html (Jinja2), report.md,
and CSV (and Parquet where pyarrow or fastparquet is installed) of every table.

    write_report(dataset, out_dir) -> Report        # dataset: xlang.report.data.Dataset
    load(store_path) -> Dataset                     # xlang.report.source: the SQLite results store
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from xlang.report import plots, tables
from xlang.report.data import Dataset


@dataclass
class Report:
    out: Path
    index: Path
    markdown: Path
    csv: list[Path] = field(default_factory=list)
    parquet: list[Path] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    parquet_note: str = ""


def parquet_engine() -> str | None:
    for name in ("pyarrow", "fastparquet"):
        if importlib.util.find_spec(name) is not None:
            return name
    return None


def _version() -> str:
    try:
        from xlang import __version__

        return __version__
    except ImportError:
        return ""


def _cell_class(column: str, text: str) -> str:
    if text == "missing":
        return "missing"
    if text.startswith("not run"):
        return "notrun"
    if column in ("correct", "correct with arch instructions", "compiled", "arch instructions (static)") \
            and "%" in text:
        pct = float(text.split("%")[0])
        return "num " + ("good" if pct >= 75 else "mid" if pct > 0 else "bad")
    if column in ("best speedup", "n"):
        return "num"
    return ""


def _main_rows(display: pd.DataFrame) -> dict:
    rows, last_task = [], None
    for _, r in display.iterrows():
        cells = [(str(r[c]), _cell_class(c, str(r[c]))) for c in display.columns]
        rows.append({"cells": cells, "group": last_task is not None and r["task"] != last_task})
        last_task = r["task"]
    return {"columns": list(display.columns), "rows": rows}


def _pct_frame(df: pd.DataFrame, cols) -> pd.DataFrame:
    out = df.copy()
    for c in cols:
        if c in out:
            out[c] = out[c].map(lambda v: "–" if v is None or (isinstance(v, float) and math.isnan(v))
                                else f"{v * 100:.0f}%")
    return out


def _html_table(df: pd.DataFrame) -> str:
    if df.empty:
        return ""
    return df.to_html(index=False, border=0, escape=True, na_rep="–")


def markdown_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "_(empty)_\n"
    cols = [str(c) for c in df.columns]

    def esc(v) -> str:
        return ("–" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)).replace("|", "\\|")

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(esc(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def compute_tables(ds: Dataset) -> dict[str, pd.DataFrame]:
    stats = tables.cell_stats(ds)
    return {
        "main": stats,
        "main_display": tables.format_cells(stats),
        "turn_limits": tables.turn_limit_table(ds),
        "instruction_mix": tables.instruction_mix(ds),
        "not_run": tables.not_run(ds),
        "environment": tables.environment_table(ds),
        "runs": ds.runs,
        "turns": ds.turns,
    }


def write_report(ds: Dataset, out: Path, title: str | None = None) -> Report:
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    out = Path(out)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    (out / "data").mkdir(parents=True, exist_ok=True)
    t = compute_tables(ds)
    archs, langs, tasks = (ds.archs(), ds.langs(), ds.tasks()) if not ds.empty else ([], [], [])

    plot_files = [
        (plots.speedup_plot(t["main"], archs, langs, tasks, out / "plots" / "best_speedup.png"),
         "Best speedup per task × language × architecture",
         "Best speedup of a correct candidate over the vendor baseline (cuBLAS / cuDNN, timed the same way); "
         "dashed line: parity. Panels without a device say why runtime was not run."),
        (plots.turn_limit_plot(t["turn_limits"], archs, langs, out / "plots" / "turn_limit.png"),
         "Correctness and correct-with-instructions rates against the turn limit",
         "Share of sample runs with a correct candidate (solid) and a correct one that executed the required "
         "instructions (dashed) within 1, 4 and 8 turns; where runtime was not run, the static census (dotted)."),
        (plots.mix_plot(t["instruction_mix"], out / "plots" / "instruction_mix.png"),
         "SASS instruction mix per language",
         "Static SASS census of each run's best compiled candidate, per language and architecture."),
    ]

    engine = parquet_engine()
    report = Report(out, out / "index.html", out / "report.md", plots=[p for p, _, _ in plot_files])
    for name in ("main", "main_display", "turn_limits", "instruction_mix", "not_run", "environment", "runs", "turns"):
        df = t[name]
        path = out / "data" / f"{name}.csv"
        df.to_csv(path, index=False)
        report.csv.append(path)
        if engine:
            ppath = out / "data" / f"{name}.parquet"
            df.astype({c: "string" for c in df.columns if df[c].dtype == object}).to_parquet(
                ppath, index=False, engine=engine)
            report.parquet.append(ppath)
    report.parquet_note = (f"Parquet written with {engine}." if engine else
                           "Parquet not written: neither pyarrow nor fastparquet is installed here "
                           "(pip install pyarrow, then run xlang report again); the CSV files hold the same tables.")

    banners = tables.runtime_banners(ds)
    stats = t["main"]
    done = ds.runs[ds.runs["status"] == "done"] if not ds.empty else ds.runs
    n_missing = int((ds.runs["status"] == "missing").sum()) if not ds.empty else 0
    summary = [
        ("sample runs finished" + (f" ({n_missing} more missing)" if n_missing else ""),
         f"{len(done)}/{len(ds.runs) - n_missing}"),
        ("candidates evaluated", str(len(ds.turns))),
        ("cells (task × arch × lang)", str(len(stats))),
        ("cells with runtime results", str(int(stats["runtime_ran"].sum())) if len(stats) else "0"),
        ("missing solutions", str(int(stats["missing"].sum())) if len(stats) else "0"),
    ]
    models = sorted(ds.runs["model"].dropna().unique()) if not ds.empty else []
    title = title or f"xlang report — {', '.join(langs) or 'no languages'} on {', '.join(archs) or 'no architecture'}"
    generated = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    files = [str(p.relative_to(out)) for p in [*report.csv, *report.parquet]] + ["report.md"]
    envs = [list(tables._flatten(e).items()) for e in ds.environments]

    env = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                      autoescape=select_autoescape(["html", "j2"]))
    html = env.get_template("index.html.j2").render(
        title=title, generated=generated, source=ds.source or "(in memory)", models=models,
        n_runs=len(ds.runs), n_turns=len(ds.turns), banners=banners, summary=summary,
        main=_main_rows(t["main_display"]),
        plots=[{"src": str(p.relative_to(out)), "alt": alt, "caption": cap} for p, alt, cap in plot_files],
        turn_table=_html_table(_pct_frame(t["turn_limits"], ["static_rate", "correctness_rate",
                                                             "correct_with_arch_rate"])),
        mix_table=_html_table(_pct_frame(t["instruction_mix"], tables.MIX_ORDER)),
        not_run_table=_html_table(t["not_run"]), environments=envs, files=files,
        parquet_note=report.parquet_note, version=_version(),
    )
    report.index.write_text(html)

    md = [f"# {title}\n", f"Generated {generated} from `{ds.source or '(in memory)'}`; models: "
          f"{', '.join(models) or '–'}; {len(ds.runs)} sample runs, {len(ds.turns)} evaluated candidates.\n"]
    md += [f"> **Not run.** {line}\n" for line in banners]
    md += ["## Main table\n", markdown_table(t["main_display"])]
    md += ["## Plots\n"] + [f"![{alt}]({p.relative_to(out)})\n" for p, alt, _ in plot_files]
    md += ["## Rates against the turn limit\n",
           markdown_table(_pct_frame(t["turn_limits"], ["static_rate", "correctness_rate", "correct_with_arch_rate"]))]
    md += ["## SASS instruction mix per language\n", markdown_table(_pct_frame(t["instruction_mix"], tables.MIX_ORDER))]
    md += ["## What was not run\n", markdown_table(t["not_run"]) if len(t["not_run"]) else "Everything ran.\n"]
    md += ["## Environment fingerprints\n"]
    for i, e in enumerate(envs, 1):
        md += [f"### #{i}\n", markdown_table(pd.DataFrame(e, columns=["key", "value"]))]
    if not envs:
        md += ["No fingerprint recorded.\n"]
    md += ["## Files\n", "\n".join(f"- [{f}]({f})" for f in files) + "\n", report.parquet_note + "\n"]
    report.markdown.write_text("\n".join(md))
    return report
