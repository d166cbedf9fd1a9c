"""The report's layout (issue 37, item 5): the best-speedup plot's value labels never overlap each other or the
peer markers; a static-only report does not say "harness not recorded"; no empty tokens plot for runs that called
no model. The HTML tables' width is measured in Chromium (tests/test_browser.py)."""

from __future__ import annotations

import itertools

import pandas as pd
from matplotlib.collections import PathCollection

from report_records import records
from xlang.report import plots, tables, write_report
from xlang.report.data import from_records

TASKS = ["attn_bwd", "attn_bwd_causal", "attn_fwd", "attn_fwd_causal", "gemm"]
LANGS = ["triton", "gluon", "cuda_ptx", "cutedsl"]


def _crowded_stats() -> pd.DataFrame:
    """The published reference report's shape of data: four languages per task, speedups close together and a
    peer marker beside almost every bar, at and around the bar's top; one cell with an error bar, one short bar."""
    rows = []
    for (i, task), (j, lang) in itertools.product(enumerate(TASKS), enumerate(LANGS)):
        best = 0.77 + 0.05 * ((i + j) % 5)
        peer = best + (-0.05, 0.0, 0.04, -0.4)[(i * 3 + j) % 4]
        lo, hi = (best - 0.2, best + 0.05) if (i, j) == (2, 1) else (float("nan"), float("nan"))
        if (i, j) == (4, 3):
            best, peer = 0.12, 0.13
        rows.append({"task": task, "lang": lang, "arch": "h100", "model": "reference", "runtime_ran": True,
                     "runtime_note": "", "missing": lang == "gluon" and task.startswith("attn_bwd"),
                     "n_speedup": 1, "best_speedup": best, "best_speedup_lo": lo, "best_speedup_hi": hi,
                     "n_peer_speedup": 1, "best_peer_speedup": peer})
    rows += [{**r, "arch": "b200", "runtime_ran": False, "runtime_note": "not run (no sm_100a device)",
              "n_speedup": 0, "n_peer_speedup": 0} for r in rows]
    return pd.DataFrame(rows)


def test_speedup_plot_labels_do_not_overlap():
    plt = plots._plt()
    fig = plots.speedup_figure(_crowded_stats(), ["h100", "b200"], LANGS, TASKS)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        labels = [t for ax in fig.axes for t in ax.texts if t.get_gid() == plots.VALUE_LABEL]
        assert len(labels) == 4 * 5 - 2  # every bar but the two missing ones
        boxes = [t.get_window_extent(renderer) for t in labels]
        for a, b in itertools.combinations(boxes, 2):
            assert not a.overlaps(b), (a, b)
        markers = []
        for ax in fig.axes:
            for coll in ax.collections:
                if isinstance(coll, PathCollection) and coll.get_offsets().size:  # the peer scatter
                    side = (coll.get_sizes()[0] ** 0.5) * fig.dpi / 72
                    for x, y in ax.transData.transform(coll.get_offsets()):
                        markers.append((x - side / 2, y - side / 2, x + side / 2, y + side / 2))
        assert len(markers) >= 18
        for box, (x0, y0, x1, y1) in itertools.product(boxes, markers):
            assert box.x1 <= x0 or box.x0 >= x1 or box.y1 <= y0 or box.y0 >= y1, (box, (x0, y0, x1, y1))
        for box, t in zip(boxes, labels):  # inside the axes, not over the title or the legend
            assert t.axes.get_window_extent(renderer).contains(box.x0, box.y1)
    finally:
        plt.close(fig)


def test_a_static_only_report_does_not_say_harness_not_recorded(tmp_path):
    static = [r for r in records() if r["arch"] == "b200"]
    rep = write_report(from_records(static), tmp_path / "out")
    html = rep.index.read_text()
    assert "not recorded" not in html and "none ran: static census only" in html


def test_no_tokens_plot_for_runs_that_called_no_model(tmp_path):
    rep = write_report(from_records(records()), tmp_path / "out")
    assert not any(p.name == "tokens_vs_speedup.png" for p in rep.plots)
    assert "tokens_vs_speedup.png" not in rep.index.read_text()
    with_tokens = records()
    for r in with_tokens:
        for t in r["turns"]:
            t["completion_tokens"] = 1200
    rep = write_report(from_records(with_tokens), tmp_path / "out2")
    assert any(p.name == "tokens_vs_speedup.png" for p in rep.plots)
    assert tables.per_sample(from_records(with_tokens))["completion_tokens"].max() > 0
