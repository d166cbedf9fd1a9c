"""The report's plots (matplotlib, Agg backend, PNG files)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from xlang.report.tables import TURN_LIMITS
from xlang.report.mix import MIX_ORDER
from xlang.report.turn_tables import category_order

MIX_COLORS = ["#c0392b", "#e67e22", "#8e44ad", "#d35400", "#2980b9", "#16a085", "#7f8c8d", "#27ae60", "#bdc3c7",
              "#ecf0f1"]
DPI = 110


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "font.size": 9, "axes.spines.top": False, "axes.spines.right": False, "axes.titleweight": "bold",
        "axes.titlesize": 10, "legend.frameon": False, "figure.facecolor": "white",
    })
    return plt


def _color(lang: str) -> str:
    from xlang.backend import backends

    backend = backends().get(lang)  # a language no longer installed still gets a colour
    return backend.color if backend is not None else "#888888"


def _note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=9, color="#666",
            wrap=True, bbox={"boxstyle": "round,pad=0.6", "fc": "#f6f6f6", "ec": "#ddd"})


def _empty(path: Path, text: str) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 2))
    ax.set_axis_off()
    _note(ax, text)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def speedup_plot(stats: pd.DataFrame, archs: list[str], langs: list[str], tasks: list[str], path: Path) -> Path:
    """Best speedup over the vendor baseline (among candidates correct with the target instructions) per task ×
    language, one panel per architecture and one row of panels per model; beside each bar, a marker at the best
    speedup over the task's fastest peer (FA4, quack) where one was timed."""
    if not archs or not langs:
        return _empty(path, "no results in the store yet")
    plt = _plt()
    fig = speedup_figure(stats, archs, langs, tasks)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


VALUE_LABEL = "value-label"  # the gid of each bar's value label (tests measure that none overlaps another)


def speedup_figure(stats: pd.DataFrame, archs: list[str], langs: list[str], tasks: list[str]):
    """The figure of speedup_plot. Each bar's value is written upright along the bar, inside it where the bar has
    room clear of its error bar and its peer marker, else just above both: labels never meet each other's or the
    markers (each stays within its own bar's width)."""
    plt = _plt()
    models = list(dict.fromkeys(stats["model"])) or [""]
    fig, axes = plt.subplots(len(models), max(1, len(archs)), figsize=(max(5.0, 4.2 * len(archs)),
                                                                       0.6 + 3.0 * len(models)),
                             squeeze=False, sharey=True, dpi=DPI)
    width = 0.8 / max(1, len(langs))
    ymax = 1.2
    any_peer = False
    labels = []  # (ax, x, value, text, lower error, upper error, peer or None)
    for row, model in zip(axes, models):
        for ax, arch in zip(row, archs):
            sub = stats[(stats["arch"] == arch) & (stats["model"] == model)]
            ax.set_title(f"{arch} · {model}" if len(models) > 1 else arch)
            ax.set_xticks(range(len(tasks)))
            ax.set_xticklabels(tasks, rotation=20, ha="right")
            ax.set_xlim(-0.5, len(tasks) - 0.5)
            ax.axhline(1.0, color="#999", lw=0.8, ls="--")
            if not sub["runtime_ran"].any():
                note = next((n for n in sub["runtime_note"] if n), "runtime not run")
                _note(ax, note + "\nstatic census only")
                continue
            for j, lang in enumerate(langs):
                xs, ys, errs = [], [], [[], []]
                peer_xs, peer_ys = [], []
                for i, task in enumerate(tasks):
                    hit = sub[(sub["task"] == task) & (sub["lang"] == lang)]
                    x = i - 0.4 + width * (j + 0.5)
                    if hit.empty:
                        continue
                    r = hit.iloc[0]
                    peer = None
                    if not r["missing"] and r.get("n_peer_speedup") and not math.isnan(r["best_peer_speedup"]):
                        peer = float(r["best_peer_speedup"])
                        peer_xs.append(x)
                        peer_ys.append(peer)
                    if r["missing"]:
                        ax.text(x, 0.02, "missing", rotation=90, ha="center", va="bottom", fontsize=7, color="#999")
                    elif r["n_speedup"] and not math.isnan(r["best_speedup"]):
                        best, lo, hi = float(r["best_speedup"]), r["best_speedup_lo"], r["best_speedup_hi"]
                        xs.append(x)
                        ys.append(best)
                        errs[0].append(0 if math.isnan(lo) else best - lo)
                        errs[1].append(0 if math.isnan(hi) else hi - best)
                        labels.append((ax, x, best, f"{best:.2f}", errs[0][-1], errs[1][-1], peer))
                    elif r["runtime_ran"]:
                        ax.text(x, 0.02, "none correct\nwith target", rotation=90, ha="center", va="bottom",
                                fontsize=7, color="#999")
                ax.bar(xs, ys, width * 0.92, color=_color(lang), label=lang, yerr=errs if xs else None,
                       error_kw={"lw": 0.8, "capsize": 2, "ecolor": "#444"})
                if peer_xs:  # × best peer, beside × vendor (the bar)
                    ax.scatter(peer_xs, peer_ys, **PEER_MARKER)
                    any_peer = True
                ymax = max([ymax, *[y * 1.18 for y in ys + peer_ys]])
        row[0].set_ylabel("best speedup (×)")
    # Where each label goes, in data units of the shared y axis: a label is about text_h tall (7 pt, 4 characters,
    # upright, on an axis about 2.3 in tall) and a marker about mark tall.
    text_h, mark, gap = 0.12 * ymax, 0.035 * ymax, 0.015 * ymax
    top = ymax
    placed = []
    for ax, x, value, text, err_lo, err_hi, peer in labels:
        blocked = [(value - err_lo - gap, value + err_hi + gap)]  # the error bar (inside and above the bar)
        if peer is not None:
            blocked.append((peer - mark - gap, peer + mark + gap))
        free, start = [], gap
        for lo, hi in sorted(blocked):
            if lo > start:
                free.append((start, min(lo, value - gap)))
            start = max(start, hi)
        room = [(lo, hi) for lo, hi in free if hi - lo >= text_h and hi <= value]
        if room:
            lo, hi = max(room, key=lambda seg: seg[1] - seg[0])
            placed.append((ax, x, (lo + hi) / 2, "center", text, "white"))
        else:
            above = max(hi for _, hi in blocked) + gap
            placed.append((ax, x, above, "bottom", text, "#222"))
            top = max(top, above + text_h + gap)
    for ax, x, y, va, text, colour in placed:
        ax.text(x, y, text, rotation=90, ha="center", va=va, fontsize=7, color=colour, gid=VALUE_LABEL, zorder=4)
    for ax in axes.flat:
        ax.set_ylim(0, top)
    handles = [plt.Rectangle((0, 0), 1, 1, color=_color(lang)) for lang in langs]
    names = list(langs)
    if any_peer:
        handles.append(plt.Line2D([], [], ls="", marker="D", markerfacecolor="none", markeredgecolor="#222"))
        names.append("× best peer")
    fig.legend(handles, names, loc="upper center", ncol=len(names), bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / (0.6 + 3.0 * len(models))))
    return fig


PEER_MARKER = {"marker": "D", "s": 16, "facecolors": "none", "edgecolors": "#222", "zorder": 3}


def turn_limit_plot(table: pd.DataFrame, archs: list[str], langs: list[str], path: Path) -> Path:
    """Correct (solid) and correct-with-target-instructions (dashed) rates against the turn limit, one panel per
    architecture and one row per model (the tasks pooled); the static census (dotted) where runtime was not run."""
    if not archs or not langs or table.empty:
        return _empty(path, "no results in the store yet")
    plt = _plt()
    models = list(dict.fromkeys(table["model"]))
    n_lines = max(1, len(langs))
    fig, axes = plt.subplots(len(models), max(1, len(archs)),
                             figsize=(max(5.0, 4.2 * len(archs)), (3.2 + 0.22 * n_lines) * len(models)),
                             squeeze=False, sharey=True)
    for row, model in zip(axes, models):
        for ax, arch in zip(row, archs):
            sub = table[(table["arch"] == arch) & (table["model"] == model)]
            ax.set_title(f"{arch} · {model}" if len(models) > 1 else arch)
            ax.set_xticks(TURN_LIMITS)
            ax.set_xlim(0.5, TURN_LIMITS[-1] + 0.5)
            ax.set_ylim(-0.03, 1.05)
            ax.set_xlabel("turn limit")
            ax.yaxis.set_major_formatter(lambda v, _: f"{v * 100:.0f}%")
            ran = sub["n_runtime"].sum() > 0 if len(sub) else False
            for lang in langs:
                s = sub[sub["lang"] == lang].sort_values("turns")
                if s.empty:
                    continue
                if ran:
                    ax.plot(s["turns"], s["correctness_rate"], "-o", color=_color(lang), ms=4, label=f"{lang} correct")
                    ax.plot(s["turns"], s["correct_with_arch_rate"], "--s", color=_color(lang), ms=4,
                            label=f"{lang} correct with target instructions")
                else:
                    ax.plot(s["turns"], s["static_rate"], ":^", color=_color(lang), ms=4,
                            label=f"{lang} static: required instructions in SASS")
            if not ran:
                ax.text(0.5, 0.08, "runtime not run: static census (dotted)", transform=ax.transAxes, ha="center",
                        fontsize=8, color="#666")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2 if ran else 1)
        row[0].set_ylabel("share of sample runs")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def mix_plot(mix: pd.DataFrame, path: Path) -> Path:
    """Stacked horizontal bars: the SASS instruction mix of each language on each architecture."""
    if mix.empty:
        return _empty(path, "no compiled candidate")
    plt = _plt()
    rows = list(mix.itertuples(index=False))
    fig, ax = plt.subplots(figsize=(10, 0.9 + 0.42 * max(1, len(rows))))
    labels = [f"{r.lang} · {r.arch}  ({r.candidates} cand., {r.instructions} instr.)" for r in rows]
    left = [0.0] * len(rows)
    for color, cls in zip(MIX_COLORS, MIX_ORDER):
        vals = [float(mix.iloc[i][cls]) for i in range(len(rows))]
        ax.barh(range(len(rows)), vals, left=left, color=color, label=cls, edgecolor="white", lw=0.5)
        for i, v in enumerate(vals):
            if v >= 0.06:
                ax.text(left[i] + v / 2, i, f"{v * 100:.0f}%", ha="center", va="center", fontsize=7,
                        color="white" if cls != MIX_ORDER[-1] else "#333")
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(lambda v, _: f"{v * 100:.0f}%")
    if not rows:
        _note(ax, "no compiled candidate")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12 if len(rows) > 2 else -0.25), ncol=4, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


CATEGORY_COLORS = {"no_code": "#6e7781", "compile_error": "#cf222e", "forbidden_call": "#8250df",
                   "missing_instructions": "#bc4c00", "runtime_error": "#e16f24", "timeout": "#d4a72c",
                   "incorrect": "#fa4549", "host_compute": "#953800", "memory_error": "#a475f9",
                   "not_executed": "#d29922", "ok": "#2da44e",
                   "static_ok": "#54aeff", "harness_error": "#d0d7de", "no reply": "#afb8c1"}


def error_plot(errors: pd.DataFrame, path: Path) -> Path:
    """Stacked bars: the share of each verdict category at each turn, one panel per model."""
    if errors.empty:
        return _empty(path, "no evaluated candidate")
    plt = _plt()
    models = list(dict.fromkeys(errors["model"]))
    cats = category_order([c for c in errors.columns if c in CATEGORY_COLORS])
    fig, axes = plt.subplots(1, len(models), figsize=(max(5.0, 4.6 * len(models)), 3.8), squeeze=False, sharey=True)
    for ax, model in zip(axes[0], models):
        sub = errors[errors["model"] == model].sort_values("turn")
        bottom = [0.0] * len(sub)
        for cat in cats:
            share = (sub[cat] / sub["n"]).tolist()
            ax.bar(sub["turn"], share, bottom=bottom, color=CATEGORY_COLORS[cat], label=cat, width=0.8,
                   edgecolor="white", lw=0.4)
            bottom = [b + v for b, v in zip(bottom, share)]
        for t, n in zip(sub["turn"], sub["n"]):
            ax.text(t, 1.01, f"n={n}", ha="center", va="bottom", fontsize=7, color="#555")
        ax.set_title(model)
        ax.set_xlabel("turn")
        ax.set_xticks(sub["turn"])
        ax.set_ylim(0, 1.08)
        ax.yaxis.set_major_formatter(lambda v, _: f"{v * 100:.0f}%")
    axes[0][0].set_ylabel("share of candidates")
    handles = [plt.Rectangle((0, 0), 1, 1, color=CATEGORY_COLORS[c]) for c in cats]
    fig.legend(handles, cats, loc="lower center", ncol=min(6, len(cats)), fontsize=7)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def transitions_plot(transitions: pd.DataFrame, path: Path) -> Path:
    """Heat maps of turn-to-turn transitions (share of the transitions from each category), one per model."""
    if transitions.empty:
        return _empty(path, "no sample with more than one turn")
    plt = _plt()
    models = list(dict.fromkeys(transitions["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(max(5.0, 5.2 * len(models)), 4.6), squeeze=False)
    for ax, model in zip(axes[0], models):
        sub = transitions[transitions["model"] == model]
        cats = category_order(set(sub["from"]) | set(sub["to"]))
        grid = sub.pivot_table(index="from", columns="to", values="share", fill_value=0.0)
        grid = grid.reindex(index=cats, columns=cats, fill_value=0.0)
        counts = sub.pivot_table(index="from", columns="to", values="count", fill_value=0)
        counts = counts.reindex(index=cats, columns=cats, fill_value=0)
        ax.imshow(grid.values, cmap="Blues", vmin=0, vmax=1)
        for i in range(len(cats)):
            for j in range(len(cats)):
                if counts.values[i, j]:
                    ax.text(j, i, f"{int(counts.values[i, j])}", ha="center", va="center", fontsize=7,
                            color="white" if grid.values[i, j] > 0.55 else "#222")
        ax.set_xticks(range(len(cats)))
        ax.set_xticklabels(cats, rotation=40, ha="right", fontsize=7)
        ax.set_yticks(range(len(cats)))
        ax.set_yticklabels(cats, fontsize=7)
        ax.set_xlabel("category at turn t+1")
        ax.set_ylabel("category at turn t")
        ax.set_title(model)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _token_points(samples: pd.DataFrame) -> pd.DataFrame:
    """The samples whose model was called: a token count above 0 (the reference model and replays call none)."""
    if samples.empty:
        return samples
    return samples[pd.to_numeric(samples["completion_tokens"], errors="coerce").fillna(0) > 0]


def has_tokens(samples: pd.DataFrame) -> bool:
    """Whether a tokens plot has anything to show (the report leaves it out otherwise)."""
    return not _token_points(samples).empty


def tokens_plot(samples: pd.DataFrame, path: Path) -> Path:
    """One point per sample: completion tokens (reasoning included) against its best speedup among candidates
    correct with the target instructions (0: none), coloured by model; samples that called no model are left out."""
    pts = _token_points(samples)
    if pts.empty:
        return _empty(path, "no token counts recorded (reference or replayed runs)")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    palette = ["#3b6fb6", "#d9822b", "#3f9b5a", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d"]
    for i, (model, g) in enumerate(pts.groupby("model", sort=True)):
        ax.scatter(g["completion_tokens"], g["best_speedup"].fillna(0.0), s=18, alpha=0.8,
                   color=palette[i % len(palette)], label=model, edgecolor="white", lw=0.4)
    ax.axhline(1.0, color="#999", lw=0.8, ls="--")
    ax.set_xlabel("completion tokens per sample (reasoning included)")
    ax.set_ylabel("best speedup, correct with target (×; 0: none)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def suite_plot(points: pd.DataFrame, path: Path) -> Path:
    """--suite: the speedup over the vendor at each shape of a suite (suite_tables.suite_shape_points: each cell's shown
    candidate), one panel per task × suite × architecture, one series per language (and model, where several),
    shapes in the suite's order."""
    if points.empty:
        return _empty(path, "no suite was timed")
    plt = _plt()
    panels = list(points.groupby(["task", "suite", "arch"], sort=False))
    fig, axes = plt.subplots(len(panels), 1, figsize=(9.0, 2.9 * len(panels)), squeeze=False, dpi=DPI)
    several_models = points["model"].nunique() > 1
    for ax, ((task, suite, arch), panel) in zip(axes[:, 0], panels):
        labels = list(dict.fromkeys(f"{s.label} {s.shape}" for s in panel.itertuples()))
        x_of = {text: i for i, text in enumerate(labels)}
        for (lang, model), series in panel.groupby(["lang", "model"], sort=False):
            xs = [x_of[f"{s.label} {s.shape}"] for s in series.itertuples()]
            ax.plot(xs, series["speedup"], marker="o", ms=3.5, lw=1.0, color=_color(lang),
                    label=f"{lang} · {model}" if several_models else lang)
        ax.axhline(1.0, color="#999", lw=0.8, ls="--")
        ax.set_title(f"{task} · suite {suite} · {arch}")
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=6)
        ax.set_ylabel("× vendor")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
