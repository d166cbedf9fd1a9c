"""What `xlang compare`, `run` and `rejudge` print of a result: the cells table (rich), the shape suites' summary and
per-shape tables, and the JSON of --json."""

from __future__ import annotations
import json
from dataclasses import asdict
from xlang.compare import CompareResult


SHORT_HEADERS = {"target instr. in SASS": "in SASS", "correct with target instr.": "correct + target",
                 "best speedup (correct with target)": "best× target", "best speedup (all correct)": "best× all"}


def print_table(result: CompareResult, console, title: str = "") -> None:
    from rich import box
    from rich.table import Table

    from xlang.report import marks, provenance, tables
    from xlang.terminal import column_groups, keep_words

    outcomes = {m: o for o, m in marks.MARKS.items()}

    display = tables.format_cells(result.stats)
    # A "not run (why)" reason is said once, as a footnote, not in each of a row's runtime columns; so is a model's
    # whole name where the table shows a short label (a replay's store path and run, a candidate file's path).
    notes: dict[str, str] = {}
    supers = "¹²³⁴⁵⁶⁷⁸⁹"

    def note(text: str) -> str:
        if text not in notes:
            notes[text] = supers[len(notes)] if len(notes) < len(supers) else f"[{len(notes) + 1}]"
        return notes[text]

    def short(column: str, text: str) -> str:
        if column == "model" and tables.model_label(text) != text:
            return tables.model_label(text) + note(text)
        return f"not run{note(text)}" if text.startswith("not run") else text

    headers = [SHORT_HEADERS.get(c, c) for c in display.columns]
    rows = [[short(c, str(row[c])) for c in display.columns] for _, row in display.iterrows()]
    # No vertical rules; a table wider than the terminal even with every column at its longest word is split
    # into parts, each repeating task, arch and lang, rather than cutting words.
    title = title or "xlang compare"
    keys = list(display.columns).index("n")  # task, [shape,] arch, lang[, model]: repeated in each part
    for n, part in enumerate(column_groups(headers, rows, keys, console.width)):
        table = Table(title=title if n == 0 else f"{title} (continued)", show_lines=False, header_style="bold",
                      box=box.SIMPLE_HEAD, show_edge=False)
        for i in part:
            col = display.columns[i]
            table.add_column(headers[i], justify="right" if col == "n" or "speedup" in col or col in
                             (*tables.SPEED_COLUMNS, *tables.THROUGHPUT_COLUMNS) else "left", no_wrap=i < keys)
        for k, row in enumerate(rows):
            if k and row[0] != rows[k - 1][0]:
                table.add_section()
            cells = []
            for i in part:
                text = row[i]
                style = "dim" if text == "missing" else "yellow" if text.startswith("not run") else \
                    marks.COLOURS.get(outcomes.get(text), "") if display.columns[i] == tables.COL_MARK else ""
                cells.append(f"[{style}]{text}[/{style}]" if style else text)
            table.add_row(*cells)
        console.print(keep_words(table, console))
    for text, mark in notes.items():
        console.print(f"[yellow]{mark}[/yellow] {text}", highlight=False)
    column = {c: i for i, c in enumerate(display.columns)}
    legend = legend_line({row[column[tables.COL_MARK]] for row in rows}, {row[column[tables.COL_VERDICT]] for row in rows})
    if legend:
        console.print(legend, highlight=False)
    for line in provenance.runtime_banners(result.dataset):
        console.print(f"[yellow]not run:[/yellow] {line}", highlight=False)
    print_suites(result.dataset, console)


def legend_line(shown: set[str], verdicts: set[str]) -> str:
    """The marks the table shows, and static_ok where it does, defined in one line under it (xlang.report.marks)."""
    from xlang.report import marks  # lazy, as in print_table: the report package imports pandas

    text = {marks.PASS: "passed (ok, static_ok)", marks.FAIL: "finished but failed",
            marks.NONE: f"no verdict (not run, missing, {marks.HARNESS_ERROR})"}
    parts = [f"{marks.MARKS[o]} {t}" for o, t in text.items() if marks.MARKS[o] in shown]
    if any("static_ok" in v for v in verdicts):
        parts.append("static_ok: built with the required families in its SASS, no GPU of the arch ran it")
    return "[dim]" + " · ".join(parts) + "[/dim]" if parts else ""


def print_suites(dataset, console) -> None:
    """--suite: per cell, one line of its shown candidate's suite summary, then its per-shape table (nothing when
    no suite was timed). Split and wrapped between words like the main table, never cut."""
    from rich import box
    from rich.table import Table

    from xlang.report import suite_tables
    from xlang.terminal import column_groups, keep_words

    shapes = suite_tables.suite_shape_table(dataset)
    for r in suite_tables.suite_table(dataset).to_dict("records"):
        key = " · ".join(str(r[k]) for k in suite_tables.SUITE_KEY)
        console.print(f"[bold]suite {key}[/bold]: {r['candidate']} (correct with target: {r['with target']}), "
                      f"{r['shapes']} shapes, geomean {r['geomean× vendor']}× vendor, time-weighted "
                      f"{r['time-weighted× vendor']}×, worst {r['worst shape']}, TFLOP/s {r['TFLOP/s (min–max)']}",
                      highlight=False)
        mine = shapes
        for k in suite_tables.SUITE_KEY:
            mine = mine[mine[k] == r[k]]
        headers = list(suite_tables.SUITE_SHAPE_TABLE_COLUMNS[len(suite_tables.SUITE_KEY):])
        rows = [[str(row[h]).replace(",", ", ") if h == "shape" else str(row[h]) for h in headers]
                for row in mine.to_dict("records")]
        for n, part in enumerate(column_groups(headers, rows, 2, console.width)):
            table = Table(title=f"per shape{' (continued)' if n else ''}", header_style="bold", box=box.SIMPLE_HEAD,
                          show_edge=False)
            for i in part:
                table.add_column(headers[i], justify="left" if i < 2 else "right")
            for row in rows:
                table.add_row(*[row[i] for i in part])
            console.print(keep_words(table, console))


def to_json(result: CompareResult) -> dict:
    return {"cells": [{**asdict(o.cell), "state": o.state, "seconds": round(o.seconds, 3), "summary": o.summary}
                      for o in result.cells],
            "table": json.loads(result.stats.to_json(orient="records"))}
