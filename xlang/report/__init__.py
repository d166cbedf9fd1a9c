"""Reports: every table of the PTXBench article from one store (pandas), plots (matplotlib), index.html
(Jinja2), report.md, and CSV (and Parquet where pyarrow or fastparquet is installed) of every table.

    write_report(dataset, out_dir, ...) -> Report  # dataset: xlang.report.data.Dataset
    load(store_path) -> Dataset                    # xlang.report.source: the SQLite results store

The tables (SECTIONS, in order): main (model × task × arch × lang at 1, 4 and 8 turns), cells (the same at each
run's own turn limit), turn limits (tasks pooled), docs-level ablation, fix-note ablation (when the runs have more
than one notes level), pass@k and fast_p per cell and per model, language vs architecture for one model,
head-dim / GQA generalisation, the shape suites (summary and per shape, when runs have one), error categories per turn, turn-to-turn transitions, tokens against best speedup,
cost; then the SASS instruction mix, what was not run, and the environment fingerprints.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from xlang.report import marks, metrics, mix, plots, provenance, suite_tables, tables, turn_tables
from xlang.report.data import Dataset

# (name, title, what it shows, the `xlang report --by` grouping that gives the same figures)
SECTIONS = [
    ("main", "Main table: model × task × architecture × language at 1, 4 and 8 turns",
     "Each sample counted on its first 1, 4 or 8 turns (a sample whose turn limit is shorter is left out at the "
     "longer limits).", "--by model,task,arch,lang,turns"),
    ("cells", "Per cell, whole trajectories",
     "Each sample's whole trajectory, at its run's own turn limit.", "--by task,arch,lang,model"),
    ("turn_limits", "Rates against the turn limit, per model (tasks pooled)",
     "The tasks of a model pooled: each sample counted on its first 1, 4 or 8 turns.", "--by model,arch,lang,turns"),
    ("docs", "Docs-level ablation",
     "The same cells per architecture-docs level given to the model (none, params, templates, contracts).",
     "--by model,task,arch,lang,docs"),
    ("notes", "Fix-note retrieval ablation",
     "The same cells per fix-note level of the loop (none, bm25, bm25+kernel: xlang run / compare --notes); shown "
     "when the runs have more than one level.", "--by model,task,arch,lang,notes"),
    ("metrics", "pass@k and fast_p per cell",
     "Whole trajectories; n: samples whose runtime ran. pass@k: the unbiased estimator of Chen et al. 2021, "
     "1 − C(n−c, k)/C(n, k), c the samples with a candidate correct with the target instructions ('– (n < k)': too "
     "few samples), with a 95% interval from each cell's Jeffreys posterior of the per-sample success chance p "
     "mapped through 1 − (1 − p)^k; fast_p (KernelBench): the share of samples with a candidate "
     "correct with the target instructions whose best speedup over the vendor is above p (fast_0: correct with "
     "target), with a 95% Wilson interval.", ""),
    ("metrics_models", "pass@k and fast_p per model",
     "pass@k: the mean over the model's cells that have at least k samples (cells: how many have any), the "
     "interval from the cells' Jeffreys posteriors drawn together; fast_p: over all the model's samples pooled.", ""),
    ("lang_arch", "Language vs architecture",
     "One model (--model; default: the one with the most samples); each cell: correct / correct with the "
     "target instructions / best speedup among candidates correct with target (n: samples whose runtime ran).",
     "--by task,lang,arch --where model=MODEL"),
    ("shapes", "Head-dim and GQA generalisation (attention tasks)",
     "Attention runs per head dim D and GQA group (query heads per key/value head, H / HKV).",
     "--by model,task,arch,lang,D,gqa"),
    ("suites", "Shape suites: summary per cell",
     "Runs with --suite (xlang tasks --suites): per task × suite × arch × lang × model, one candidate, the best "
     "geomean speedup over the vendor across the suite's shapes among candidates correct with the target "
     "instructions (else among the correct ones, 'with target: no'); every shape of the suite was among its "
     "correctness trials. Time-weighted: the vendor's total time over the candidate's across the shapes. Shown "
     "when runs have a suite.", "--by task,suite,arch,lang,model"),
    ("suite_shapes", "Shape suites: per shape",
     "The same candidates, one row per suite shape: median latency (CUPTI kernel span, L2 flushed), the vendor's, "
     "TFLOP/s (the task's FLOPs over the latency), GB/s (the fewest bytes the task must move over the latency) and "
     "the speedup over the vendor.", ""),
    ("errors", "Error categories per turn",
     "How many candidates ended in each category (the first failing stage) at each turn index, over the finished "
     "samples that reached that turn.", ""),
    ("transitions", "Turn-to-turn transitions",
     "How often a sample's category at turn t was followed by each category at turn t+1; share: of the "
     "transitions from that category.", ""),
    ("tokens", "Tokens (reasoning included) against best speedup",
     "Completion tokens include the reasoning tokens; the reasoning tokens alone where the provider reports them. "
     "Best speedup: among candidates correct with the target instructions.", ""),
    ("cost", "Cost",
     "USD as litellm prices each reply (0 for models it cannot price); per sample and per sample that reached a "
     "candidate correct with the target instructions.", ""),
]
TABLE_FILES = ("main", "main_display", "cells", "cells_display", "turn_limits", "docs", "notes", "metrics",
               "metrics_display", "metrics_models", "metrics_models_display", "lang_arch", "shapes", "suites",
               "suite_shapes",
               "errors", "transitions", "tokens", "cost", "instruction_mix", "not_run", "environment", "runs", "turns")
DEFINITIONS = (
    "<b>correct</b>: a candidate computed the function on fresh random inputs at run time (whatever its census "
    "says); <b>correct with target instr.</b>: and the architecture's required instruction families are in its "
    "SASS and executed at run time; <b>best speedup (correct with target)</b>: over the vendor baseline timed the "
    "same way, the best candidate correct with the target instructions; <b>best speedup (all correct)</b>: the "
    "best of all correct candidates; <b>best× peer (target)</b>: the same candidates against the task's fastest "
    "peer that ran (a public kernel, FA4 for attention, quack for GEMM, timed the same way when installed; "
    "\"not run\" with the reason where none ran). <b>compiled</b> and <b>target instr. in SASS</b> need no GPU. A rate shows "
    "k/n (n: samples whose runtime ran) and, where n &gt; 1, a 95% Wilson interval; a speedup shows how many "
    "samples had a qualifying candidate and, where n &gt; 1, a 95% percentile-bootstrap interval of the best "
    "over the samples (2000 resamples; a sample with none counts 0). <b>pass@k</b>: the chance that k samples of "
    "a cell hold one correct with the target instructions (Chen et al. 2021's unbiased estimator); <b>fast_p</b>: "
    "the share of samples correct with the target instructions and faster than p × the vendor (KernelBench).")


@dataclass
class Report:
    out: Path
    index: Path
    markdown: Path
    csv: list[Path] = field(default_factory=list)
    parquet: list[Path] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    parquet_note: str = ""
    tables: dict = field(default_factory=dict)


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


def _with_mark(display: pd.DataFrame) -> pd.DataFrame:
    """The cells table for the page: the mark before the verdict in one column, joined by a no-break space (a
    column of its own made the table wider than a 1280 px page)."""
    out = display.drop(columns=[tables.COL_MARK])
    out[tables.COL_VERDICT] = [f"{m}\u00a0{v}" for m, v in zip(display[tables.COL_MARK], display[tables.COL_VERDICT])]
    return out


def _cell_class(column: str, text: str) -> str:
    if column == tables.COL_VERDICT:
        return "verdict " + {m: o for o, m in marks.MARKS.items()}.get(text[:1], "")
    if text == "missing":
        return "missing"
    if text.startswith("not run"):
        return "notrun"
    if column in tables.RATE_COLUMNS and "%" in text:
        pct = float(text.split("%")[0])
        return "num " + ("good" if pct >= 75 else "mid" if pct > 0 else "bad")
    if column in (*tables.SPEED_COLUMNS, *tables.THROUGHPUT_COLUMNS, "n") or column.endswith("speedup"):
        return "num"
    return ""


NOTE_MARKS = "¹²³⁴⁵⁶⁷⁸⁹"


def _rows(display: pd.DataFrame, group: str | None = "task") -> dict:
    """A table for the HTML page. A "not run (why)" is said once, under the table, and marked in the cells
    ("not run¹"): repeated in every runtime column it made the columns wide and each cell four lines tall."""
    rows, last, notes = [], None, {}

    def note(text: str) -> str:
        if text not in notes:
            notes[text] = NOTE_MARKS[len(notes)] if len(notes) < len(NOTE_MARKS) else f"[{len(notes) + 1}]"
        return notes[text]

    def short(column: str, text: str) -> str:
        if column == "model" and tables.model_label(text) != text:  # the whole name (a path) in a footnote
            return tables.model_label(text) + note(text)
        if not text.startswith("not run (") or len(text) <= len("not run ()"):
            return text
        return f"not run{note(text)}"

    for r in display.to_dict("records"):
        cells = []
        for c in display.columns:
            text, cls = short(str(c), _text(r[c])), _cell_class(str(c), _text(r[c]))
            if cls.startswith("num"):  # '100% (1/1)' stays on one line; an interval after it may wrap
                text = text.replace(" (", "\u00a0(")
            cells.append((text, cls))
        key = r.get(group) if group else None
        rows.append({"cells": cells, "group": last is not None and key != last})
        last = key
    # headers wrap between words: completion_tokens_per_turn is shown as "completion tokens per turn"
    return {"columns": [str(c).replace("_", " ") for c in display.columns], "rows": rows,
            "notes": [f"{mark} {text}" for text, mark in notes.items()]}


def _text(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _pct_frame(df: pd.DataFrame, cols) -> pd.DataFrame:
    out = df.copy()
    for c in cols:
        if c in out:
            out[c] = out[c].map(lambda v: "–" if v is None or (isinstance(v, float) and math.isnan(v))
                                else f"{v * 100:.0f}%")
    return out


def _counts_frame(errors: pd.DataFrame) -> pd.DataFrame:
    """Error counts as 'k (p%)' of the turn's n."""
    out = errors.copy()
    for c in out.columns:
        if c in turn_tables.category_order(out.columns):
            out[c] = [f"{k} ({k / n * 100:.0f}%)" if k else "–" for k, n in zip(errors[c], errors["n"])]
    return out


def _round_frame(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for c in out.columns:
        if out[c].dtype.kind == "f":
            out[c] = out[c].map(_text)
    return out


def markdown_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "_(empty)_\n"
    cols = [str(c) for c in df.columns]

    def esc(v) -> str:
        return _text(v).replace("|", "\\|")

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(esc(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def _keys(df: pd.DataFrame, keys: list[str]) -> list[str]:
    """Key columns, leaving out the model when there is only one, with the suite wherever the scores have it
    (tables.suite_axis: suite runs are cells of their own, shown as such)."""
    keys = [k for k in keys if k != "model" or df["model"].nunique() > 1]
    if "suite" in df.columns and "suite" not in keys:
        at = keys.index("task") + 1 if "task" in keys else 0
        keys = [*keys[:at], "suite", *keys[at:]]
    return keys


def compute_tables(ds: Dataset, limits=tables.TURN_LIMITS, model: str | None = None,
                   by: list[str] | None = None) -> dict:
    """Every table of the report (raw frames and their display versions)."""
    t: dict = {}
    t["main"] = tables.main_table(ds, limits)
    t["main_display"] = tables.format_scores(t["main"], _keys(t["main"], ["model", "task", "arch", "lang", "turns"]))
    t["cells"] = tables.cell_stats(ds)
    t["cells_display"] = _with_mark(tables.format_cells(t["cells"]))
    t["turn_limits"] = tables.turn_limit_table(ds, limits)
    t["turn_limits_display"] = tables.format_scores(t["turn_limits"],
                                                    _keys(t["turn_limits"], ["model", "arch", "lang", "turns"]))
    t["docs"] = tables.docs_table(ds)
    t["docs_display"] = tables.format_scores(t["docs"], _keys(t["docs"], ["model", "task", "arch", "lang", "docs"]))
    t["notes"] = tables.notes_table(ds)
    t["notes_display"] = tables.format_scores(t["notes"], _keys(t["notes"], ["model", "task", "arch", "lang",
                                                                            "notes"]))
    t["notes_levels"] = sorted(ds.runs["notes"].unique()) if not ds.empty else []
    cells = tables.cell_keys(ds)
    t["metrics"] = metrics.metrics_table(ds, cells)
    t["metrics_display"] = metrics.format_metrics(t["metrics"], _keys(t["metrics"], cells))
    t["metrics_models"] = metrics.metrics_table(ds, ["model"])
    t["metrics_models_display"] = metrics.format_metrics(t["metrics_models"], ["model"])
    t["lang_arch_model"], t["lang_arch"] = tables.lang_arch_table(ds, model)
    t["lang_arch_display"] = t["lang_arch"]
    t["shapes"] = tables.shape_table(ds)
    t["shapes_display"] = tables.format_scores(t["shapes"], _keys(t["shapes"], ["model", "task", "arch", "lang", "D",
                                                                               "gqa"]))
    t["suites"] = suite_tables.suite_table(ds)
    t["suites_display"] = t["suites"]
    t["suite_shapes"] = suite_tables.suite_shape_table(ds)
    t["suite_shapes_display"] = t["suite_shapes"]
    t["errors"] = turn_tables.error_table(ds)
    t["errors_display"] = _counts_frame(t["errors"])
    t["transitions"] = turn_tables.transitions_table(ds)
    t["transitions_display"] = _pct_frame(t["transitions"], ["share"])
    t["tokens"] = turn_tables.tokens_table(ds)
    t["tokens_display"] = _round_frame(_pct_frame(t["tokens"], ["correct_with_arch_rate"]))
    t["cost"] = turn_tables.cost_table(ds)
    t["cost_display"] = _round_frame(t["cost"])
    t["samples"] = tables.per_sample(ds) if not ds.empty else pd.DataFrame()
    t["instruction_mix"] = mix.instruction_mix(ds)
    t["not_run"] = provenance.not_run(ds)
    t["environment"] = provenance.environment_table(ds)
    t["runs"] = ds.runs
    t["turns"] = ds.turns
    if by:
        t["custom"] = tables.score(ds, by, limits if "turns" in by else None)
        keys = [*[k for k in by if k != "turns"], *(["turns"] if "turns" in by else [])]
        t["custom_display"] = tables.format_scores(t["custom"], _keys(t["custom"], keys))
    return t


def write_report(ds: Dataset, out: Path, title: str | None = None, *, limits=tables.TURN_LIMITS,
                 model: str | None = None, by: list[str] | None = None, where: dict | None = None) -> Report:
    """Write the report of a dataset (already filtered; `where` is only printed) to the folder `out`."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    out = Path(out)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    (out / "data").mkdir(parents=True, exist_ok=True)
    t = compute_tables(ds, limits, model, by)
    archs, langs, tasks = (ds.archs(), ds.langs(), ds.tasks()) if not ds.empty else ([], [], [])

    plot_files = [
        (plots.speedup_plot(t["cells"], archs, langs, tasks, out / "plots" / "best_speedup.png"),
         "Best speedup per task × language × architecture",
         "Best speedup over the vendor baseline (cuBLAS / cuDNN, timed the same way) among candidates correct with "
         "the target instructions; whiskers: 95% bootstrap interval over the samples; dashed line: parity; hollow "
         "diamonds: the same candidates' best speedup over the task's fastest peer (FA4, quack), where one was "
         "timed. Panels without a device say why runtime was not run."),
        (plots.turn_limit_plot(t["turn_limits"], archs, langs, out / "plots" / "turn_limit.png"),
         "Correct and correct-with-target rates against the turn limit",
         "Share of sample runs with a correct candidate (solid) and with one correct with the target instructions "
         "(dashed) within 1, 4 and 8 turns, tasks pooled; where runtime was not run, the static census (dotted)."),
        (plots.error_plot(t["errors"], out / "plots" / "error_categories.png"),
         "Verdict categories per turn",
         "Share of the candidates at each turn index ending in each category (the first failing stage)."),
        (plots.transitions_plot(t["transitions"], out / "plots" / "transitions.png"),
         "Turn-to-turn transitions",
         "Rows: the category at turn t; columns: at turn t+1; colour: share of the row; numbers: counts."),
        *([(plots.tokens_plot(t["samples"], out / "plots" / "tokens_vs_speedup.png"),
            "Tokens against best speedup",
            "One point per sample: its completion tokens (reasoning included) and its best speedup among candidates "
            "correct with the target instructions (0: none).")] if plots.has_tokens(t["samples"]) else []),
        *([(plots.suite_plot(suite_tables.suite_shape_points(ds), out / "plots" / "suite_speedups.png"),
            "Speedup over the vendor per suite shape",
            "--suite runs: each cell's shown candidate (the suite tables') against the vendor at every shape of the "
            "suite, in the suite's order; dashed line: parity.")] if not t["suite_shapes"].empty else []),
        (plots.mix_plot(t["instruction_mix"], out / "plots" / "instruction_mix.png"),
         "SASS instruction mix per language",
         "Static SASS census of each run's best compiled candidate, per language and architecture."),
    ]

    engine = parquet_engine()
    stale = out / "plots" / "tokens_vs_speedup.png"  # from an earlier report into the same folder
    if not plots.has_tokens(t["samples"]) and stale.is_file():
        stale.unlink()
    stale = out / "plots" / "suite_speedups.png"
    if t["suite_shapes"].empty and stale.is_file():
        stale.unlink()
    report = Report(out, out / "index.html", out / "report.md", plots=[p for p, _, _ in plot_files], tables=t)
    for name in [*TABLE_FILES, *(["custom"] if by else [])]:
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

    banners = provenance.runtime_banners(ds)
    harness = provenance.harness_versions(ds)
    stats = t["cells"]
    done = ds.runs[ds.runs["status"] == "done"] if not ds.empty else ds.runs
    n_missing = int((ds.runs["status"] == "missing").sum()) if not ds.empty else 0
    summary = [
        ("sample runs finished" + (f" ({n_missing} more missing)" if n_missing else ""),
         f"{len(done)}/{len(ds.runs) - n_missing}"),
        ("candidates evaluated", str(len(ds.turns))),
        ("cells (task × arch × lang × model)", str(len(stats))),
        ("cells with runtime results", str(int(stats["runtime_ran"].sum())) if len(stats) else "0"),
        ("missing solutions", str(int(stats["missing"].sum())) if len(stats) else "0"),
        ("harness version of the verdicts", harness or (
            "none ran: static census only" if ds.turns.empty or not ds.turns["runtime_ran"].any()
            else "not recorded")),
    ]
    models = sorted(ds.runs["model"].dropna().unique()) if not ds.empty else []
    title = title or f"xlang report — {', '.join(langs) or 'no languages'} on {', '.join(archs) or 'no architecture'}"
    generated = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    files = [str(p.relative_to(out)) for p in [*report.csv, *report.parquet]] + ["report.md"]
    envs = [list(provenance._flatten(e).items()) for e in ds.environments]
    filters = ", ".join(f"{k}={'|'.join(v)}" for k, v in (where or {}).items())

    sections = []
    for name, heading, what, grouping in SECTIONS:
        if name == "notes" and len(t["notes_levels"]) < 2:
            continue  # one notes level: the ablation table would repeat the main one
        if name in ("suites", "suite_shapes") and t[name].empty:
            continue  # no run has a timed suite
        display = t[f"{name}_display"]
        if name == "lang_arch":
            heading += f" — {t['lang_arch_model'] or 'no model'}"
        sections.append({"id": f"{name}-table", "name": name, "title": heading, "what": what,
                         "command": f"xlang report {grouping}".strip() if grouping else "",
                         "table": _rows(display, "task" if "task" in display.columns else None),
                         "display": display})
    if by:
        sections.insert(0, {"id": "custom-table", "name": "custom", "title": f"By {', '.join(by)}",
                            "what": "The grouping asked for with --by.", "command": "xlang report --by " + ",".join(by),
                            "table": _rows(t["custom_display"], None), "display": t["custom_display"]})

    env = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                      autoescape=select_autoescape(["html", "j2"]))
    html = env.get_template("index.html.j2").render(
        title=title, generated=generated, source=ds.source or "(in memory)", models=models, filters=filters,
        n_runs=len(ds.runs), n_turns=len(ds.turns), banners=banners, summary=summary, definitions=DEFINITIONS,
        legend=marks.legend(),
        sections=sections,
        plots=[{"src": str(p.relative_to(out)), "alt": alt, "caption": cap} for p, alt, cap in plot_files],
        mix_table=_html_table(_pct_frame(t["instruction_mix"], mix.MIX_ORDER)),
        not_run_table=_html_table(t["not_run"]), environments=envs, files=files,
        parquet_note=report.parquet_note, version=_version(),
    )
    report.index.write_text(html)

    md = [f"# {title}\n", f"Generated {generated} from `{ds.source or '(in memory)'}`; models: "
          f"{', '.join(models) or '–'}; {len(ds.runs)} sample runs, {len(ds.turns)} evaluated candidates"
          + (f"; harness {harness}" if harness else "")
          + (f"; filter: {filters}" if filters else "") + ".\n"]
    md += [f"> **Not run.** {line}\n" for line in banners]
    md += [DEFINITIONS.replace("<b>", "**").replace("</b>", "**").replace("&gt;", ">") + "\n"]
    md += ["Legend:\n", "\n".join(f"- **{term}**: {text}" for term, text in marks.legend()) + "\n"]
    for s in sections:
        md += [f"## {s['title']}\n", s["what"] + (f" Same figures: `{s['command']}`." if s["command"] else "") + "\n",
               markdown_table(s["display"])]
    md += ["## Plots\n"] + [f"![{alt}]({p.relative_to(out)})\n" for p, alt, _ in plot_files]
    md += ["## SASS instruction mix per language\n", markdown_table(_pct_frame(t["instruction_mix"], mix.MIX_ORDER))]
    md += ["## What was not run\n", markdown_table(t["not_run"]) if len(t["not_run"]) else "Everything ran.\n"]
    md += ["## Environment fingerprints\n"]
    for i, e in enumerate(envs, 1):
        md += [f"### #{i}\n", markdown_table(pd.DataFrame(e, columns=["key", "value"]))]
    if not envs:
        md += ["No fingerprint recorded.\n"]
    md += ["## Files\n", "\n".join(f"- [{f}]({f})" for f in files) + "\n", report.parquet_note + "\n"]
    report.markdown.write_text("\n".join(md))
    return report


def _html_table(df: pd.DataFrame) -> str:
    if df.empty:
        return ""
    return df.to_html(index=False, border=0, escape=True, na_rep="–")
