"""The report's plots (matplotlib, Agg backend, PNG files)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from xlang.report.tables import MIX_ORDER, TURN_LIMITS

LANG_COLORS = {"triton": "#3b6fb6", "cuda_ptx": "#d9822b", "cutedsl": "#3f9b5a"}
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
    return LANG_COLORS.get(lang, "#888888")


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
    """Best speedup over the vendor baseline per task × language, one panel per architecture."""
    if not archs or not langs:
        return _empty(path, "no results in the store yet")
    plt = _plt()
    fig, axes = plt.subplots(1, max(1, len(archs)), figsize=(max(5.0, 4.2 * len(archs)), 3.6), squeeze=False,
                             sharey=True)
    width = 0.8 / max(1, len(langs))
    ymax = 1.2
    for ax, arch in zip(axes[0], archs):
        sub = stats[stats["arch"] == arch]
        ax.set_title(arch)
        ax.set_xticks(range(len(tasks)))
        ax.set_xticklabels(tasks, rotation=20, ha="right")
        ax.set_xlim(-0.5, len(tasks) - 0.5)
        ax.axhline(1.0, color="#999", lw=0.8, ls="--")
        if not sub["runtime_ran"].any():
            note = next((n for n in sub["runtime_note"] if n), "runtime not run")
            _note(ax, note + "\nstatic census only")
            continue
        for j, lang in enumerate(langs):
            xs, ys, labels = [], [], []
            for i, task in enumerate(tasks):
                row = sub[(sub["task"] == task) & (sub["lang"] == lang)]
                x = i - 0.4 + width * (j + 0.5)
                if row.empty:
                    continue
                r = row.iloc[0]
                if r["missing"]:
                    ax.text(x, 0.02, "missing", rotation=90, ha="center", va="bottom", fontsize=7, color="#999")
                elif r["n_speedup"] and not math.isnan(r["best_speedup"]):
                    xs.append(x)
                    ys.append(r["best_speedup"])
                    labels.append(f"{r['best_speedup']:.2f}")
                elif r["runtime_ran"]:
                    ax.text(x, 0.02, "none correct", rotation=90, ha="center", va="bottom", fontsize=7, color="#999")
            bars = ax.bar(xs, ys, width * 0.92, color=_color(lang), label=lang)
            ax.bar_label(bars, labels=labels, fontsize=7, padding=1)
            ymax = max([ymax, *[y * 1.18 for y in ys]])
        ax.set_ylim(0, ymax)
    axes[0][0].set_ylabel("best speedup vs vendor baseline (×)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=_color(lang)) for lang in langs]
    fig.legend(handles, langs, loc="upper center", ncol=len(langs), bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def turn_limit_plot(table: pd.DataFrame, archs: list[str], langs: list[str], path: Path) -> Path:
    """Correctness (solid) and correct-with-arch-instructions (dashed) rates against the turn limit."""
    if not archs or not langs:
        return _empty(path, "no results in the store yet")
    plt = _plt()
    n_lines = max(1, len(langs))
    fig, axes = plt.subplots(1, max(1, len(archs)), figsize=(max(5.0, 4.2 * len(archs)), 3.2 + 0.22 * n_lines),
                             squeeze=False, sharey=True)
    for ax, arch in zip(axes[0], archs):
        sub = table[table["arch"] == arch]
        ax.set_title(arch)
        ax.set_xticks(TURN_LIMITS)
        ax.set_xlim(0.5, TURN_LIMITS[-1] + 0.5)
        ax.set_ylim(-0.03, 1.05)
        ax.set_xlabel("turn limit")
        ax.yaxis.set_major_formatter(lambda v, _: f"{v * 100:.0f}%")
        ran = sub["n_runtime"].sum() > 0 if len(sub) else False
        for lang in langs:
            s = sub[sub["lang"] == lang].sort_values("turn_limit")
            if s.empty:
                continue
            if ran:
                ax.plot(s["turn_limit"], s["correctness_rate"], "-o", color=_color(lang), ms=4, label=f"{lang} correct")
                ax.plot(s["turn_limit"], s["correct_with_arch_rate"], "--s", color=_color(lang), ms=4,
                        label=f"{lang} correct with arch instructions")
            else:
                ax.plot(s["turn_limit"], s["static_rate"], ":^", color=_color(lang), ms=4,
                        label=f"{lang} static: required instructions in SASS")
        if not ran:
            ax.text(0.5, 0.08, "runtime not run: static census (dotted)", transform=ax.transAxes, ha="center",
                    fontsize=8, color="#666")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2 if ran else 1)
    axes[0][0].set_ylabel("share of sample runs")
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
